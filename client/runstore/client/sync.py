"""Blocking facades over the asyncio clients, for code that is not async.

Each facade runs its own event loop in a background thread and forwards every
call to the asyncio client living there, so retries, deadlines and errors
behave exactly as in ``RemoteStore`` / ``RemoteSessionAdmin``; an async iterator
(a Watch stream, ``iter_sessions``) becomes a blocking one. Safe to call from
several threads at once. Every public method of the asyncio clients has its
blocking twin here, with the same signature (tests/client/test_sync_facade.py
fails otherwise).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Collection, Coroutine, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from runstore.client.model import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    ChildRunStartResult,
    OneShotChildRunStart,
    OneShotChildRunStartResult,
    OneShotRunStart,
    OneShotRunStartResult,
    Page,
    PreparationOperation,
    PurgeResult,
    RootRunStart,
    RootRunStartResult,
    RunCancellation,
    RunMeta,
    RunPage,
    RunPreparation,
    RunRecord,
    RunRepairResult,
    RunSeed,
    RunStatus,
    RunSuspension,
    RunTerminal,
    SeedAppend,
    SeedDeclaration,
    SeedPage,
    SeedPublication,
    Session,
    SessionPage,
    SessionStatus,
)
from runstore.client.runtime_store import RemoteStore
from runstore.client.session_admin import RemoteSessionAdmin

T = TypeVar("T")
C = TypeVar("C", RemoteStore, RemoteSessionAdmin)


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="runstore-client", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """``iterator``'s items, each awaited on the loop; closing this iterator
        (or leaving a ``for`` early) closes ``iterator`` there too."""

        async def next_item() -> T:
            return await anext(iterator)

        try:
            while True:
                try:
                    yield self.run(next_item())
                except StopAsyncIteration:
                    return
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None and not self.loop.is_closed():
                self.run(close())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _Facade:
    def __init__(self) -> None:
        self._thread = _LoopThread()

    def _open(self, cls: type[C], target: str | None, options: dict[str, Any]) -> C:
        async def make() -> C:
            return cls(target, **options)

        return self._thread.run(make())

    def close(self) -> None:
        """Closes the client and stops its loop thread."""
        remote: RemoteStore | RemoteSessionAdmin = self._remote  # type: ignore[attr-defined]
        self._thread.run(remote.close())
        self._thread.stop()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncRemoteStore(_Facade):
    """``RemoteStore`` with blocking methods; takes the same arguments."""

    def __init__(self, target: str | None = None, **options: Any) -> None:
        super().__init__()
        self._remote = self._open(RemoteStore, target, options)

    def load_session_status(self, session_id: str) -> SessionStatus:
        return self._thread.run(self._remote.load_session_status(session_id))

    def start_root_run(self, command: RootRunStart) -> RootRunStartResult:
        return self._thread.run(self._remote.start_root_run(command))

    def start_child_run(self, command: ChildRunStart) -> ChildRunStartResult:
        return self._thread.run(self._remote.start_child_run(command))

    def start_one_shot_run(self, command: OneShotRunStart) -> OneShotRunStartResult:
        return self._thread.run(self._remote.start_one_shot_run(command))

    def start_one_shot_child_run(self, command: OneShotChildRunStart) -> OneShotChildRunStartResult:
        return self._thread.run(self._remote.start_one_shot_child_run(command))

    def append_run_record(self, record: RunRecord) -> AppendResult:
        return self._thread.run(self._remote.append_run_record(record))

    def append_run_records(self, records: Sequence[RunRecord]) -> list[AppendResult]:
        return self._thread.run(self._remote.append_run_records(records))

    def record_run_cancellation(self, command: RunCancellation) -> AppendResult:
        return self._thread.run(self._remote.record_run_cancellation(command))

    def record_run_suspension(self, command: RunSuspension) -> AppendResult:
        return self._thread.run(self._remote.record_run_suspension(command))

    def record_run_terminal(self, command: RunTerminal) -> AppendResult:
        return self._thread.run(self._remote.record_run_terminal(command))

    def repair_run_suspension(self, command: RunSuspension) -> RunRepairResult:
        return self._thread.run(self._remote.repair_run_suspension(command))

    def repair_run_terminal(self, command: RunTerminal) -> RunRepairResult:
        return self._thread.run(self._remote.repair_run_terminal(command))

    def load_run(self, run_id: str) -> RunMeta:
        return self._thread.run(self._remote.load_run(run_id))

    def load_run_suspension(self, run_id: str) -> Checkpoint:
        return self._thread.run(self._remote.load_run_suspension(run_id))

    def list_run_records(
        self, run_id: str, cursor: str, limit: int, *, types: Collection[str] = ()
    ) -> Page:
        return self._thread.run(self._remote.list_run_records(run_id, cursor, limit, types=types))

    def list_session_run_records(self, session_id: str, cursor: str, limit: int) -> Page:
        return self._thread.run(self._remote.list_session_run_records(session_id, cursor, limit))

    def list_run_transcript_records(
        self, run_id: str, through_record_id: str, after_record_id: str, limit: int
    ) -> Page:
        return self._thread.run(
            self._remote.list_run_transcript_records(
                run_id, through_record_id, after_record_id, limit
            )
        )

    def start_synchronous_run(self, command: OneShotRunStart) -> OneShotRunStartResult:
        return self._thread.run(self._remote.start_synchronous_run(command))

    def begin_run_seed(self, declaration: SeedDeclaration) -> RunSeed:
        return self._thread.run(self._remote.begin_run_seed(declaration))

    def append_run_seed(self, command: SeedAppend) -> str:
        return self._thread.run(self._remote.append_run_seed(command))

    def publish_run_seed(self, publication: SeedPublication) -> None:
        self._thread.run(self._remote.publish_run_seed(publication))

    def find_run_preparation(self, operation: PreparationOperation) -> RunPreparation | None:
        return self._thread.run(self._remote.find_run_preparation(operation))

    def settle_run_preparation(
        self, operation: PreparationOperation, attempt_id: str
    ) -> RunPreparation | None:
        return self._thread.run(self._remote.settle_run_preparation(operation, attempt_id))

    def load_run_seed(self, run_id: str, end_id: str) -> RunSeed:
        return self._thread.run(self._remote.load_run_seed(run_id, end_id))

    def list_run_seed_records(
        self, run_id: str, end_id: str, after_id: str, limit: int
    ) -> SeedPage:
        return self._thread.run(self._remote.list_run_seed_records(run_id, end_id, after_id, limit))

    def list_run_preparation_records(
        self, run_id: str, end_id: str, after_id: str, limit: int
    ) -> SeedPage:
        return self._thread.run(
            self._remote.list_run_preparation_records(run_id, end_id, after_id, limit)
        )

    def watch_session_run_records(
        self, session_id: str, cursor: str = "", *, silence_timeout: float | None = None
    ) -> Iterator[RunRecord]:
        """``RemoteStore.watch_session_run_records``, blocking on each record."""
        return self._thread.iterate(
            self._remote.watch_session_run_records(
                session_id, cursor, silence_timeout=silence_timeout
            )
        )

    def watch_run_records(
        self, run_id: str, cursor: str = "", *, silence_timeout: float | None = None
    ) -> Iterator[RunRecord]:
        """``RemoteStore.watch_run_records``, blocking on each record."""
        return self._thread.iterate(
            self._remote.watch_run_records(run_id, cursor, silence_timeout=silence_timeout)
        )


class SyncRemoteSessionAdmin(_Facade):
    """``RemoteSessionAdmin`` with blocking methods; takes the same arguments."""

    def __init__(self, target: str | None = None, **options: Any) -> None:
        super().__init__()
        self._remote = self._open(RemoteSessionAdmin, target, options)

    def create_session(self, session_id: str, created_at: datetime) -> Session:
        return self._thread.run(self._remote.create_session(session_id, created_at))

    def load_session(self, session_id: str) -> Session:
        return self._thread.run(self._remote.load_session(session_id))

    def end_session(self, session_id: str, ended_at: datetime) -> Session:
        return self._thread.run(self._remote.end_session(session_id, ended_at))

    def purge_session(self, session_id: str) -> None:
        self._thread.run(self._remote.purge_session(session_id))

    def purge_ended_sessions(self, ended_before: datetime, limit: int = 0) -> PurgeResult:
        return self._thread.run(self._remote.purge_ended_sessions(ended_before, limit))

    def purge_sessionless_runs(self, finished_before: datetime, limit: int = 0) -> PurgeResult:
        return self._thread.run(self._remote.purge_sessionless_runs(finished_before, limit))

    def list_runs_by_session(
        self, session_id: str, statuses: Collection[RunStatus] = ()
    ) -> list[RunMeta]:
        return self._thread.run(self._remote.list_runs_by_session(session_id, statuses))

    def list_sessions(
        self,
        *,
        statuses: Collection[SessionStatus] = (),
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
        session_id: str = "",
        session_id_prefix: str = "",
        newest_first: bool = False,
        count_statuses: bool = False,
    ) -> SessionPage:
        return self._thread.run(
            self._remote.list_sessions(
                statuses=statuses,
                created_after=created_after,
                created_before=created_before,
                page_size=page_size,
                page_token=page_token,
                session_id=session_id,
                session_id_prefix=session_id_prefix,
                newest_first=newest_first,
                count_statuses=count_statuses,
            )
        )

    def list_runs(
        self,
        *,
        session_id: str = "",
        agent_id: str = "",
        statuses: Collection[RunStatus] = (),
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        sessionless_only: bool = False,
        page_size: int = 0,
        page_token: str = "",
        run_id: str = "",
        run_id_prefix: str = "",
        agent_id_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        root_only: bool = False,
        newest_first: bool = False,
        count_statuses: bool = False,
        parent_run_id: str = "",
    ) -> RunPage:
        return self._thread.run(
            self._remote.list_runs(
                session_id=session_id,
                agent_id=agent_id,
                statuses=statuses,
                started_after=started_after,
                started_before=started_before,
                sessionless_only=sessionless_only,
                page_size=page_size,
                page_token=page_token,
                run_id=run_id,
                run_id_prefix=run_id_prefix,
                agent_id_prefix=agent_id_prefix,
                labels=labels,
                root_only=root_only,
                newest_first=newest_first,
                count_statuses=count_statuses,
                parent_run_id=parent_run_id,
            )
        )

    def iter_sessions(self, **filters: Any) -> Iterator[Session]:
        """Every session ``list_sessions(**filters)`` lists, page after page."""
        return self._thread.iterate(self._remote.iter_sessions(**filters))

    def iter_runs(self, **filters: Any) -> Iterator[RunMeta]:
        """Every run ``list_runs(**filters)`` lists, page after page."""
        return self._thread.iterate(self._remote.iter_runs(**filters))
