"""Certificates made by the tests themselves: a CA, a server and client certificates.

Keys are small EC keys so a whole set takes milliseconds. Nothing here is
meant for production: it exists so TLS and mTLS run for real in every test run.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key, both PEM."""

    cert: bytes
    key: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        cert_path.write_bytes(self.cert)
        key_path.write_bytes(self.key)
        return cert_path, key_path


class Authority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, name: str = "runstore test CA") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def server(self, dns: str = "localhost") -> Pair:
        """A server certificate for ``dns`` and 127.0.0.1."""
        names: list[x509.GeneralName] = [
            x509.DNSName(dns),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        return self._issue(dns, names, ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, common_name: str, *, uri: str = "", dns: str = "") -> Pair:
        """A client certificate with subject CN ``common_name`` and optional SANs."""
        names: list[x509.GeneralName] = []
        if uri:
            names.append(x509.UniformResourceIdentifier(uri))
        if dns:
            names.append(x509.DNSName(dns))
        return self._issue(common_name, names, ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(
        self, common_name: str, names: list[x509.GeneralName], usage: x509.ObjectIdentifier
    ) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Pair(
            cert=cert.public_bytes(serialization.Encoding.PEM),
            key=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
