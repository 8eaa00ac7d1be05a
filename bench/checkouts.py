"""Running runstore from another checkout of it, beside this one's harness:
``python -m bench.arms --source A --source B`` compares two commits' servers."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path


def source_env(source: Path | None) -> dict[str, str]:
    """The environment of a process running runstore from the checkout
    ``source`` (its ``server`` and ``client`` packages ahead of the installed
    ones; the dependencies stay this venv's), or this process's own."""
    if source is None:
        return dict(os.environ)
    paths = [str(source / "server"), str(source / "client")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


async def migrate_from(source: Path, url: str) -> None:
    """``runstore migrate`` of the checkout ``source`` on ``url``."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstore.cli",
        "migrate",
        "--database-url",
        url,
        env=source_env(source),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"runstore migrate of {source} failed:\n{out.decode(errors='replace')}")
