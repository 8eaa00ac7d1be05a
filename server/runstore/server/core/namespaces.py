"""Namespaces: which exist (``NamespaceDirectory``, what the interceptor chain
asks on every call) and their administration (``NamespaceStore``, behind
``runstore.v1.NamespaceAdmin``), including the background purge of a deleted
namespace's data (docs/namespaces.md)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final, TypeVar

from runstore.contract.errors import (
    NamespaceExistsError,
    NamespaceNotFoundError,
    NamespaceProtectedError,
    NamespaceTombstonedError,
    ReadArgumentError,
    ValidationError,
)
from runstore.contract.namespaces import DEFAULT, NAME_RULE, is_valid_name
from runstore.server import call_scope
from runstore.server.backoff import Backoff
from runstore.server.call_scope import ALL_NAMESPACES
from runstore.server.core import page_tokens
from runstore.server.core.listing import page_size
from runstore.server.core.model import Nanos
from runstore.server.core.namespace_model import ACTIVE, DELETING, Namespace
from runstore.server.core.ports import Database, Transaction

log = logging.getLogger(__name__)

T = TypeVar("T")

REFRESH_SECONDS: Final = 2.0
"""How old the set of active namespaces a replica checks calls against may be:
a namespace created or deleted on another replica is seen within this long
(on the replica that made the change, at once)."""

PURGE_BATCH_ROWS: Final = 1000
"""Rows one purge transaction deletes at most, so a namespace of any size is
deleted without one long transaction holding locks or the SQLite writer."""

PURGE_DELAY_SECONDS: Final = REFRESH_SECONDS + 1.0
"""How long after a deletion its purge starts: by then every replica has seen
the namespace gone and ended its Watch streams with NAMESPACE_NOT_FOUND, so
none of them ends instead because a poll found its run or session purged."""

PURGE_BACKOFF: Final = Backoff(0.25, 30.0)
"""Pauses between a purge's failed batches: from 0.25 to 0.5 s, doubling up to
30 s, half of each random, so replicas purging one namespace do not retry in
lockstep."""

MAX_DESCRIPTION_CHARS: Final = 1024

CHANGEABLE: Final = (
    "description",
    "retain_ended_sessions_s",
    "retain_sessionless_runs_s",
    "quota_writes_per_s",
    "quota_reads_per_s",
    "quota_watch_streams",
    "quota_stored_bytes",
)
"""The fields UpdateNamespace may change (``Namespace`` attribute names)."""


class NamespaceDirectory:
    """The active namespaces and their settings (quotas), read from the
    ``namespaces`` table at most every ``refresh_seconds`` and shared by every
    call of this replica; changes this replica makes apply to it at once.
    ``default`` is always active. ``on_gone`` callbacks learn of each
    namespace that stops being active (deleted here, or seen gone by a
    refresh), so its open Watch streams end (docs/namespaces.md)."""

    def __init__(
        self,
        db: Database,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._active: frozenset[str] = frozenset({DEFAULT})
        self._rows: dict[str, Namespace] = {}
        self._loaded_at: float | None = None
        self._loading: asyncio.Future[None] | None = None
        self._changed_while_loading: dict[str, Namespace | bool] = {}
        """What this replica changed while a read was in flight (a row, True
        for created without one, False for deleted): the read's snapshot may
        predate it, so it is applied again on top of the read."""
        self._gone: list[Callable[[str], None]] = []

    @property
    def refresh_seconds(self) -> float:
        return self._refresh_seconds

    async def left_deleting(self) -> list[str]:
        """The namespaces a stopped replica left half purged (read at start)."""
        return await _over_all(self._db.read, _deleting_names)

    async def is_active(self, name: str) -> bool:
        """Whether calls may act in ``name`` (as of at most ``refresh_seconds`` ago)."""
        if name == DEFAULT:
            return True
        if self.stale():
            await self.refresh()
        return name in self._active

    def stale(self, seconds: float | None = None) -> bool:
        """Whether the set was read longer than ``seconds`` (default: the
        refresh interval) ago, or never."""
        loaded_at = self._loaded_at
        limit = self._refresh_seconds if seconds is None else seconds
        return loaded_at is None or self._clock() - loaded_at >= limit

    def settings(self, name: str) -> Namespace | None:
        """The namespace's row as last read or changed here (None: not active, or not read)."""
        return self._rows.get(name)

    def active(self) -> frozenset[str]:
        return self._active

    def on_gone(self, callback: Callable[[str], None]) -> None:
        self._gone.append(callback)

    def created(self, name: str, row: Namespace | None = None) -> None:
        self._active = self._active | {name}
        if row is not None:
            self._rows[name] = row
        self._remember(name, row if row is not None else True)

    def updated(self, row: Namespace) -> None:
        if row.name in self._active:
            self._rows[row.name] = row
            self._remember(row.name, row)

    def deleted(self, name: str) -> None:
        self._active = self._active - {name}
        self._rows.pop(name, None)
        self._remember(name, False)
        self._tell_gone({name})

    def _remember(self, name: str, change: Namespace | bool) -> None:
        if self._loading is not None:
            self._changed_while_loading[name] = change

    def _tell_gone(self, names: set[str]) -> None:
        for name in names:
            for callback in self._gone:
                try:
                    callback(name)
                except Exception:
                    log.exception("a listener of namespace %r going away failed", name)

    async def refresh(self) -> None:
        """One read of the table, shared by the calls that find the set stale."""
        if self._loading is not None:
            await asyncio.shield(self._loading)
            return
        loading = self._loading = asyncio.get_running_loop().create_future()
        self._changed_while_loading = {}
        try:
            rows = await _over_all(self._db.read, _active_rows)
        except BaseException as exc:
            loading.set_exception(exc)
            loading.exception()  # retrieved: the calls waiting on it raise it themselves
            raise
        else:
            before = self._active
            read = {row.name: row for row in rows}
            names = {DEFAULT, *read}
            for name, change in self._changed_while_loading.items():
                if change is False:
                    read.pop(name, None)
                    names.discard(name)
                    continue
                names.add(name)
                if isinstance(change, Namespace):
                    read[name] = change
            self._rows = read
            self._active = frozenset(names)
            self._loaded_at = self._clock()
            loading.set_result(None)
            self._tell_gone(set(before - self._active))
        finally:
            self._loading = None
            self._changed_while_loading = {}


async def _over_all(
    operation: Callable[[Callable[[Transaction], Coroutine[Any, Any, T]]], Coroutine[Any, Any, T]],
    fn: Callable[[Transaction], Coroutine[Any, Any, T]],
) -> T:
    """``operation(fn)`` on the namespaces themselves, whichever namespace the
    caller acts in: ``ALL_NAMESPACES`` (``call_scope``)."""
    with call_scope.acting_in(ALL_NAMESPACES):
        return await operation(fn)


async def _active_rows(tx: Transaction) -> list[Namespace]:
    return await tx.active_namespaces()


def _check_name(name: str, field: str) -> None:
    if not is_valid_name(name):
        raise ValidationError(
            f"{field} must match {NAME_RULE}, not {name!r}",
            field=field,
            details={"rule": NAME_RULE},
        )


def check_settings(namespace: Namespace, field_of: Mapping[str, str]) -> None:
    """Refuses a description, retention override or quota out of range;
    ``field_of`` maps attribute names to the request's field paths."""
    if len(namespace.description) > MAX_DESCRIPTION_CHARS:
        raise ValidationError(
            f"{field_of['description']} must be at most {MAX_DESCRIPTION_CHARS} characters",
            field=field_of["description"],
        )
    for attribute in CHANGEABLE[1:]:
        value = getattr(namespace, attribute)
        if value is None:
            continue
        positive = attribute.startswith("retain_")
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            rule = "greater than 0" if positive else "0 or more"
            raise ValidationError(
                f"{field_of[attribute]} must be finite and {rule}, not {value}",
                field=field_of[attribute],
            )


def namespace_not_found(name: str) -> NamespaceNotFoundError:
    """The refusal of a call into ``name``, which is not an active namespace:
    the same whether it never existed or is being deleted."""
    return NamespaceNotFoundError(f"namespace {name!r} not found", details={"namespace": name})


def namespace_deleted(name: str) -> NamespaceNotFoundError:
    """How a stream open in ``name`` ends once the namespace is deleted."""
    return NamespaceNotFoundError(f"namespace {name!r} was deleted", details={"namespace": name})


LISTING_DIGEST: Final = page_tokens.filter_digest("namespaces", [])
"""ListNamespaces has no filters: its tokens are bound to the listing alone."""


def encode_page_token(last_name: str) -> str:
    """The token of the page after namespace ``last_name``."""
    return page_tokens.encode(LISTING_DIGEST, {"name": last_name})


def decode_page_token(token: str) -> str:
    """The name after which the page starts; "" for the first page."""
    position = page_tokens.decode(LISTING_DIGEST, token, {"name": str})
    if position is None:
        return ""
    name: str = position["name"]
    if not is_valid_name(name):
        raise ReadArgumentError("invalid page_token", field=page_tokens.FIELD)
    return name


async def _deleting_names(tx: Transaction) -> list[str]:
    return await tx.deleting_namespace_names()


class NamespaceStore:
    """Creates, reads, lists, changes and deletes namespaces; a deleted one's
    data is purged by a background task of this replica, resumed at start for
    any namespace a stopped replica left half purged."""

    def __init__(
        self,
        db: Database,
        directory: NamespaceDirectory,
        *,
        purge_batch_rows: int = PURGE_BATCH_ROWS,
        purge_delay: float = PURGE_DELAY_SECONDS,
        purge_backoff: Backoff = PURGE_BACKOFF,
        purged: Callable[[str], None] | None = None,
        clock: Callable[[], Nanos] = time.time_ns,
    ) -> None:
        self._db = db
        self.directory = directory
        self._purge_batch_rows = purge_batch_rows
        self._purge_delay = purge_delay
        self._purge_backoff = purge_backoff
        self._clock = clock
        self._purges: dict[str, asyncio.Task[None]] = {}
        self._purged = purged
        """Told each namespace whose purge finished (the metrics drop its series)."""

    async def create(self, draft: Namespace, field_of: Mapping[str, str]) -> Namespace:
        _check_name(draft.name, field_of["name"])
        check_settings(draft, field_of)
        now = self._clock()
        namespace = dataclasses.replace(draft, state=ACTIVE, created_at=now, updated_at=now)

        async def fn(tx: Transaction) -> Namespace:
            if await tx.namespace_row(namespace.name) is not None:
                raise NamespaceExistsError(
                    f"namespace {namespace.name!r} already exists",
                    details={"namespace": namespace.name},
                )
            if await tx.namespace_tombstoned(namespace.name):
                raise NamespaceTombstonedError(
                    f"namespace {namespace.name!r} was deleted; its name is not reused",
                    details={"namespace": namespace.name},
                )
            await tx.insert_namespace(namespace)
            return namespace

        created = await _over_all(self._db.write, fn)
        self.directory.created(created.name, created)
        return created

    async def get(self, name: str) -> Namespace:
        _check_name(name, "name")

        async def fn(tx: Transaction) -> Namespace | None:
            return await tx.namespace_row(name)

        found = await _over_all(self._db.read, fn)
        if found is None:
            raise namespace_not_found(name)
        return found

    async def list(self, requested_size: int, token: str) -> tuple[list[Namespace], str]:
        size = page_size(requested_size)
        after = decode_page_token(token)

        async def fn(tx: Transaction) -> list[Namespace]:
            return await tx.namespace_page(after, size + 1)

        rows = await _over_all(self._db.read, fn)
        if len(rows) <= size:
            return rows, ""
        return rows[:size], encode_page_token(rows[size - 1].name)

    async def update(
        self, name: str, changes: Mapping[str, Any], field_of: Mapping[str, str]
    ) -> Namespace:
        _check_name(name, field_of["name"])
        now = self._clock()

        async def fn(tx: Transaction) -> Namespace:
            current = await tx.namespace_row(name)
            if current is None or current.state != ACTIVE:
                raise namespace_not_found(name)
            changed = dataclasses.replace(current, **changes, updated_at=now)
            check_settings(changed, field_of)
            await tx.update_namespace(changed)
            return changed

        updated = await _over_all(self._db.write, fn)
        self.directory.updated(updated)  # its quotas apply here at once
        return updated

    async def delete(self, name: str) -> Namespace:
        _check_name(name, "name")
        if name == DEFAULT:
            raise NamespaceProtectedError(
                "the namespace 'default' cannot be deleted", details={"namespace": name}
            )
        now = self._clock()

        async def fn(tx: Transaction) -> Namespace:
            current = await tx.namespace_row(name)
            if current is None:
                raise namespace_not_found(name)
            if current.state == DELETING:
                return current
            deleting = dataclasses.replace(current, state=DELETING, updated_at=now)
            await tx.update_namespace(deleting)
            return deleting

        deleting = await _over_all(self._db.write, fn)
        self.directory.deleted(name)
        self._start_purge(name)
        return deleting

    async def resume_purges(self) -> None:
        """Starts the purge of every namespace left in state ``deleting``."""

        for name in await self.directory.left_deleting():
            self.directory.deleted(name)
            self._start_purge(name)

    def _start_purge(self, name: str) -> None:
        if name in self._purges:
            return
        task = asyncio.create_task(self._purge(name), name=f"runstore-namespace-purge-{name}")
        self._purges[name] = task
        task.add_done_callback(lambda _: self._purges.pop(name, None))

    async def wait_purged(self, name: str) -> None:
        """Returns once this replica's purge of ``name`` (if any) has ended."""
        task = self._purges.get(name)
        if task is not None:
            await asyncio.shield(task)

    async def _purge(self, name: str) -> None:
        """Deletes the namespace's data in bounded transactions, then its row,
        leaving the name's tombstone. Another replica may purge it at the same
        time: each batch deletes whatever is still there."""
        with call_scope.acting_in(name):
            await self._purge_in(name)

    async def _purge_in(self, name: str) -> None:
        limit = self._purge_batch_rows
        await asyncio.sleep(self._purge_delay)

        async def batch(tx: Transaction) -> int:
            return await tx.purge_namespace_rows(name, limit)

        async def drop(tx: Transaction) -> None:
            current = await tx.namespace_row(name)
            if current is not None and current.state == DELETING:
                await tx.drop_namespace(name, self._clock())

        deleted = 0
        failures = 0
        while True:
            try:
                count = await self._db.write(batch)
                if count == 0:
                    await self._db.write(drop)
                    break
                deleted += count
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("purge of namespace %r: a batch failed; retrying", name)
                failures += 1
                await asyncio.sleep(self._purge_backoff.pause(failures))
        log.info("namespace %r deleted: %d rows purged", name, deleted)
        if self._purged is not None:
            self._purged(name)

    async def close(self) -> None:
        """Stops this replica's purges (a later start resumes them)."""
        tasks = list(self._purges.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
