"""The image of deploy/image/Containerfile, built by `make image` and run as a
read-only container would run it (tests/deploy/image.py): as its numeric user,
nothing writable but /data and /tmp, serving on loopback; checked by its own
health check and the host's client, and stopped by SIGTERM.

Marked ``deploy``: CI runs these in its deploy stage (`make test-deploy`),
where they never skip (docs/deploy.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runstore.client import SyncRemoteSessionAdmin
from runstore.server.version import __version__
from tests.certs import Authority
from tests.deploy import image

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(1500)]

HOST_RUNSTORE = Path(sys.executable).with_name("runstore")


@pytest.fixture(scope="module")
def rootfs() -> Iterator[Path]:
    """The freshly built image's root file system (a working container, removed after)."""
    image.required()
    seconds = image.build()
    print(f"deploy/image/build: {seconds:.1f}s")
    with image.mounted() as root:
        yield root


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """An empty directory for /data, owned by the image's user as a volume would be."""
    directory = tmp_path / "data"
    directory.mkdir()
    os.chown(directory, image.UID, image.UID)
    return directory


def test_image_configuration(rootfs: Path) -> None:
    """What an engine reads from the image: a numeric user, /data as a volume,
    the gRPC port, the health check, settings as RUNSTORE_* variables."""
    config = image.config()
    assert config["User"] == "10001:10001"
    assert config["Volumes"] == {"/data": {}}
    assert config["ExposedPorts"] == {"50051/tcp": {}}
    assert config["Healthcheck"]["Test"] == ["CMD", "runstore-healthcheck"]
    assert config["Entrypoint"] == ["runstore"]
    assert config["Cmd"] == ["serve"]
    env = image.environment()
    assert env["RUNSTORE_LISTEN"] == "0.0.0.0:50051"
    assert env["RUNSTORE_DATABASE_URL"] == "sqlite:////data/runstore.db"
    # No pip and no compiler at run time; every module compiled at install time.
    venv = rootfs / "opt" / "runstore" / "venv"
    assert not (venv / "bin" / "pip").exists()
    assert not any((rootfs / "usr" / "bin").glob("gcc*"))
    assert list(venv.glob("lib/python3*/site-packages/runstore/server/__pycache__/app.*.pyc"))


def test_serves_read_only_as_its_user(rootfs: Path, data: Path) -> None:
    env = {**image.environment(), "RUNSTORE_LISTEN": "127.0.0.1:0"}
    with image.sandbox(rootfs, data, ["runstore", "serve"], env) as box:
        port = box.wait_serving()
        target = f"127.0.0.1:{port}"

        status = Path(f"/proc/{box.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines())
        assert fields["Uid"].split() == ["10001"] * 4
        assert fields["Gid"].split() == ["10001"] * 4
        assert fields["Groups"].split() in ([], ["10001"])

        # The image's own health check, with the environment the container has.
        health_env = {**image.environment(), "RUNSTORE_LISTEN": target}
        check = box.enter("runstore-healthcheck", env=health_env)
        assert (check.returncode, check.stdout.strip()) == (0, "SERVING"), check.stderr

        # The host's client: health with the server's version, then a real call.
        health = subprocess.run(
            [str(HOST_RUNSTORE), "health", "--json", "--target", target],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert health.returncode == 0, health.stderr
        assert json.loads(health.stdout) == {
            "service": "",
            "status": "SERVING",
            "server_version": __version__,
        }
        created_at = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
        with SyncRemoteSessionAdmin(target) as admin:
            created = admin.create_session("image-smoke", created_at)
            loaded = admin.load_session("image-smoke")
        assert loaded == created
        assert loaded.id == "image-smoke"
        assert (data / "runstore.db").stat().st_uid == image.UID

        # /data and /tmp take writes; nothing else does, not even root's.
        writable = box.enter("/bin/sh", "-c", "echo x > /data/probe && echo x > /tmp/probe", env={})
        assert writable.returncode == 0, writable.stderr
        assert (data / "probe").read_text() == "x\n"
        for user in (image.UID, 0):
            for path in ("/probe", "/etc/probe", "/opt/runstore/venv/probe", "/var/tmp/probe"):
                refused = box.enter("/usr/bin/touch", path, env={}, user=user)
                assert refused.returncode != 0, (user, path)
                assert "Read-only file system" in refused.stderr, (user, path, refused.stderr)
        assert not (rootfs / "probe").exists()

        assert box.stop() == 0
    assert "runstore stopped" in "".join(box.log)


def test_refuses_to_serve_off_loopback_unsecured(rootfs: Path, data: Path) -> None:
    """The image listens on 0.0.0.0: without TLS and an auth file, or
    RUNSTORE_INSECURE, it stops at once and says why (fail closed)."""
    with image.sandbox(rootfs, data, ["runstore", "serve"], image.environment()) as box:
        assert box.process.wait(60) != 0
        log = "".join(box.log)
    assert "refusing to serve 0.0.0.0:50051" in log, log
    assert "--insecure" in log


def test_health_check_under_mtls(rootfs: Path, data: Path) -> None:
    """With TLS and client certificates required, the health check trusts
    RUNSTORE_TLS_CA and presents RUNSTORE_HEALTH_TLS_CERT/KEY, not the server's
    own RUNSTORE_TLS_CERT/KEY, which the container's environment also holds."""
    authority = Authority()
    tls = data / "tls"
    tls.mkdir()
    (tls / "ca.crt").write_bytes(authority.pem)
    authority.server().write(tls, "server")
    authority.client("healthcheck").write(tls, "client")
    env = {
        **image.environment(),
        "RUNSTORE_LISTEN": "127.0.0.1:0",
        "RUNSTORE_TLS_CERT": "/data/tls/server.crt",
        "RUNSTORE_TLS_KEY": "/data/tls/server.key",
        "RUNSTORE_TLS_CLIENT_CA": "/data/tls/ca.crt",
    }
    with image.sandbox(rootfs, data, ["runstore", "serve"], env) as box:
        port = box.wait_serving()
        health_env = {
            **env,
            "RUNSTORE_LISTEN": f"127.0.0.1:{port}",
            "RUNSTORE_TLS_CA": "/data/tls/ca.crt",
        }
        # Plain `runstore health` in the container's environment presents the
        # server's certificate as its own, and is refused: why the script exists.
        plain = box.enter("runstore", "health", "--target", f"127.0.0.1:{port}", env=health_env)
        assert plain.returncode == 1
        assert "does not trust the client certificate" in plain.stderr, plain.stderr
        without = box.enter("runstore-healthcheck", env=health_env)
        assert without.returncode == 1
        assert "requires a client certificate" in without.stderr, without.stderr
        health_env |= {
            "RUNSTORE_HEALTH_TLS_CERT": "/data/tls/client.crt",
            "RUNSTORE_HEALTH_TLS_KEY": "/data/tls/client.key",
        }
        check = box.enter("runstore-healthcheck", env=health_env)
        assert (check.returncode, check.stdout.strip()) == (0, "SERVING"), check.stderr
        assert box.stop() == 0


def test_auth_reload_in_the_container(rootfs: Path, data: Path) -> None:
    """`docker exec ... runstore auth reload` under the read-only root: the pid
    file is in the container's /tmp, found from RUNSTORE_LISTEN, and the
    principal removed from the auth file is refused after the reload."""
    import grpc

    from runstore.contract.auth_file import add_token
    from runstore.v1 import session_admin_pb2 as sa
    from runstore.v1 import session_admin_pb2_grpc as sa_grpc

    token = "image-reload-token-0123456789abcdef0123456789"
    add_token(data / "auth.toml", "dashboards", "reader", token)
    add_token(data / "auth.toml", "ops", "admin", token[::-1])
    os.chown(data / "auth.toml", image.UID, image.UID)
    env = {
        **image.environment(),
        "RUNSTORE_LISTEN": "127.0.0.1:0",
        "RUNSTORE_AUTH_FILE": "/data/auth.toml",
    }
    with image.sandbox(rootfs, data, ["runstore", "serve"], env) as box:
        port = box.wait_serving()
        exec_env = {**env, "RUNSTORE_LISTEN": f"0.0.0.0:{port}"}

        def listed() -> grpc.StatusCode:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                try:
                    sa_grpc.SessionAdminStub(channel).ListSessions(
                        sa.ListSessionsRequest(),
                        metadata=(("authorization", f"Bearer {token}"),),
                        timeout=10,
                    )
                except grpc.RpcError as err:
                    return err.code()
            return grpc.StatusCode.OK

        assert listed() is grpc.StatusCode.OK
        removed = box.enter("runstore", "auth", "remove", "--name", "dashboards", env=exec_env)
        assert removed.returncode == 0, removed.stderr
        reloaded = box.enter("runstore", "auth", "reload", env=exec_env)
        assert reloaded.returncode == 0, reloaded.stderr
        assert f"/tmp/runstore-{port}.pid" in reloaded.stderr
        deadline = time.monotonic() + 30
        while listed() is not grpc.StatusCode.UNAUTHENTICATED:
            assert time.monotonic() < deadline, "".join(box.log)
            time.sleep(0.05)
        assert box.stop() == 0
