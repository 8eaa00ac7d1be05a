"""Server TLS and mTLS whose certificates are re-read without a restart.

gRPC asks ``_fetch`` for a certificate configuration at every new handshake;
it answers with a fresh one only after ``reload()`` read the files again, so
connections already open keep their session and new ones get the new chain.
"""

from __future__ import annotations

import logging
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

log = logging.getLogger(__name__)


class TLSFileError(ValueError):
    """A certificate, key or CA file cannot be read."""


@dataclass(frozen=True, slots=True)
class TLSFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None
    """With a client CA, every connection must present a certificate it signed."""


def _read(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TLSFileError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN" not in data:
        raise TLSFileError(f"the {what} {path} is not PEM")
    return data


class ReloadableServerTLS:
    """Server credentials over ``TLSFiles``; ``reload()`` re-reads them."""

    def __init__(self, files: TLSFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._initial = self._configuration()
        self._pending: Any = None

    @property
    def mutual(self) -> bool:
        return self.files.client_ca is not None

    def _configuration(self) -> Any:
        cert = _read(self.files.cert, "TLS certificate")
        key = _read(self.files.key, "TLS key")
        client_ca = (
            _read(self.files.client_ca, "client CA") if self.files.client_ca is not None else None
        )
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                self.files.cert, self.files.key
            )
        except ssl.SSLError as exc:
            raise TLSFileError(
                f"the TLS key {self.files.key} does not match the certificate "
                f"{self.files.cert}: {exc.reason or exc}"
            ) from None
        return grpc.ssl_server_certificate_configuration([(key, cert)], client_ca)

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._initial, self._fetch, require_client_authentication=self.mutual
        )

    def _fetch(self) -> Any:
        """Called by gRPC (on its own threads) before each handshake."""
        with self._lock:
            pending, self._pending = self._pending, None
        return pending

    def reload(self) -> bool:
        """Re-reads the files for the next handshakes; on error keeps the old ones."""
        try:
            configuration = self._configuration()
        except TLSFileError as exc:
            log.error("TLS files not reloaded, keeping the current ones: %s", exc)
            return False
        with self._lock:
            self._pending = configuration
        log.info("TLS certificate %s reloaded for new connections", self.files.cert)
        return True
