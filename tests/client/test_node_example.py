"""The Node.js worker of docs/clients/node.md (examples/node/worker.js) runs
against a real server: proto-loader's view of the protos, the payload bytes it
sends and the ErrorInfo it decodes all agree with the server."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from tests import needs
from tests.support import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node"


@needs.unless("node", None if shutil.which("node") else "node is not on the PATH")
@needs.unless(
    "the Node.js example's npm packages",
    None
    if (EXAMPLE / "node_modules" / ".installed").exists()
    else "examples/node/node_modules is missing: make install puts them there",
)
async def test_node_example_worker_runs_end_to_end(store: Store) -> None:
    process = await asyncio.create_subprocess_exec(
        "node",
        str(EXAMPLE / "worker.js"),
        store.target,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    assert out.decode().splitlines() == [
        "session: SESSION_STATUS_ACTIVE",
        "start: RUN_START_OUTCOME_PROCEED",
        "appended record 2",
        "run: RUN_STATUS_COMPLETED",
        "error: NOT_FOUND RUN_NOT_FOUND permanent=true",
    ]
