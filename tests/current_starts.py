"""Commands of the current generation's engine starts, for tests (docs/contract.md
§10.6, D1): the same starts as ``tests.support`` builds, bound to a 32-byte
request digest and carrying the ``session_ended`` intent instead of the
canceled completion."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from runstore.contract import lifecycle
from runstore.server.db import migrate
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import types_pb2 as pb
from tests.seeds import Upload, declaration, prefix
from tests.support import Run, link_record, record, started_record, ts, unique


def digest(seed: str) -> bytes:
    """A request digest: 32 bytes, never all zero."""
    return hashlib.sha256(seed.encode()).digest()


def _ms(stamp: Any) -> int:
    return int(stamp.seconds) * 1000 + int(stamp.nanos) // 1_000_000


def intent_record(start: pb.RunStart, key: str = "intent") -> pb.RunRecord:
    """The ``session_ended`` intent a current session start always carries (V5 [N])."""
    return record(
        run_id=start.run_id,
        agent_id=start.agent_id,
        session_id=start.session_id,
        key=key,
        type=lifecycle.CANCELLATION_INTENT,
        payload=lifecycle.encode_cancellation_intent(
            lifecycle.CancellationIntentPayload(reason=lifecycle.REASON_SESSION_ENDED)
        ),
        at_ms=_ms(start.started_at),
    )


async def seeded(runtime: rs_grpc.RuntimeStoreStub, run: Run) -> Run:
    """Publishes the seed every current start of ``run`` attaches (§9.7.9) and
    names its end in ``run.start.seed_end_id``: a literal, or for a
    continuation the predecessor's history through its first record. Returns
    ``run``."""
    start = run.start
    fields: dict[str, Any] = {
        "agent_id": start.agent_id,
        "run_id": start.run_id,
        "session_id": start.session_id,
    }
    if start.predecessor_run_id:
        fields.update(
            kind=sd.SEED_KIND_CONTINUATION,
            source_run_id=start.predecessor_run_id,
            source_end_id="1",
        )
    upload = Upload(runtime, declaration(**fields))
    seed = await upload.begin()
    if seed.HasField("source"):
        await upload.append(prefix(unique("source"), "0", seed.source))
    await upload.history()
    await upload.compiled()
    await upload.publish()
    start.seed_end_id = str(upload.seed_end)
    return run


def seed_era(run: Run) -> Run:
    """``run`` without a seed end: the RunStart of a seed-era start (D1)."""
    start = pb.RunStart()
    start.CopyFrom(run.start)
    start.seed_end_id = ""
    return Run(start)


def moved(run: Run, later_ms: int) -> Run:
    """The same run start proposed by a new execution ``later_ms`` later (§10.6)."""
    start = pb.RunStart()
    start.CopyFrom(run.start)
    start.started_at.CopyFrom(ts(_ms(run.start.started_at) + later_ms))
    return Run(start)


def root(run: Run, request_digest: bytes, **keys: str) -> rs.StartRootRunRequest:
    return rs.StartRootRunRequest(
        run=run.start,
        started=started_record(run.start, keys.get("started", "started")),
        request_digest=request_digest,
        cancellation=intent_record(run.start, keys.get("intent", "intent")),
    )


def child(
    run: Run,
    request_digest: bytes,
    parent_agent_id: str = "agent",
    tool_call_id: str = "call-1",
    link_at_ms: int | None = None,
    **keys: str,
) -> rs.StartChildRunRequest:
    return rs.StartChildRunRequest(
        run=run.start,
        parent_linked=link_record(
            run.start,
            parent_agent_id,
            keys.get("link", "linked"),
            tool_call_id=tool_call_id,
            at_ms=link_at_ms,
        ),
        started=started_record(run.start, keys.get("started", "started")),
        request_digest=request_digest,
        cancellation=intent_record(run.start, keys.get("intent", "intent")),
    )


def one_shot(run: Run, request_digest: bytes) -> rs.StartOneShotRunRequest:
    return rs.StartOneShotRunRequest(
        run=run.start, started=started_record(run.start), request_digest=request_digest
    )


def one_shot_child(
    run: Run, request_digest: bytes, parent_agent_id: str = "agent", link_at_ms: int | None = None
) -> rs.StartOneShotChildRunRequest:
    return rs.StartOneShotChildRunRequest(
        run=run.start,
        parent_linked=link_record(run.start, parent_agent_id, at_ms=link_at_ms),
        started=started_record(run.start),
        request_digest=request_digest,
    )


async def execute(database_url: str, statement: str, **params: Any) -> int:
    """One statement straight on the database (to corrupt stored proof);
    returns the rows it touched."""
    engine = create_async_engine(migrate.async_url(database_url), poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            result = await connection.execute(text(statement), params)
            return int(result.rowcount)
    finally:
        await engine.dispose()
