"""The protobuf messages every workload builds: timestamps and run records."""

from __future__ import annotations

import time

from google.protobuf.timestamp_pb2 import Timestamp

from runstore.v1 import types_pb2 as pb


def stamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def now() -> Timestamp:
    return stamp(time.time_ns() // 1_000_000)


def record(
    run: pb.RunStart, key: str, type_: str, payload: bytes, at: Timestamp | None = None
) -> pb.RunRecord:
    """A record of ``run`` (its session, if any), stamped ``at`` or at the run's start."""
    return pb.RunRecord(
        event_key=key,
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        type=type_,
        payload=payload,
        timestamp=run.started_at if at is None else at,
    )
