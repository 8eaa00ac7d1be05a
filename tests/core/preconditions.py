"""The fast paths' preconditions (``core.fast_paths``) as predicates over the
state a write finds: the oracle the equivalence tests hold the fast-path SQL
and the store's full rules to. Each precondition has one predicate here; the
lists are the production ones, so a precondition added to a list without a
predicate fails every equivalence test at once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from runstore.contract.model import Checkpoint, RunStatus, SessionStatus
from runstore.server.core.fast_paths import (
    APPEND,
    CHILD_START,
    END,
    ONE_SHOT_CHILD_START,
    ONE_SHOT_START,
    START,
    Precondition,
)
from runstore.server.core.model import (
    GuardedChange,
    RecordDraft,
    RunEnding,
    RunRecord,
    RunStart,
    RunState,
)
from runstore.server.core.model import Session as StoredSession
from runstore.server.core.ports import RecordTarget, SessionLookup


@dataclass(frozen=True)
class Found:
    """What a fast path's write finds, beside what its command brings."""

    run: RunState | None
    """The stored run under the command's run ID, if any."""
    session: SessionLookup
    """The run's session (for a start, the command's session)."""
    in_session: bool
    """Whether the run belongs to a session."""
    existing: RunRecord | None = None
    """The run's record under the command record's key."""
    owner: tuple[str, str] = ("", "")
    """The command record's agent and session."""
    labels: Mapping[str, str] | None = None
    reasons: Collection[str] | None = None
    """The cancellation reasons a run may have for this ending; None: any."""
    purged: bool = False
    """A run tombstone has the run's ID."""
    checkpoint: Checkpoint | None = None
    """A suspension's checkpoint."""
    parent: RunState | None = None
    """A child start's stored parent run, if any."""
    link_owner: tuple[str, str] = ("", "")
    """A child start's link's agent and session."""
    link_existing: RunRecord | None = None
    """The parent's record under the link's key."""


def _running(found: Found) -> bool:
    return found.run is not None and found.run.status is RunStatus.RUNNING


HOLDS: Mapping[Precondition, Callable[[Found], bool]] = {
    Precondition.RUN_RUNNING: _running,
    Precondition.NO_TERMINAL_KEY: lambda f: f.run is not None and not f.run.keys.terminal,
    Precondition.SAME_OWNER: lambda f: (
        f.run is not None and f.owner == (f.run.agent_id, f.run.session_id)
    ),
    Precondition.SAME_LABELS: lambda f: (
        f.run is not None and dict(f.run.labels) == dict(f.labels or {})
    ),
    Precondition.SAME_REASON: lambda f: (
        f.run is not None and (f.reasons is None or f.run.cancellation_reason in f.reasons)
    ),
    Precondition.SESSION_ACTIVE: lambda f: (
        not f.in_session
        or (isinstance(f.session, StoredSession) and f.session.status is SessionStatus.ACTIVE)
    ),
    Precondition.KEY_FREE: lambda f: f.existing is None,
    Precondition.RUN_ID_FREE: lambda f: f.run is None,
    Precondition.RUN_NOT_PURGED: lambda f: not f.purged,
    Precondition.NO_CANCELLATION: lambda f: (
        f.run is not None and not f.run.keys.cancellation and not f.run.cancellation_reason
    ),
    Precondition.NO_SUSPENSION_KEY: lambda f: f.run is not None and not f.run.keys.suspension,
    Precondition.SAME_CHECKPOINT: lambda f: (
        f.run is not None and f.run.checkpoint in (None, f.checkpoint)
    ),
    Precondition.PARENT_RUNNING: lambda f: (
        f.parent is not None and f.parent.status is RunStatus.RUNNING
    ),
    Precondition.PARENT_OWNER: lambda f: (
        f.parent is not None and f.link_owner == (f.parent.agent_id, f.parent.session_id)
    ),
    Precondition.LINK_KEY_FREE: lambda f: f.link_existing is None,
}


def holds(preconditions: Collection[Precondition], found: Found) -> bool:
    return all(HOLDS[precondition](found) for precondition in preconditions)


def appendable(target: RecordTarget, record: RecordDraft) -> bool:
    """AppendRunRecord's common case (``fast_paths.APPEND``) for ``record``."""
    run = target.run
    found = Found(
        run,
        target.session,
        in_session=bool(run and run.session_id),
        existing=target.existing,
        owner=(record.agent_id, record.session_id),
    )
    return holds(APPEND, found)


def startable(
    session: SessionLookup, stored: RunState | None, run: RunStart, purged: bool = False
) -> bool:
    """StartRootRun's and StartOneShotRun's common case (``fast_paths.START``,
    ``ONE_SHOT_START`` for a sessionless run) for a seed-era start that passed
    validation; a continuation is never tried (its predecessor is checked
    first, §10.2)."""
    in_session = bool(run.session_id)
    found = Found(stored, session, in_session=in_session, purged=purged)
    listed = START if in_session else ONE_SHOT_START
    return not run.predecessor_run_id and holds(listed, found)


def endable(target: RecordTarget, ending: RunEnding) -> bool:
    """RecordRunTerminal's common case (``fast_paths.END``) for a command
    ``lifecycle_changes.run_ending`` accepted."""
    run, record = target.run, ending.record
    found = Found(
        run,
        target.session,
        in_session=bool(run and run.session_id),
        existing=target.existing,
        owner=(record.agent_id, record.session_id),
        labels=ending.labels,
        reasons=ending.reasons,
    )
    return holds(END, found)


def changeable(target: RecordTarget, change: GuardedChange) -> bool:
    """RecordRunCancellation's or RecordRunSuspension's common case
    (``change.preconditions``: ``fast_paths.CANCEL`` or ``SUSPEND``) for a
    command ``lifecycle_changes.run_cancelling`` / ``run_suspending`` accepted."""
    run, record = target.run, change.record
    found = Found(
        run,
        target.session,
        in_session=bool(run and run.session_id),
        existing=target.existing,
        owner=(record.agent_id, record.session_id),
        checkpoint=change.change.checkpoint,
    )
    return holds(change.preconditions, found)


def child_startable(
    session: SessionLookup,
    stored: RunState | None,
    run: RunStart,
    parent: RecordTarget,
    link: RecordDraft,
    purged: bool = False,
) -> bool:
    """StartChildRun's and StartOneShotChildRun's common case
    (``fast_paths.CHILD_START``, ``ONE_SHOT_CHILD_START`` for a sessionless
    run) for a seed-era start that passed validation, ``parent`` read under
    the link's key."""
    in_session = bool(run.session_id)
    listed = CHILD_START if in_session else ONE_SHOT_CHILD_START
    found = Found(
        stored,
        session,
        in_session=in_session,
        purged=purged,
        parent=parent.run,
        link_owner=(link.agent_id, link.session_id),
        link_existing=parent.existing,
    )
    return not run.predecessor_run_id and holds(listed, found)
