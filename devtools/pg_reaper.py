"""Stops a private PostgreSQL cluster and deletes its directory once the process
that created it (a test run, a benchmark) has ended, however it ended.

``devtools/pg_cluster.py`` starts one reaper per cluster, in its own session (so
a Ctrl-C or a signal to the run's process group leaves it alone), with a pipe as
its standard input that only the creating process holds. The pipe closes when
that process closes it on purpose or dies, even of SIGKILL; the reaper then
thaws the cluster (a frozen postmaster ignores everything but SIGKILL and
SIGCONT), stops it in immediate mode, kills whatever is left and removes the
directory. Standard library only: it must not depend on the caller's environment.

Usage: ``python pg_reaper.py ROOT PG_CTL_COMMAND...``
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path


def postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def family(parent: int) -> list[int]:
    """The postmaster and every process it forked."""
    pids = [parent]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                pids.append(int(entry.name))
    return pids


def signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def stop(root: Path, pg_ctl: list[str]) -> None:
    data = root / "data"
    parent = postmaster_pid(data)
    if parent is None:
        return
    signal_all(family(parent), signal.SIGCONT)
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        subprocess.run(
            [*pg_ctl, "-D", str(data), "-m", "immediate", "-w", "-s", "-t", "30", "stop"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=40,
            check=False,
        )
    signal_all(family(parent), signal.SIGKILL)


def main(argv: list[str]) -> None:
    root, pg_ctl = Path(argv[1]), argv[2:]
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    sys.stdin.buffer.read()  # returns at end of file: the creating process is done or gone
    try:
        stop(root, pg_ctl)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv)
