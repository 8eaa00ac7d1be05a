"""Security: TLS and mTLS, principals and roles, and the secure-by-default rule.

``Security.from_config`` reads the TLS files and the auth file once at start
(and refuses to start on bad ones); ``reload()`` (SIGHUP) re-reads both,
keeping what was good when a file is broken. A server on an address that is
not loopback needs TLS and an auth file unless ``--insecure`` says otherwise.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc

from runstore.server.auth.principals import AuthFileError, PrincipalsFile
from runstore.server.auth.tls import ReloadableServerTLS, TLSFileError, TLSFiles
from runstore.server.config import ServerConfig

log = logging.getLogger(__name__)


class SecurityError(RuntimeError):
    """The server must not start as configured; the message names the fix."""


def is_loopback(listen: str) -> bool:
    """Whether ``listen`` (host:port, [v6]:port or unix:path) is reachable only locally."""
    if listen.startswith(("unix:", "unix-abstract:")):
        return True
    host = listen.rsplit(":", 1)[0] if ":" in listen else listen
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Security:
    """What one server enforces; ``None`` parts are off."""

    principals: PrincipalsFile | None = None
    tls: ReloadableServerTLS | None = None

    @classmethod
    def from_config(cls, config: ServerConfig) -> Security:
        if bool(config.tls_cert) != bool(config.tls_key):
            raise SecurityError("--tls-cert and --tls-key go together")
        if config.tls_client_ca and not config.tls_cert:
            raise SecurityError("--tls-client-ca (mTLS) needs --tls-cert and --tls-key")
        try:
            tls = (
                ReloadableServerTLS(
                    TLSFiles(
                        Path(config.tls_cert),
                        Path(config.tls_key),
                        Path(config.tls_client_ca) if config.tls_client_ca else None,
                    )
                )
                if config.tls_cert
                else None
            )
            principals = PrincipalsFile(Path(config.auth_file)) if config.auth_file else None
        except (AuthFileError, TLSFileError) as exc:
            raise SecurityError(str(exc)) from None
        security = cls(principals, tls)
        security._check_exposure(config)
        return security

    def _check_exposure(self, config: ServerConfig) -> None:
        missing = [
            flag
            for flag, present in (
                ("--tls-cert/--tls-key", self.tls is not None),
                ("--auth-file", self.principals is not None),
            )
            if not present
        ]
        if not missing or is_loopback(config.listen):
            return
        if not config.insecure:
            raise SecurityError(
                f"refusing to serve {config.listen} (not loopback) without "
                f"{' and '.join(missing)}; pass --insecure to serve it anyway"
            )
        log.warning(
            "--insecure: serving %s (not loopback) without %s: anyone who can reach it "
            "can read and change every session",
            config.listen,
            " and ".join(missing),
        )

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """Credentials for ``add_secure_port``; None serves plaintext."""
        return self.tls.credentials() if self.tls is not None else None

    def describe(self) -> str:
        """For the start-up log line: transport and authentication."""
        transport = "plaintext" if self.tls is None else "mTLS" if self.tls.mutual else "TLS"
        if self.principals is None:
            return f"{transport}, authentication off"
        return f"{transport}, {len(self.principals.current)} principals"

    def reload(self) -> None:
        """Re-reads the auth file and the TLS files (SIGHUP)."""
        if self.principals is not None:
            self.principals.reload()
        if self.tls is not None:
            self.tls.reload()
