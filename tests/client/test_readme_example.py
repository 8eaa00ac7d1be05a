"""The usage example of client/README.md runs as written against a real server."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from tests.support import Store

README = Path(__file__).resolve().parents[2] / "client" / "README.md"


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert len(blocks) == 1, "client/README.md has one Python example"
    return str(blocks[0])


async def test_the_readme_example_runs(store: Store, tmp_path: Path) -> None:
    script = tmp_path / "readme_example.py"
    script.write_text(readme_example())
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTORE_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**environment, "RUNSTORE_TARGET": store.target},
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert re.fullmatch(r"appended record 2 to run turn-[0-9a-f]{8}", lines[0]), lines
    assert lines[1].startswith("1 run_started ")
    assert lines[2] == '2 note {"text":"hello"}'
