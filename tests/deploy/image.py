"""The image `make image` builds, run without a container engine.

``buildah`` keeps the image in this checkout's store (var/image/, as
deploy/image/build does); ``mounted`` gives its root file system, and
``sandbox`` runs a command in it as a container would: its own mount and PID
namespaces, the root file system bind-mounted read-only, a tmpfs on /tmp, a
host directory on /data, a fresh /proc and a minimal /dev, then ``chroot`` to
it as the image's user. The network stays the host's, so the server is
reached on loopback. ``Sandbox.enter`` runs another command beside it, in its
namespaces and root (``nsenter``), as a `docker exec` would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runstore.server.version import __version__

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / "var" / "image"
IMAGE = f"localhost/runstore:{__version__}"
UID = 10001
"""The image's user and group (deploy/image/Containerfile)."""

_SERVING = re.compile(r"serving on \S+ \(port (\d+)\)")

# Runs as root in the new mount namespace (its mounts are private to it, so
# the host sees none of them): the root file system bound onto itself
# read-only, its writable places, then the command as the image's user.
_SANDBOX_SCRIPT = r"""
set -eu
root=$1 data=$2 user=$3; shift 3
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/tmp"
mount --bind "$data" "$root/data"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for device in null zero full random urandom; do
  touch "$root/dev/$device"
  mount --bind "/dev/$device" "$root/dev/$device"
done
exec chroot --userspec="$user:$user" "$root" /usr/bin/env -i --chdir=/data "$@"
"""


def required() -> None:
    """Skips a test on a machine that cannot build or run the image, except in
    CI (``CI=true``), where that is a failure: the deploy checks never skip there."""
    tools = ("buildah", "debootstrap", "unshare", "nsenter")
    missing = [tool for tool in tools if not shutil.which(tool)]
    problem = (
        f"missing {', '.join(missing)} (apt-get install buildah debootstrap)"
        if missing
        else "needs root (debootstrap, mounts, namespaces)"
        if os.geteuid() != 0
        else None
    )
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the image tests: {problem}")
    pytest.skip(problem)


def buildah(*args: str, timeout: float = 120) -> str:
    """``buildah`` on this checkout's store; its stdout."""
    command = [
        "buildah",
        "--root", str(STATE / "storage"),
        "--runroot", str(STATE / "run"),
        "--storage-driver", "overlay",
        *args,
    ]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def build() -> float:
    """``make image``'s script (fast when nothing changed); its wall time."""
    started = time.monotonic()
    done = subprocess.run(
        [str(ROOT / "deploy" / "image" / "build")],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"deploy/image/build exited {done.returncode}:\n{done.stdout[-4000:]}{done.stderr}"
        )
    return time.monotonic() - started


def config(image: str = IMAGE) -> dict[str, Any]:
    """The image's Docker-format configuration (User, Env, Healthcheck, ...)."""
    inspected = json.loads(buildah("inspect", "--type", "image", image))
    return dict(inspected["Docker"]["config"])


def environment(image: str = IMAGE) -> dict[str, str]:
    """The image's ENV, as a container of it starts with."""
    return dict(entry.split("=", 1) for entry in config(image).get("Env") or [])


@contextmanager
def mounted(image: str = IMAGE) -> Iterator[Path]:
    """The root file system of a new working container of ``image``; the
    container is unmounted and removed afterwards."""
    name = f"runstore-test-{uuid.uuid4().hex[:12]}"
    buildah("from", "--pull-never", "--name", name, image)
    try:
        yield Path(buildah("mount", name).strip())
    finally:
        buildah("umount", name)
        buildah("rm", name)


@dataclass
class Sandbox:
    """A command running in the image's root file system; see the module's docstring."""

    process: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)
    port: int | None = None
    _serving: threading.Event = field(default_factory=threading.Event)

    @property
    def pid(self) -> int:
        """The command's process ID on the host (PID 1 of its namespace)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        (child,) = children.read_text().split()
        return int(child)

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            if self.port is None and (match := _SERVING.search(line)):
                self.port = int(match.group(1))
                self._serving.set()
        self._serving.set()  # ended before serving: the waiter finds no port

    def wait_serving(self, timeout: float = 60) -> int:
        """The port the server listens on, once its log says it serves."""
        if not self._serving.wait(timeout) or self.port is None:
            raise AssertionError(f"the server did not start serving:\n{''.join(self.log)}")
        return self.port

    def enter(
        self, *command: str, env: Mapping[str, str], user: int = UID
    ) -> subprocess.CompletedProcess[str]:
        """``command`` in the sandbox's namespaces and root, as ``user`` (0: root)."""
        ids = ["--setuid", str(user), "--setgid", str(user)] if user else []
        entered = [
            "nsenter", "--target", str(self.pid), "--mount", "--pid", "--root", "--wd",
            *ids, "--", "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
            *command,
        ]  # fmt: skip
        return subprocess.run(
            entered,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, as a container engine stops a container; the exit code."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        return self.process.wait(timeout)


@contextmanager
def sandbox(
    rootfs: Path, data: Path, command: Sequence[str], env: Mapping[str, str]
) -> Iterator[Sandbox]:
    """``command`` with ``env`` (nothing else of this process's environment) in
    ``rootfs`` read-only, ``data`` on /data, as the image's user. Killed, if
    still running, on the way out; its namespaces and mounts go with it."""
    unshared = [
        "unshare", "--mount", "--propagation", "private", "--pid", "--fork",
        "--kill-child", "--", "/bin/sh", "-c", _SANDBOX_SCRIPT, "sandbox",
        str(rootfs), str(data), str(UID), *(f"{k}={v}" for k, v in env.items()), *command,
    ]  # fmt: skip
    process = subprocess.Popen(
        unshared,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    box = Sandbox(process)
    drain = threading.Thread(target=box._drain, daemon=True)
    drain.start()
    try:
        yield box
    finally:
        if process.poll() is None:
            process.kill()  # --kill-child: the command dies with it
        process.wait(30)
        drain.join(30)
        assert process.stderr is not None
        process.stderr.close()
