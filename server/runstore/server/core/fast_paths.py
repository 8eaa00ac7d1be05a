"""The fast paths' preconditions, stated once (docs/contract.md §9.2.1,
§9.2.2, §9.2.3, §9.2.4, §9.3, §9.3.1, §9.4.1, §9.4.2, §9.4.3).

The common case of AppendRunRecord(s), StartRootRun, StartChildRun,
StartOneShotRun, StartOneShotChildRun, RecordRunCancellation,
RecordRunSuspension and RecordRunTerminal is one write
of the database's own (``Database.append_if_writable``,
``append_records_if_writable``, ``start_if_new``, ``start_child_if_new``,
``change_if_running``, ``end_if_running``) that stores the command only when
every precondition of its list holds for the state it finds, and otherwise
writes nothing; the core then runs the full rules, which decide everything
else. The SQL of each write is built from its list here (``db.fast_path_sql``,
``db.batch_sql``), so a precondition added or dropped here changes the SQL
with it; the equivalence tests hold that SQL and the full rules to the same
lists.

The core tries a fast path only for a command of the right shape, checked on
the command alone: a seed-era start without predecessor (a continuation
checks its predecessor first, §10.2; a current start attaches its seed), a
batch with one owner and distinct keys (``batch_rules.one_owner_distinct_keys``),
a terminal command that ``lifecycle_changes.run_ending`` accepts, a
cancellation or suspension that ``lifecycle_changes.run_cancelling`` /
``run_suspending`` accepts.

A run whose start stopped (its session had ended, §9.2.1) lives in an ended
session, which never becomes active again: ``SESSION_ACTIVE`` rules out every
check the full rules make of a stopped start.
"""

from __future__ import annotations

import enum
from typing import Final


class Precondition(enum.Enum):
    """One condition on the stored state that a fast path's write checks."""

    RUN_RUNNING = "the run exists and is running (not suspended or terminal)"
    NO_TERMINAL_KEY = "the run has no terminal key"
    SAME_OWNER = "the record's agent and session are the run's"
    SAME_LABELS = "the run's labels are the record's"
    SAME_REASON = (
        "a canceled record's reason is the run's (the engine's default when the run has none)"
    )
    SESSION_ACTIVE = "a run in a session: the session exists and is active (so no tombstone)"
    KEY_FREE = "no record of the run has the record's event key (each record's, in a batch)"
    RUN_ID_FREE = "no run has the run's ID (no retry, no conflict)"
    RUN_NOT_PURGED = "no run tombstone has the run's ID (retention deleted such a run, §9.10.2)"
    NO_CANCELLATION = "the run has neither a cancellation reason nor a cancellation key"
    NO_SUSPENSION_KEY = "the run has no suspension key"
    SAME_CHECKPOINT = "the run has no checkpoint, or the command's (ID and bytes)"
    PARENT_RUNNING = "a child's parent run exists and is running"
    PARENT_OWNER = "the parent link's agent and session are the parent run's"
    LINK_KEY_FREE = "no record of the parent run has the parent link's event key"


APPEND: Final = (
    Precondition.RUN_RUNNING,
    Precondition.SAME_OWNER,
    Precondition.KEY_FREE,
    Precondition.SESSION_ACTIVE,
)
"""AppendRunRecord's common case, and each record's of an AppendRunRecords batch:
the record is new and written with no further question."""

START: Final = (
    Precondition.SESSION_ACTIVE,
    Precondition.RUN_NOT_PURGED,
    Precondition.RUN_ID_FREE,
)
"""StartRootRun's common case: the run and its ``run_started`` record are
written with no further question."""

ONE_SHOT_START: Final = (
    Precondition.RUN_NOT_PURGED,
    Precondition.RUN_ID_FREE,
)
"""StartOneShotRun's common case: the sessionless run and its ``run_started``
record are written with no further question."""

ONE_SHOT_CHILD_START: Final = (
    *ONE_SHOT_START,
    Precondition.PARENT_RUNNING,
    Precondition.PARENT_OWNER,
    Precondition.LINK_KEY_FREE,
)
"""StartOneShotChildRun's common case: the sessionless child run, then the
link on its sessionless parent (``PARENT_OWNER``: the link's session, none, is
the parent's) and the child's ``run_started`` record, with no further question."""

CHILD_START: Final = (
    *START,
    Precondition.PARENT_RUNNING,
    Precondition.PARENT_OWNER,
    Precondition.LINK_KEY_FREE,
)
"""StartChildRun's common case: the link on the parent, the child run and its
``run_started`` record are written with no further question."""

END: Final = (
    Precondition.RUN_RUNNING,
    Precondition.NO_TERMINAL_KEY,
    Precondition.SAME_OWNER,
    Precondition.SAME_LABELS,
    Precondition.SAME_REASON,
    Precondition.KEY_FREE,
    Precondition.SESSION_ACTIVE,
)
"""RecordRunTerminal's common case: the terminal record is new and written
with the run's status change, no further question."""

CANCEL: Final = (
    Precondition.RUN_RUNNING,
    Precondition.NO_CANCELLATION,
    Precondition.SAME_OWNER,
    Precondition.KEY_FREE,
    Precondition.SESSION_ACTIVE,
)
"""RecordRunCancellation's common case: the run's first cancellation intent,
written with its reason and key, no further question."""

SUSPEND: Final = (
    Precondition.RUN_RUNNING,
    Precondition.NO_SUSPENSION_KEY,
    Precondition.SAME_CHECKPOINT,
    Precondition.SAME_OWNER,
    Precondition.KEY_FREE,
    Precondition.SESSION_ACTIVE,
)
"""RecordRunSuspension's common case: the ``run_suspended`` record is new and
written with the run's checkpoint and status, no further question."""
