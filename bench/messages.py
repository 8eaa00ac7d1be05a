"""The protobuf messages every workload builds: timestamps, run records and
the lifecycle records of a run's start and end."""

from __future__ import annotations

import time
from typing import Final

from google.protobuf.timestamp_pb2 import Timestamp

from runstore.contract import lifecycle
from runstore.v1 import types_pb2 as pb

STARTED: Final = lifecycle.encode_run_started(lifecycle.RunStartedPayload())
CANCELED_AT_SESSION_END: Final = lifecycle.encode_run_completed(
    lifecycle.RunCompletedPayload(
        status="canceled", phase="canceled", cancellation_reason=lifecycle.REASON_SESSION_ENDED
    )
)
COMPLETED: Final = lifecycle.encode_run_completed(
    lifecycle.RunCompletedPayload(status="success", phase="completed")
)
"""The payloads of a run's ``started`` record, of the ``stopped`` record a root
run stores when its session ends, and of a successful ``completed`` record."""


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


def started(run: pb.RunStart) -> pb.RunRecord:
    """The run's ``started`` record."""
    return record(run, "started", lifecycle.RUN_STARTED, STARTED)


def stopped_at_session_end(run: pb.RunStart) -> pb.RunRecord:
    """The ``canceled`` record of a root run, stored when its session ends."""
    return record(run, "stopped", lifecycle.RUN_COMPLETED, CANCELED_AT_SESSION_END)


def completed(run: pb.RunStart, at: Timestamp | None = None) -> pb.RunRecord:
    """The run's successful ``completed`` record."""
    return record(run, "completed", lifecycle.RUN_COMPLETED, COMPLETED, at)
