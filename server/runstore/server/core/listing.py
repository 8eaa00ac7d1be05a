"""ListSessions and ListRuns (docs/contract.md §9.8): page sizes, page tokens
and the filters' rules, dialect-free.

Pages are cut by keyset, never by offset: a listing is ordered by an
immutable key (``created_at`` or ``started_at``, then the ID, which is unique),
and a page token holds the key of the last row returned. The next page reads
the rows after that key, so a walk returns every row that existed when it began
exactly once, whatever is inserted meanwhile, and a page costs the same at any
depth. The token also holds a digest of the filters, so a token is only
accepted with the filters that produced it (AIP-158).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from runstore.contract.errors import ReadArgumentError
from runstore.contract.model import (
    ListPage,
    RunFilter,
    RunStatus,
    SessionFilter,
    SessionStatus,
    StatusCount,
)
from runstore.server.core import input_rules, page_tokens
from runstore.server.core.model import Nanos, PageKey, RunState, Session
from runstore.server.core.ports import Counted, Transaction
from runstore.server.core.section import Section

DEFAULT_PAGE_SIZE: Final = 100
"""Rows per page when the request's ``page_size`` is 0."""

MAX_PAGE_SIZE: Final = 1000
"""A larger ``page_size`` is lowered to this (AIP-158)."""

E = TypeVar("E", SessionStatus, RunStatus)
Row = TypeVar("Row", Session, RunState)
Query = TypeVar("Query", SessionFilter[Nanos], RunFilter[Nanos])


def page_size(requested: int) -> int:
    """AIP-158: 0 is the default, too large is the maximum, negative is an error."""
    if requested < 0:
        raise ReadArgumentError("page_size must not be negative", field="page_size")
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    return min(requested, MAX_PAGE_SIZE)


def status_filter(statuses: Collection[E] | None, every: Collection[E]) -> frozenset[E] | None:
    """None when the filter keeps every status (so no index on status is needed)."""
    if statuses is None:
        return None
    kept = frozenset(statuses)
    return None if kept >= frozenset(every) else kept


def session_filter_digest(query: SessionFilter[Nanos]) -> str:
    statuses = sorted(s.value for s in query.statuses) if query.statuses is not None else None
    return page_tokens.filter_digest(
        "sessions",
        [
            statuses,
            query.created_after,
            query.created_before,
            *_given(
                session_id=query.session_id,
                session_id_prefix=query.session_id_prefix,
                newest_first=query.newest_first,
            ),
        ],
    )


def run_filter_digest(query: RunFilter[Nanos]) -> str:
    statuses = sorted(s.value for s in query.statuses) if query.statuses is not None else None
    return page_tokens.filter_digest(
        "runs",
        [
            query.session_id,
            query.agent_id,
            statuses,
            query.started_after,
            query.started_before,
            query.sessionless_only,
            *_given(
                run_id=query.run_id,
                run_id_prefix=query.run_id_prefix,
                agent_id_prefix=query.agent_id_prefix,
                labels=dict(sorted(query.labels.items())),
                root_only=query.root_only,
                parent_run_id=query.parent_run_id,
                newest_first=query.newest_first,
            ),
        ],
    )


_KEY_SHAPE: Final = {"t": int, "id": str}
"""A listing's position: the last row's time and ID."""


def _given(**filters: object) -> list[object]:
    """Filters added after the first release, in the digest only when one is
    given: a token issued before they existed stays valid for its listing."""
    return [filters] if any(filters.values()) else []


def encode_token(digest: str, key: PageKey) -> str:
    """An opaque token: the last key returned and the filters' digest."""
    return page_tokens.encode(digest, {"t": key[0], "id": key[1]})


def decode_token(digest: str, token: str) -> PageKey | None:
    """The key after which the page starts; None for the first page."""
    position = page_tokens.decode(digest, token, _KEY_SHAPE)
    return None if position is None else (position["t"], position["id"])


def _empty_range(after: Nanos | None, before: Nanos | None) -> bool:
    return after is not None and before is not None and after >= before


def _one_of(exact: str, prefix: str, exact_field: str, prefix_field: str) -> None:
    """An exact ID and a prefix of one ID are two ways to say one thing."""
    input_rules.check_ids(**{exact_field: exact, prefix_field: prefix})
    if exact and prefix:
        raise ReadArgumentError(
            f"{prefix_field} is a prefix of {exact_field}; give one of them", field=prefix_field
        )


def _check_labels(labels: Mapping[str, str]) -> None:
    for key, value in labels.items():
        if not key:
            raise ReadArgumentError("a label filter needs a key (key=value)", field="labels")
        input_rules.check_ids(**{"labels.key": key, "labels.value": value})


@dataclass(frozen=True)
class Listing(Generic[Query, Row]):
    """The rules of one listing call, before and after its query."""

    query: Query
    """The filters as the database applies them (statuses normalised)."""
    size: int
    after: PageKey | None
    """The key after which the page starts; None for the first page."""
    matches_nothing: bool
    """The filters exclude every row: no query needed."""
    _digest: str
    _key: Callable[[Row], PageKey]

    def page(self, rows: list[Row]) -> ListPage[Row]:
        """``rows`` were fetched with one more than a page, to tell if more follow."""
        if len(rows) <= self.size:
            return ListPage(rows)
        return ListPage(
            rows[: self.size], encode_token(self._digest, self._key(rows[self.size - 1]))
        )


def session_listing(
    query: SessionFilter[Nanos], size: int, token: str
) -> Listing[SessionFilter[Nanos], Session]:
    """ListSessions (§9.8.1): by created_at, then session ID."""
    _one_of(query.session_id, query.session_id_prefix, "session_id", "session_id_prefix")
    digest = session_filter_digest(query)
    statuses = status_filter(query.statuses, list(SessionStatus))
    return Listing(
        dataclasses.replace(query, statuses=statuses),
        page_size(size),
        decode_token(digest, token),
        statuses == frozenset() or _empty_range(query.created_after, query.created_before),
        digest,
        lambda session: (session.created_at, session.id),
    )


def run_listing(
    query: RunFilter[Nanos], size: int, token: str
) -> Listing[RunFilter[Nanos], RunState]:
    """ListRuns (§9.8.2): by started_at, then run ID."""
    if query.sessionless_only and query.session_id:
        raise ReadArgumentError(
            "sessionless_only lists runs without a session; do not also give session_id",
            field="sessionless_only",
        )
    _one_of(query.run_id, query.run_id_prefix, "run_id", "run_id_prefix")
    _one_of(query.agent_id, query.agent_id_prefix, "agent_id", "agent_id_prefix")
    input_rules.check_ids(parent_run_id=query.parent_run_id)
    if query.parent_run_id and query.root_only:
        raise ReadArgumentError(
            "root_only lists runs without a parent; do not also give parent_run_id",
            field="parent_run_id",
        )
    _check_labels(query.labels)
    digest = run_filter_digest(query)
    statuses = status_filter(query.statuses, list(RunStatus))
    return Listing(
        dataclasses.replace(query, statuses=statuses),
        page_size(size),
        decode_token(digest, token),
        statuses == frozenset() or _empty_range(query.started_after, query.started_before),
        digest,
        lambda run: (run.started_at, run.run_id),
    )


COUNT_CAP: Final = 10_000
"""A status count stops here and is then a lower bound (``estimated``): each
count reads at most this many index entries, whatever the table's size."""


def _counts(found: Mapping[Any, Counted], every: Collection[Any]) -> list[StatusCount]:
    """One count per status in the enum's order; one that stopped at the cap
    is a lower bound, marked ``estimated``."""
    counts = []
    for status in every:
        counted = found.get(status, Counted(0, True))
        estimated = not counted.complete or counted.matched > COUNT_CAP
        counts.append(StatusCount(status.value, min(counted.matched, COUNT_CAP), estimated))
    return counts


class Listings(Section):
    """The listings of §9.8 over a ``Database``."""

    async def list_sessions(
        self,
        query: SessionFilter[Nanos],
        page_size: int,
        page_token: str,
        count_statuses: bool = False,
    ) -> ListPage[Session]:
        """§9.8.1: live sessions by created_at, then ID; keyset pages."""
        listing = session_listing(query, page_size, page_token)
        input_rules.check_page_key(listing.after)
        counted = dataclasses.replace(listing.query, statuses=None)

        async def tx_fn(tx: Transaction) -> tuple[list[Session], list[StatusCount]]:
            rows = (
                []
                if listing.matches_nothing
                else await tx.list_sessions(listing.query, listing.after, listing.size + 1)
            )
            if not count_statuses:
                return rows, []
            found = await tx.count_sessions(counted, COUNT_CAP + 1)
            return rows, _counts(found, list(SessionStatus))

        return await self._listed(listing, tx_fn, count_statuses)

    async def list_runs(
        self,
        query: RunFilter[Nanos],
        page_size: int,
        page_token: str,
        count_statuses: bool = False,
    ) -> ListPage[RunState]:
        """§9.8.2: runs by started_at, then run ID; keyset pages."""
        input_rules.check_ids(session_id=query.session_id, agent_id=query.agent_id)
        listing = run_listing(query, page_size, page_token)
        input_rules.check_page_key(listing.after)
        counted = dataclasses.replace(listing.query, statuses=None)

        async def tx_fn(tx: Transaction) -> tuple[list[RunState], list[StatusCount]]:
            rows = (
                []
                if listing.matches_nothing
                else await tx.list_runs(listing.query, listing.after, listing.size + 1)
            )
            if not count_statuses:
                return rows, []
            found = await tx.count_runs(counted, COUNT_CAP + 1)
            return rows, _counts(found, list(RunStatus))

        return await self._listed(listing, tx_fn, count_statuses)

    async def _listed(
        self,
        listing: Listing[Any, Row],
        fetch: Callable[[Transaction], Coroutine[Any, Any, tuple[list[Row], list[StatusCount]]]],
        count_statuses: bool,
    ) -> ListPage[Row]:
        """One page read in one snapshot, with one row more than the page, and
        the counts in the same snapshot."""
        if listing.matches_nothing and not count_statuses:
            return ListPage([])
        rows, counts = await self._db.read(fetch)
        return dataclasses.replace(listing.page(rows), status_counts=counts)
