"""The in-process peers a user would pick instead of runstore, measured side by side.

``make bench ARGS=--peers`` (the ``peers`` dependency group) measures, in the
same run as the server figures and with the same concurrency list, one ~1 KiB
item per call and one session (thread) per call in flight:

* ``peer:openai-agents-sqlitesession`` (SQLite): OpenAI Agents
  ``SQLiteSession(session_id, db_path=FILE).add_items([item])``, the library's
  defaults (WAL, SQLite's default ``synchronous=FULL``; each call is one
  transaction in a worker thread of the default executor, under one lock per
  database file). Compared with runstore's single ``append``. Its variant
  ``peer:openai-agents-sqlitesession (4 items)`` adds 4 items per call (one
  model response), compared with runstore's ``append_batch`` of 4 records; its
  ops/s count items, as ``append_batch``'s count records.
* ``peer:langgraph-sqlitesaver`` (SQLite): LangGraph's ``SqliteSaver``
  (``from_conn_string(FILE)``: one connection under one lock, WAL, FULL), one
  graph step per call: ``put_writes`` of the item, then ``put`` of the next
  checkpoint carrying it; each is one commit. The saver has no async methods:
  each step runs in a worker thread of the default executor (``asyncio.to_thread``),
  as ``SQLiteSession`` runs its own calls.
* ``peer:langgraph-asyncpostgressaver`` (PostgreSQL): ``AsyncPostgresSaver``
  (``from_conn_string(URL)``: one autocommit connection, pipelined), the same
  step (``aput_writes`` + ``aput``) from one task per session.

Every peer runs in a process of its own (``python -m bench.peers``, a plan on
stdin, one JSON row per measurement on stdout, as ``bench.driver``), on a fresh
database, right after a ceiling measurement against the backend's server, so
its ``ratio_to_ceiling`` compares two figures taken seconds apart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.closed_loop import ClosedLoop
from bench.stats import throughput_row

PEERS: dict[str, tuple[str, ...]] = {
    "sqlite": ("openai-agents-sqlitesession", "langgraph-sqlitesaver"),
    "postgres": ("langgraph-asyncpostgressaver",),
}
"""The peers measured next to each backend."""

INSTALL_HINT = (
    "the peers need the `peers` dependency group: `make bench ARGS=--peers` installs it "
    "(or `.venv/bin/python -m pip install --group peers`)"
)

# One ~1 KiB item, as a chat item both libraries store (json.dumps of it is 1 KiB).
ITEM: dict[str, Any] = {"role": "user", "content": "x" * (1024 - 31)}

AsyncOp = Callable[[], Awaitable[Any]]


BATCH_ITEMS = 4
"""Items per ``add_items`` call of the batch variant, as ``append_batch``'s records."""

VARIANTS: dict[str, tuple[int, ...]] = {"openai-agents-sqlitesession": (1, BATCH_ITEMS)}
"""Items per call measured for each peer (one unless listed)."""


def workload_name(peer: str, items: int = 1) -> str:
    return f"peer:{peer}" + (f" ({items} items)" if items > 1 else "")


# --- The peer process --------------------------------------------------------------


async def _measure_async(ops: list[AsyncOp], spec: dict[str, Any]) -> dict[str, Any]:
    """``bench.driver.measure``'s loop: a warm-up, then ``duration`` seconds timed."""
    loop = ClosedLoop(ops)
    await loop.run(float(spec.get("warmup", 0.2)), timed=False)
    began = time.perf_counter()
    await loop.run(float(spec["duration"]), timed=True)
    return throughput_row(spec, loop.latencies, time.perf_counter() - began)


def _checkpoint(step: int) -> tuple[Any, dict[str, Any], dict[str, int]]:
    """A graph step's checkpoint carrying the step's item (and only it: a real
    graph's checkpoint carries its whole state, so this is the peer's best case)."""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    base = empty_checkpoint()
    base["channel_values"] = {"messages": ITEM}
    base["channel_versions"] = {"messages": step}
    checkpoint = create_checkpoint(base, None, step)
    metadata = {"source": "loop", "step": step, "parents": {}}
    return checkpoint, metadata, {"messages": step}


class _Thread:
    """One LangGraph thread (session): each step writes the item, then checkpoints."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {
            "configurable": {"thread_id": f"bench-{uuid.uuid4().hex}", "checkpoint_ns": ""}
        }
        self.steps = itertools.count(1)

    def next_step(self) -> tuple[Any, dict[str, Any], dict[str, int], str]:
        checkpoint, metadata, versions = _checkpoint(next(self.steps))
        return checkpoint, metadata, versions, str(uuid.uuid4())


async def run_openai_agents(database: str, specs: list[dict[str, Any]]) -> None:
    from agents.memory import SQLiteSession

    for spec in specs:
        items = [ITEM] * int(spec.get("items", 1))
        sessions = [
            SQLiteSession(f"bench-{uuid.uuid4().hex}", db_path=database)
            for _ in range(int(spec["concurrency"]))
        ]
        ops: list[AsyncOp] = [
            (lambda session=session, items=items: session.add_items(items)) for session in sessions
        ]
        row = await _measure_async(ops, spec)
        if len(items) > 1:  # items per second, as append_batch's records per second
            row |= {
                "calls_per_s": row["ops_per_s"],
                "ops": row["ops"] * len(items),
                "ops_per_s": row["ops_per_s"] * len(items),
                "records_per_call": len(items),
            }
        print(json.dumps(row), flush=True)
        for session in sessions:
            session.close()


async def run_langgraph_sqlite(database: str, specs: list[dict[str, Any]]) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(database) as saver:
        for spec in specs:
            threads = [_Thread() for _ in range(int(spec["concurrency"]))]
            for thread in threads:  # each thread's first checkpoint, untimed
                checkpoint, metadata, versions, _ = thread.next_step()
                thread.config = saver.put(thread.config, checkpoint, metadata, versions)

            def step(thread: _Thread) -> None:
                checkpoint, metadata, versions, task_id = thread.next_step()
                saver.put_writes(thread.config, [("messages", ITEM)], task_id)
                thread.config = saver.put(thread.config, checkpoint, metadata, versions)

            # An async service calls the sync saver as SQLiteSession calls sqlite3: in
            # a worker thread of the default executor.
            ops: list[AsyncOp] = [
                (lambda thread=thread: asyncio.to_thread(step, thread)) for thread in threads
            ]
            print(json.dumps(await _measure_async(ops, spec)), flush=True)


async def run_langgraph_postgres(database: str, specs: list[dict[str, Any]]) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(database) as saver:
        await saver.setup()
        for spec in specs:
            threads = [_Thread() for _ in range(int(spec["concurrency"]))]
            for thread in threads:
                checkpoint, metadata, versions, _ = thread.next_step()
                thread.config = await saver.aput(thread.config, checkpoint, metadata, versions)

            async def step(thread: _Thread) -> None:
                checkpoint, metadata, versions, task_id = thread.next_step()
                await saver.aput_writes(thread.config, [("messages", ITEM)], task_id)
                thread.config = await saver.aput(thread.config, checkpoint, metadata, versions)

            ops: list[AsyncOp] = [(lambda thread=thread: step(thread)) for thread in threads]
            print(json.dumps(await _measure_async(ops, spec)), flush=True)


def main() -> None:
    plan = json.load(sys.stdin)
    peer, database, specs = plan["peer"], plan["database"], plan["measurements"]
    if peer == "openai-agents-sqlitesession":
        asyncio.run(run_openai_agents(database, specs))
    elif peer == "langgraph-sqlitesaver":
        asyncio.run(run_langgraph_sqlite(database, specs))
    elif peer == "langgraph-asyncpostgressaver":
        asyncio.run(run_langgraph_postgres(database, specs))
    else:
        raise SystemExit(f"unknown peer {peer!r}")


# --- The harness's side ----------------------------------------------------------


def missing() -> list[str]:
    """The peer libraries that are not installed (empty when all are)."""
    import importlib.util

    modules = {
        "openai-agents": "agents",
        "langgraph-checkpoint-sqlite": "langgraph.checkpoint.sqlite",
        "langgraph-checkpoint-postgres": "langgraph.checkpoint.postgres",
        "psycopg": "psycopg",
    }
    absent = []
    for distribution, module in modules.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            absent.append(distribution)
    return absent


def plan(
    args: argparse.Namespace, peer: str, repetition: int, pairs: str = ""
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ceiling measurements (for the driver) and the peer's, paired one to one."""
    ceilings, measurements = [], []
    for concurrency in args.concurrency:
        base = {"concurrency": concurrency, "duration": args.duration, "warmup": args.warmup}
        for items in VARIANTS.get(peer, (1,)):
            pair = f"{pairs}peer{repetition}-{workload_name(peer, items)}-{concurrency}"
            ceilings.append({**base, "workload": "ceiling", "pair": pair})
            measurements.append(
                {
                    **base,
                    "workload": workload_name(peer, items),
                    "pair": pair,
                    "repetition": repetition,
                    **({"items": items} if items > 1 else {}),
                }
            )
    return ceilings, measurements


@contextlib.asynccontextmanager
async def _peer_database(backend: str, postgres_url: str, peer: str) -> AsyncIterator[str]:
    """A fresh database for one peer: a file of its own, or a throwaway PostgreSQL database."""
    from bench import harness
    from runstore.server.db.postgres import asyncpg_dsn

    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="runstore-bench-peer-") as directory:
            yield str(Path(directory) / f"{peer}.db")
        return
    async with harness.database("postgres", postgres_url) as url:
        yield asyncpg_dsn(url)


async def run_peer(
    peer: str, database: str, measurements: list[dict[str, Any]], tag: dict[str, Any]
) -> list[dict[str, Any]]:
    """Runs ``measurements`` of ``peer`` in a process of its own."""
    from bench import harness

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.peers",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=harness.ROOT,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(
        json.dumps({"peer": peer, "database": database, "measurements": measurements}).encode()
    )
    process.stdin.close()
    rows = []
    while line := await process.stdout.readline():
        if line.strip():
            row = {**json.loads(line), **tag}
            print(harness.progress_line(row, len(rows) + 1, len(measurements)), flush=True)
            rows.append(row)
    if await process.wait() != 0:
        raise RuntimeError(f"peer {peer} failed")
    return rows


async def measure_server(
    args: argparse.Namespace, backend: str, url: str, server: Any, tag: dict[str, Any]
) -> list[dict[str, Any]]:
    """With ``--peers``: every peer of ``backend``, each measurement right after a
    ceiling of its own against the backend's main ``server`` (the harness's
    ``SERVER_MODULES`` hook); repetitions interleave the peers."""
    from bench import harness

    if not getattr(args, "peers", False):
        return []
    rows: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        databases = {
            peer: await stack.enter_async_context(_peer_database(backend, args.postgres_url, peer))
            for peer in PEERS.get(backend, ())
        }
        for repetition in range(args.repeat):
            for peer, database in databases.items():
                ceilings, measurements = plan(args, peer, repetition)
                rows += await harness.run_driver(server, ceilings, tag=tag, database_url=url)
                rows += await run_peer(peer, database, measurements, tag)
    return rows


class _PeersFlag(argparse.Action):
    """``--peers``: refused at once when the peer libraries are not installed."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        if absent := missing():
            parser.error(f"--peers: {', '.join(absent)} not installed; {INSTALL_HINT}")
        setattr(namespace, self.dest, True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--peers",
        action=_PeersFlag,
        nargs=0,
        default=False,
        help="also measure the in-process peers side by side (bench/peers.py: OpenAI Agents "
        "SQLiteSession, LangGraph SqliteSaver and AsyncPostgresSaver; the `peers` "
        "dependency group, which `make bench ARGS=--peers` installs)",
    )


if __name__ == "__main__":
    main()
