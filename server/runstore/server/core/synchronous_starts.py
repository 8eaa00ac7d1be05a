"""StartSynchronousRun (docs/contract.md §9.2.5): a sessionless start owned by
a callback that runs outside the workflow engine.

Its run's start kind is permanent (the ``synchronous_runs`` row written with
the run): a synchronous start of an engine-created run is RUN_CONFLICT, and an
engine start of a synchronous run must be too. A retry must repeat the start
exactly, its time included, even after the run closed: there is no
closed-start replay for a callback.
"""

from __future__ import annotations

from runstore.contract.errors import RunConflictError
from runstore.contract.model import RunStartOutcome, RunStatus
from runstore.server.core import input_rules, validation
from runstore.server.core.checks import append_new
from runstore.server.core.model import OneShotRunStart, RunStartResult
from runstore.server.core.ports import Transaction
from runstore.server.core.seeds import check_start_seed
from runstore.server.core.starts import (
    Starts,
    _check_not_purged,
    _check_sessionless_retry,
    _replay_record,
)


class SynchronousStarts(Starts):
    """§9.2.5 over a ``Database``."""

    async def start_synchronous_run(self, cmd: OneShotRunStart) -> RunStartResult:
        """§9.2.5: StartOneShotRun's validation without a digest; the run's
        published seed, ending at ``run.seed_end_id``, attached (§9.7.9);
        exact retries only."""
        input_rules.check_run_start(cmd.run, started=cmd.started)
        run = cmd.run
        seed_end_id = run.seed_end_id
        started = validation.check_one_shot_run_start(run, cmd.started)
        now = self._clock()

        async def tx_fn(tx: Transaction) -> RunStartResult:
            # The seed lock orders this start against BeginRunSeed of the ID.
            locked = await tx.lock_seed_operation(run.run_id, None, now)
            await check_start_seed(tx, run, seed_end_id, locked)
            stored = await tx.run(run.run_id, for_update=True)
            if stored is not None:
                if await tx.synchronous_run(run.run_id) != seed_end_id:
                    raise RunConflictError(run_id=run.run_id)
                _check_sessionless_retry(stored, run, None, started)
                return RunStartResult(
                    RunStartOutcome.PROCEED, stored.status, await _replay_record(tx, started, None)
                )
            await _check_not_purged(tx, run)
            await tx.insert_run(
                self._new_run(run, RunStartOutcome.PROCEED, None, started, None, b"")
            )
            await tx.insert_synchronous_run(run.run_id, seed_end_id)
            return RunStartResult(
                RunStartOutcome.PROCEED, RunStatus.RUNNING, await append_new(tx, started, None)
            )

        return await self._db.write(tx_fn)
