"""The fast paths' preconditions as plain predicates over stored state: the
common cases of AppendRunRecord, StartRootRun and RecordRunTerminal, which the
databases write in one statement. The equivalence tests hold the fast-path SQL
and the store's full rules to these lists."""

from __future__ import annotations

from runstore.contract.model import RunStatus, SessionStatus
from runstore.server.core.model import RecordDraft, RunEnding, RunStart, RunState, Session
from runstore.server.core.ports import RecordTarget, SessionLookup


def appendable(target: RecordTarget, record: RecordDraft) -> bool:
    """The common case of AppendRunRecord (§9.3), in which ``record`` is new
    and written with no further question. The one list of the preconditions
    ``Database.append_if_writable`` implements (and that
    ``tests/core/test_fast_path_equivalence.py`` holds it and
    ``append_run_record``'s full rules to):

    1. the run exists and is running (not suspended or terminal);
    2. the record's agent and session are the run's;
    3. a run in a session: the session exists, is not a tombstone, is active;
    4. no record of the run has the record's event key.

    When it does not hold the full rules decide: replay, or which error.
    """
    run, session = target.run, target.session
    return (
        run is not None
        and run.status is RunStatus.RUNNING
        and (record.agent_id, record.session_id) == (run.agent_id, run.session_id)
        and (
            not run.session_id
            or (isinstance(session, Session) and session.status is SessionStatus.ACTIVE)
        )
        and target.existing is None
    )


def startable(
    session: SessionLookup, stored: RunState | None, run: RunStart, purged: bool = False
) -> bool:
    """The common case of StartRootRun (§9.2.1), in which the run and its
    ``run_started`` record are written with no further question. The one list
    of the preconditions ``Database.start_if_new`` implements (and that
    ``tests/core/test_lifecycle_fast_paths.py`` holds it and
    ``start_root_run``'s full rules to), for a start that passed validation:

    1. the run has no predecessor (a continuation checks it first, §10.2);
    2. the session exists and is active (so it is no tombstone);
    3. no run has the run's ID (no retry, no conflict);
    4. no run tombstone has it (``purged``: retention deleted such a run, §9.10.2).
    """
    return (
        not run.predecessor_run_id
        and isinstance(session, Session)
        and session.status is SessionStatus.ACTIVE
        and stored is None
        and not purged
    )


def endable(target: RecordTarget, ending: RunEnding) -> bool:
    """The common case of RecordRunTerminal (§9.4.3), in which the terminal
    record is new and written with the status change, no further question.
    The one list of the preconditions ``Database.end_if_running`` implements
    (and that ``tests/core/test_lifecycle_fast_paths.py`` holds it and
    ``record_run_terminal``'s full rules to), for a command ``run_ending``
    accepted:

    1. the run exists, is running (not suspended or terminal) and has no
       terminal key;
    2. the record's agent and session are the run's;
    3. the run's labels are the record's, and a canceled record's reason is
       the run's (the engine's default when the run has none);
    4. a run in a session: the session exists, is active;
    5. no record of the run has the record's event key.
    """
    run, session, record = target.run, target.session, ending.record
    return (
        run is not None
        and run.status is RunStatus.RUNNING
        and not run.keys.terminal
        and (record.agent_id, record.session_id) == (run.agent_id, run.session_id)
        and dict(run.labels) == dict(ending.labels)
        and (ending.reasons is None or run.cancellation_reason in ending.reasons)
        and (
            not run.session_id
            or (isinstance(session, Session) and session.status is SessionStatus.ACTIVE)
        )
        and target.existing is None
    )
