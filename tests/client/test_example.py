"""The example worker of the README runs against a real server."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.support import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "worker.py"


async def test_example_worker_runs_end_to_end(store: Store) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        "--target",
        store.target,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert "root run turn-1-" in text and ": proceed" in text
    assert "link is record 4 of the root" in text
    assert "root run suspended" in text
    assert "resumes checkpoint await-user-" in text
    assert "assistant: Rain in Paris: take an umbrella." in text
    assert "=suspended" in text and "=completed" in text
