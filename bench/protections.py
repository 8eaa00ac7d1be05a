"""The protections a benchmarked server runs with, and what they cost.

``on`` (the default of ``make bench``) is a server as users run it:
authentication from an auth file (the driver holds a **worker** token for the
measured calls and a **host** token for the setup calls a worker may not make,
such as CreateSession, and for the host's listings), Prometheus metrics on
(``--metrics-listen 127.0.0.1:0``, scraped by nobody) and JSON logs with an
access line per call, written to a file (the server's stderr). ``off`` is the
bare server: no authentication, no metrics, text logs without access lines.
``--tls`` adds TLS (a throwaway CA and server certificate) to every server.

``--protections both`` measures the main plan with protections on and then
their cost on appends: ``--pairs`` pairs of servers, one on and one off,
started one after the other in alternating order (on-off, off-on, ...), so a
drift on a noisy machine hits both sides; the cost is one minus the median of
the pairs' on/off ratios, with the spread of those ratios. Each paired figure
is at least ``PAIRED_MIN_SECONDS`` after ``PAIRED_MIN_WARMUP``, even with
``--quick``: a fresh server's first moments are not its steady state.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runstore.contract.auth_file import hash_token

MODES = ("on", "off", "both")
PAIRED_WORKLOAD = "append"
PAIRED_IN_FLIGHT = 16
"""The paired comparison's workload and calls in flight (docs/benchmarks.md, goal 1)."""
ALSO_PAIRED = ("append_client",)
"""Workloads also paired when the run measures them: their cost is reported
beside the goal's, not judged (issue 36 reports it for coalesced appends)."""
PAIRED_MIN_SECONDS = 1.0
PAIRED_MIN_WARMUP = 0.5
"""Each paired figure's shortest window and warm-up (a fresh server each time)."""
GOAL_PAIRS = 10
"""Pairs the protections' cost needs before its goal is judged."""

DESCRIPTION = (
    "authentication (bearer tokens: worker for runtime calls, host for session "
    "administration), metrics (--metrics-listen), JSON logs with an access line per "
    "call written to a file"
)


@dataclass(frozen=True)
class Protections:
    """One server's ``runstore serve`` flags and what its clients need to call it."""

    on: bool
    flags: list[str] = field(default_factory=list)
    worker_token: str = ""
    host_token: str = ""
    ca_pem: str = ""
    """The CA the driver trusts when the server serves TLS (empty: plaintext)."""

    def plan(self) -> dict[str, Any]:
        """What the driver's plan carries to call this server."""
        return {
            "tokens": {"worker": self.worker_token, "host": self.host_token},
            "tls_ca": self.ca_pem,
        }


def prepare(on: bool, directory: Path, *, tls: bool = False) -> Protections:
    """Writes the auth file (and certificates) for one server into ``directory``."""
    flags: list[str] = []
    ca_pem = ""
    if tls:
        ca_pem, cert, key = certificates(directory)
        flags += ["--tls-cert", str(cert), "--tls-key", str(key)]
    if not on:
        return Protections(on=False, flags=flags, ca_pem=ca_pem)
    worker, host = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    auth_file = directory / "auth.toml"
    auth_file.write_text(
        "".join(
            f'[[principal]]\nname = "bench-{role}"\nrole = "{role}"\n'
            f'token_sha256 = "{hash_token(token)}"\n\n'
            for role, token in (("worker", worker), ("host", host))
        )
    )
    auth_file.chmod(0o600)
    flags += [
        "--auth-file",
        str(auth_file),
        "--metrics-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
        "--access-log",
    ]
    return Protections(on=True, flags=flags, worker_token=worker, host_token=host, ca_pem=ca_pem)


def certificates(directory: Path) -> tuple[str, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 and localhost:
    the CA's PEM, and the paths of the server's certificate and key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))

    def builder(subject: str, issuer: str, public_key: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        builder("runstore bench CA", "runstore bench CA", ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    cert = (
        builder("localhost", "runstore bench CA", key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return ca.public_bytes(serialization.Encoding.PEM).decode(), cert_path, key_path


def pair_orders(pairs: int) -> list[tuple[str, str]]:
    """The order of the two servers in each pair: on-off, off-on, on-off, ..."""
    return [("on", "off") if index % 2 == 0 else ("off", "on") for index in range(pairs)]


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def paired_cost(
    backend: str, pairs: list[tuple[float, float]], workload: str = PAIRED_WORKLOAD
) -> dict[str, Any]:
    """The protections' cost from ``pairs`` of (ops/s on, ops/s off), each
    pair measured back to back: medians, the median of the pairs' on/off
    ratios, their spread (min, quartiles, max) and the cost (1 - that ratio)."""
    if not pairs:
        raise ValueError("no pairs measured")
    ratios = sorted(on / off for on, off in pairs)
    median = statistics.median(ratios)
    q1, q3 = _quartiles(ratios)
    return {
        "backend": backend,
        "workload": workload,
        "in_flight": PAIRED_IN_FLIGHT,
        "pairs": len(pairs),
        "on_ops_per_s": round(statistics.median(on for on, _ in pairs), 1),
        "off_ops_per_s": round(statistics.median(off for _, off in pairs), 1),
        "on_vs_off": round(median, 3),
        "on_vs_off_min": round(ratios[0], 3),
        "on_vs_off_q1": round(q1, 3),
        "on_vs_off_q3": round(q3, 3),
        "on_vs_off_max": round(ratios[-1], 3),
        "cost": round(1 - median, 3),
    }


def render_cost(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Protections' cost on appends ({PAIRED_IN_FLIGHT} in flight), paired on/off servers "
        "in alternating order:",
        "",
        "| backend | workload | pairs | appends/s on | appends/s off | on/off (median) "
        "| on/off min–max | on/off IQR | cost |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['backend']} | {row.get('workload', PAIRED_WORKLOAD)} | {row['pairs']} "
            f"| {row['on_ops_per_s']:,.0f} "
            f"| {row['off_ops_per_s']:,.0f} | {row['on_vs_off']:.3f} "
            f"| {row['on_vs_off_min']:.2f}–{row['on_vs_off_max']:.2f} "
            f"| {row['on_vs_off_q1']:.2f}–{row['on_vs_off_q3']:.2f} | {row['cost']:.1%} |"
        )
    return "\n".join(lines)
