"""The blocking facades cannot drift from the asyncio clients: every public
method of ``RemoteStore`` / ``RemoteSessionAdmin`` has a twin with the same
signature, and the streaming and iterating twins deliver what the async ones do."""

from __future__ import annotations

import asyncio
import collections.abc
import inspect
import threading
from dataclasses import replace
from typing import Any, get_args, get_origin

import pytest

from runstore.client import (
    RemoteSessionAdmin,
    RemoteStore,
    SyncRemoteSessionAdmin,
    SyncRemoteStore,
    records,
)
from tests.client.test_remote import _note, ms_now, root
from tests.support import Store as StubStore
from tests.support import unique

PAIRS = [(RemoteStore, SyncRemoteStore), (RemoteSessionAdmin, SyncRemoteSessionAdmin)]


def public_methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def blocking_return(annotation: Any) -> Any:
    """What the blocking twin of a method returning ``annotation`` returns."""
    if get_origin(annotation) is collections.abc.AsyncIterator:
        return collections.abc.Iterator[get_args(annotation)]
    return annotation


@pytest.mark.parametrize(("remote", "facade"), PAIRS, ids=lambda cls: cls.__name__)
def test_every_public_async_method_has_a_blocking_twin_with_its_signature(
    remote: type, facade: type
) -> None:
    asynchronous, blocking = public_methods(remote), public_methods(facade)
    # Watch streams and page iterators are plain functions returning AsyncIterator.
    assert {"watch_session_run_records", "watch_run_records"} <= set(
        public_methods(RemoteStore)
    ) and {"iter_sessions", "iter_runs"} <= set(public_methods(RemoteSessionAdmin))
    missing = sorted(set(asynchronous) - set(blocking))
    assert not missing, f"{facade.__name__} lacks {missing}"
    for name, method in asynchronous.items():
        wanted = inspect.signature(method, eval_str=True)
        wanted = wanted.replace(return_annotation=blocking_return(wanted.return_annotation))
        got = inspect.signature(blocking[name], eval_str=True)
        assert got == wanted, f"{facade.__name__}.{name}{got} != {remote.__name__}.{name}{wanted}"
        assert not inspect.iscoroutinefunction(blocking[name]), name


async def test_blocking_watch_and_iteration_deliver_what_the_async_ones_do(
    store: StubStore,
) -> None:
    session_id = unique("sync-watch")
    run = replace(root(session_id), session_id=session_id)

    def worker() -> tuple[list[str], list[str], list[str], list[str]]:
        with SyncRemoteSessionAdmin(store.target) as admin, SyncRemoteStore(store.target) as remote:
            created = ms_now()
            admin.create_session(session_id, created)
            remote.start_root_run(records.root_run_start(run))
            for key in ("n1", "n2", "n3"):
                remote.append_run_record(replace(_note(run, key), session_id=session_id))
            watched = remote.watch_session_run_records(session_id)
            first_three = [next(watched).event_key for _ in range(3)]
            # Left early: closing it closes the stream on the loop thread.
            watched.close()
            # A record committed while a blocking watch waits reaches it.
            follow = remote.watch_run_records(run.run_id, "4")  # after started, n1..n3
            committed = threading.Thread(
                target=remote.append_run_record,
                args=(replace(_note(run, "n4"), session_id=session_id),),
            )
            committed.start()
            live = [next(follow).event_key]
            committed.join()
            follow.close()
            sessions = [
                s.id
                for s in admin.iter_sessions(created_after=created, page_size=1)
                if s.id == session_id
            ]
            runs = [r.run_id for r in admin.iter_runs(session_id=session_id, page_size=1)]
            return first_three, live, sessions, runs

    first_three, live, sessions, runs = await asyncio.to_thread(worker)
    assert first_three == ["run_started", "n1", "n2"]
    assert live == ["n4"]
    assert sessions == [session_id]
    assert runs == [run.run_id]
