"""The versioned conversation context (docs/contract.md, "Context store"; D5).

A snapshot per key replaced only by a save that names the current version, so
an older result can never overwrite a newer one; the last N versions stay
readable; an append-only transcript per key keeps the full history after
compaction. Snapshots and transcript messages come with their serialised wire
form: their shape is checked here (``context_shape``), and then the bytes are
stored and returned as they are, never reinterpreted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from runstore.contract.errors import (
    ContextNotFoundError,
    ContextVersionConflictError,
    ContextVersionNotFoundError,
    ReadArgumentError,
    ValidationError,
)
from runstore.contract.model import AppendOutcome
from runstore.server.config import DEFAULTS
from runstore.server.core import context_shape, idempotency, paging
from runstore.server.core.context_shape import ContextMessage, ContextSnapshot
from runstore.server.core.input_rules import check_ids
from runstore.server.core.model import ContextVersion, Nanos, StoredAppend
from runstore.server.core.ports import Database, Transaction

DEFAULT_VERSIONS_KEPT: Final = DEFAULTS.context_versions_kept
DEFAULT_TRANSCRIPT_PAGE: Final = DEFAULTS.page_limit


@dataclass(frozen=True, slots=True)
class StoredContext:
    key: str
    version: int
    snapshot: bytes
    saved_at: Nanos
    current_version: int


@dataclass(frozen=True, slots=True)
class TranscriptPage:
    messages: list[bytes]
    next_cursor: str = ""


class ContextStore:
    """The context store's rules over a ``Database``.

    Args:
        db: Runs the transactions.
        versions_kept: How many versions of a key stay readable (at least 1).
        page_limit: Largest ListTranscript page.
        page_bytes: Message bytes after which a ListTranscript page ends.
        clock: Wall clock for ``saved_at``.
    """

    def __init__(
        self,
        db: Database,
        *,
        versions_kept: int = DEFAULT_VERSIONS_KEPT,
        page_limit: int = DEFAULT_TRANSCRIPT_PAGE,
        page_bytes: int = DEFAULTS.page_bytes,
        clock: Callable[[], Nanos] = time.time_ns,
    ) -> None:
        if versions_kept < 1:
            raise ValueError("versions_kept must be at least 1")
        self._db = db
        self._versions_kept = versions_kept
        self._page_limit = page_limit
        self._page_bytes = page_bytes
        self._clock = clock

    async def get_context(self, key: str, version: int = 0) -> StoredContext:
        """The current snapshot, or a kept older ``version``."""
        _check_key(key)
        if version < 0:
            raise ValidationError("version must not be negative", field="version")

        async def tx_fn(tx: Transaction) -> StoredContext:
            head = await tx.context_head(key)
            if head is None or head.version == 0:
                raise ContextNotFoundError(details={"key": key})
            wanted = version or head.version
            stored = await tx.context_version(key, wanted) if wanted <= head.version else None
            if stored is None:
                raise ContextVersionNotFoundError(
                    f"context version {wanted} is not kept",
                    details={"key": key, "current_version": str(head.version)},
                )
            return StoredContext(
                key, stored.version, stored.snapshot, stored.saved_at, head.version
            )

        return await self._db.read(tx_fn)

    async def save_context(self, key: str, context: ContextSnapshot, expected_version: int) -> int:
        """Replaces the snapshot if ``expected_version`` is current (0 creates).

        Retrying a save that already succeeded (its reply was lost) finds its
        own snapshot as the current version and returns that version.
        """
        context_shape.check_messages(context.messages, "snapshot.messages")
        snapshot = context.wire
        _check_key(key)
        if expected_version < 0:
            raise ValidationError("expected_version must not be negative", field="expected_version")

        async def tx_fn(tx: Transaction) -> int:
            now = self._clock()
            head = await tx.lock_context(key, now)
            if expected_version != head.version:
                if head.version == expected_version + 1:
                    current = await tx.context_version(key, head.version)
                    if current is not None and current.snapshot == snapshot:
                        return head.version
                raise ContextVersionConflictError(
                    f"context version conflict: expected {expected_version}, "
                    f"current is {head.version}",
                    details={"key": key, "current_version": str(head.version)},
                )
            version = head.version + 1
            await tx.save_context_version(
                key,
                ContextVersion(version, snapshot, now),
                keep_from=version - self._versions_kept + 1,
            )
            return version

        return await self._db.write(tx_fn)

    async def delete_context(self, key: str) -> bool:
        """Removes everything of the key; False when there was nothing."""
        _check_key(key)

        async def tx_fn(tx: Transaction) -> bool:
            return await tx.delete_context(key)

        return await self._db.write(tx_fn)

    async def purge_stale_contexts(self, written_before: Nanos, limit: int) -> tuple[int, bool]:
        """Retention (``--retain-contexts``): deletes up to ``limit`` keys that
        no SaveContext or AppendTranscript wrote since ``written_before``,
        oldest first, in one transaction; returns how many and whether the
        batch was full (call again). A key being written right now is skipped:
        it is fresh."""
        if limit < 1:
            raise ValueError("limit must be at least 1")

        async def tx_fn(tx: Transaction) -> int:
            return await tx.purge_stale_contexts(written_before, limit)

        purged = await self._db.write(tx_fn)
        return purged, purged == limit

    async def append_transcript(
        self, key: str, checked: Sequence[ContextMessage], idempotency_key: str
    ) -> AppendOutcome:
        """Appends messages in order, atomically; a retried idempotent call
        appends nothing (D5)."""
        context_shape.check_messages(checked, "messages")
        messages = [message.wire for message in checked]
        _check_key(key, idempotency_key)
        digest = idempotency.digest(messages)

        async def tx_fn(tx: Transaction) -> AppendOutcome:
            now = self._clock()
            head = await tx.lock_context(key, now)
            if idempotency_key:
                earlier = await tx.context_append_request(key, idempotency_key)
                if earlier is not None:
                    details = {"key": key, "idempotency_key": idempotency_key}
                    return idempotency.replay(earlier, digest, details)
            first = head.transcript_count
            if messages:
                await tx.append_context_transcript(key, first, list(messages), now)
            if idempotency_key:
                await tx.remember_context_append(
                    key, idempotency_key, StoredAppend(digest, first, len(messages))
                )
            return AppendOutcome(first, len(messages), True)

        return await self._db.write(tx_fn)

    async def list_transcript(self, key: str, cursor: str, limit: int) -> TranscriptPage:
        """One page, oldest first; an unknown key has an empty transcript."""
        _check_key(key)
        if limit < 0:
            raise ReadArgumentError("limit must not be negative", field="limit")
        after = paging.parse_cursor(cursor)
        page_size = min(limit or self._page_limit, self._page_limit)

        async def tx_fn(tx: Transaction) -> TranscriptPage:
            head = await tx.context_head(key)
            total = head.transcript_count if head is not None else 0
            messages = await tx.context_transcript(key, after, page_size) if total else []
            del messages[paging.page_length(map(len, messages), page_size, self._page_bytes) :]
            end = after + len(messages)
            return TranscriptPage(messages, str(end) if end < total else "")

        return await self._db.read(tx_fn)


def _check_key(key: str, idempotency_key: str = "") -> None:
    if not key:
        raise ValidationError("context key is required", field="key")
    check_ids(key=key, idempotency_key=idempotency_key)
