"""No silent retry in the CLI: ``runstore records tail --follow`` refused by its
namespace's ``watch_streams`` quota (a real server at a quota of 1) prints one
line on stderr per wait, naming the quota and the wait, and keeps trying until
the stream holding the quota ends; then it follows the run to its end."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from runstore.client import RunStatus, records
from tests.client.test_refusals import watch_quota_of_one
from tests.support import Store


async def test_tail_follow_refused_by_a_quota_says_so_per_wait_and_keeps_trying(
    store: Store,
) -> None:
    async with watch_quota_of_one(store) as quota:
        holding = quota.holder.watch_run_records(quota.run.run_id)
        await anext(holding)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTORE_")}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runstore.cli",
            "records",
            "tail",
            "--run",
            quota.run.run_id,
            "--follow",
            "--json",
            "--target",
            store.target,
            "--namespace",
            quota.namespace,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        assert process.stderr is not None and process.stdout is not None
        try:
            refusals: list[str] = []
            while len(refusals) < 3:  # it keeps trying: several waits in a row
                line = await asyncio.wait_for(process.stderr.readline(), 30)
                assert line, "the command ended while refused"
                refusals.append(line.decode())
            await holding.aclose()
            await quota.holder.record_run_terminal(
                records.run_terminal(quota.run, RunStatus.COMPLETED)
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert process.returncode == 0, err
    for line in [*refusals, *err.decode().splitlines(keepends=True)]:
        assert line.startswith(
            f"runstore: refused: namespace {quota.namespace!r} is at its "
            "watch_streams quota (limit 1); retrying in "
        ), line
        assert line.rstrip().endswith("s")
    events = [json.loads(line)["type"] for line in out.decode().splitlines()]
    assert events == ["run_started", "run_completed"]
