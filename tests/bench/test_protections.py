"""The protected server's setup and the paired cost (bench/protections.py)."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

import pytest
from cryptography import x509

from bench import protections
from runstore.contract.auth_file import hash_token


def test_on_writes_a_worker_and_a_host_principal_and_turns_everything_on(
    tmp_path: Path,
) -> None:
    prepared = protections.prepare(True, tmp_path)
    principals = tomllib.loads((tmp_path / "auth.toml").read_text())["principal"]
    by_role = {p["role"]: p for p in principals}
    assert by_role["worker"]["token_sha256"] == hash_token(prepared.worker_token)
    assert by_role["host"]["token_sha256"] == hash_token(prepared.host_token)
    assert prepared.worker_token != prepared.host_token
    flags = prepared.flags
    assert flags[flags.index("--auth-file") + 1] == str(tmp_path / "auth.toml")
    assert flags[flags.index("--metrics-listen") + 1] == "127.0.0.1:0"
    assert flags[flags.index("--log-format") + 1] == "json" and "--access-log" in flags
    assert (tmp_path / "auth.toml").stat().st_mode & 0o077 == 0


def test_off_is_the_bare_server(tmp_path: Path) -> None:
    prepared = protections.prepare(False, tmp_path)
    assert prepared.flags == [] and prepared.plan()["tokens"] == {"worker": "", "host": ""}
    assert not (tmp_path / "auth.toml").exists()


def test_tls_serves_a_certificate_for_loopback_signed_by_the_ca(tmp_path: Path) -> None:
    prepared = protections.prepare(False, tmp_path, tls=True)
    cert_path = Path(prepared.flags[prepared.flags.index("--tls-cert") + 1])
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    ca = x509.load_pem_x509_certificate(prepared.ca_pem.encode())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)


def test_pairs_alternate_which_server_goes_first() -> None:
    assert protections.pair_orders(3) == [("on", "off"), ("off", "on"), ("on", "off")]


def test_paired_cost_is_one_minus_the_median_of_the_pairs_ratios() -> None:
    # Ratios 0.5, 0.8, 0.9, 1.0: the medians of each side alone (700 / 900)
    # would give a different answer than the median of the paired ratios.
    pairs = [(500.0, 1000.0), (800.0, 1000.0), (450.0, 500.0), (1000.0, 1000.0)]
    row = protections.paired_cost("sqlite", pairs)
    assert row["on_vs_off"] == pytest.approx(0.85)
    assert row["cost"] == pytest.approx(0.15)
    assert (row["on_vs_off_min"], row["on_vs_off_max"]) == (0.5, 1.0)
    assert row["on_vs_off_q1"] <= row["on_vs_off"] <= row["on_vs_off_q3"]
    assert (row["pairs"], row["workload"], row["in_flight"]) == (4, "append", 16)
    assert "| sqlite | append | 4 |" in protections.render_cost([row])
    coalesced = protections.paired_cost("sqlite", pairs, "append_client")
    assert coalesced["workload"] == "append_client"
    assert "| sqlite | append_client | 4 |" in protections.render_cost([row, coalesced])
    with pytest.raises(ValueError):
        protections.paired_cost("sqlite", [])
