"""Every method of every runstore service declares its rules once
(``runstore.v1.method_rules``), and every per-method table of the server is
what those declarations say (docs/development.md, "Adding a method")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import MethodDescriptor

from runstore.contract.metadata import READ_LAG_KEY, READ_LAG_TOLERATED
from runstore.server import method_rules
from runstore.server.auth import roles
from runstore.server.console import access
from runstore.server.core import quota_rules
from runstore.server.db import lagging
from runstore.server.interceptors import namespaces, read_lag
from runstore.server.interceptors.handlers import Chain
from runstore.v1 import options_pb2

PROTOS = Path(__file__).parents[2] / "protos" / "runstore" / "v1"


def _methods() -> dict[str, MethodDescriptor]:
    """Every method of every service in protos/runstore/v1, found by file (not
    by the module under test)."""
    pool = descriptor_pool.Default()
    return {
        f"/{service.full_name}/{method.name}": method
        for proto in sorted(PROTOS.glob("*.proto"))
        for service in pool.FindFileByName(f"runstore/v1/{proto.name}").services_by_name.values()
        for method in service.methods
    }


METHODS = _methods()


def _rules(method: MethodDescriptor) -> Any:
    return method.GetOptions().Extensions[options_pb2.method_rules]


def test_every_method_of_every_service_declares_every_rule() -> None:
    assert len(METHODS) > 40  # the five services were found
    for path, method in METHODS.items():
        assert method.GetOptions().HasExtension(options_pb2.method_rules), path
        rules = _rules(method)
        assert rules.roles and options_pb2.ROLE_UNSPECIFIED not in rules.roles, path
        assert rules.quota != options_pb2.QUOTA_CLASS_UNSPECIFIED, path
        assert rules.standby_reads != options_pb2.STANDBY_READS_UNSPECIFIED, path
        assert rules.namespace_scope != options_pb2.NAMESPACE_SCOPE_UNSPECIFIED, path
    assert set(method_rules.DECLARED) == set(METHODS)


def _where(**wanted: Any) -> set[str]:
    return {
        path
        for path, method in METHODS.items()
        if all(getattr(_rules(method), field) == value for field, value in wanted.items())
    }


def test_the_role_table_is_the_declared_roles() -> None:
    names = {
        options_pb2.ROLE_ADMIN: roles.ADMIN,
        options_pb2.ROLE_HOST: roles.HOST,
        options_pb2.ROLE_WORKER: roles.WORKER,
        options_pb2.ROLE_READER: roles.READER,
    }
    assert set(names.values()) == set(roles.ROLES)
    runstore = {m: r for m, r in roles.METHOD_ROLES.items() if m.startswith("/runstore.")}
    assert runstore == {
        path: frozenset(names[role] for role in _rules(method).roles)
        for path, method in METHODS.items()
    }
    assert _where(audited=True) == roles.AUDITED_METHODS


def test_the_quota_table_is_the_declared_quota_classes() -> None:
    kinds = {
        options_pb2.QUOTA_CLASS_READS: quota_rules.READ,
        options_pb2.QUOTA_CLASS_WRITES: quota_rules.WRITE,
        options_pb2.QUOTA_CLASS_WATCH_STREAMS: quota_rules.WATCH,
    }
    assert dict(quota_rules.METHODS) == {
        path: quota_rules.Rule(kinds[_rules(method).quota], adds_data=_rules(method).adds_data)
        for path, method in METHODS.items()
        if _rules(method).quota != options_pb2.QUOTA_CLASS_NONE
    }
    assert _where(adds_data=True) <= _where(quota=options_pb2.QUOTA_CLASS_WRITES)


def test_the_namespace_tables_are_the_declared_scopes() -> None:
    assert _where(namespace_scope=options_pb2.NAMESPACE_SCOPE_ONE) == namespaces.NAMESPACED
    assert _where(namespace_scope=options_pb2.NAMESPACE_SCOPE_ALL) == namespaces.ADMINISTRATION
    assert {
        m for m in METHODS if m.startswith("/runstore.v1.NamespaceAdmin/")
    } == namespaces.ADMINISTRATION


def test_the_console_reads_are_the_declared_ones() -> None:
    assert _where(console_reads=True) == access.CONSOLE_METHODS


def test_the_standby_serves_exactly_the_documented_reads() -> None:
    """docs/failover.md: the operator's listings always; the record listings
    when the call says it tolerates lag; nothing else."""
    assert _where(standby_reads=options_pb2.STANDBY_READS_ALWAYS) == read_lag.ALWAYS_LAGGING
    assert _where(standby_reads=options_pb2.STANDBY_READS_WHEN_TOLERATED) == read_lag.OPTING_IN
    assert {
        "/runstore.v1.SessionAdmin/ListSessions",
        "/runstore.v1.SessionAdmin/ListRuns",
    } == read_lag.ALWAYS_LAGGING
    assert {
        "/runstore.v1.RuntimeStore/ListRunRecords",
        "/runstore.v1.RuntimeStore/ListSessionRunRecords",
        "/runstore.v1.RuntimeStore/ListRunTranscriptRecords",
    } == read_lag.OPTING_IN


def _service(options: descriptor_pb2.MethodOptions | None) -> Any:
    """A service of one method ``Probe`` carrying ``options``, in a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    for file in (descriptor_pb2.DESCRIPTOR, options_pb2.DESCRIPTOR):
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        pool.Add(proto)
    probe = descriptor_pb2.FileDescriptorProto(
        name="probe/v1/probe.proto",
        package="probe.v1",
        dependency=["runstore/v1/options.proto"],
        message_type=[descriptor_pb2.DescriptorProto(name="Empty")],
    )
    method = probe.service.add(name="Probe").method.add(
        name="Probe", input_type=".probe.v1.Empty", output_type=".probe.v1.Empty"
    )
    if options is not None:
        method.options.CopyFrom(options)
    pool.Add(probe)
    return pool.FindServiceByName("probe.v1.Probe")


def _declared_with(**fields: Any) -> descriptor_pb2.MethodOptions:
    options = descriptor_pb2.MethodOptions()
    rules = options.Extensions[options_pb2.method_rules]
    rules.roles.append(options_pb2.ROLE_ADMIN)
    rules.quota = options_pb2.QUOTA_CLASS_READS
    rules.standby_reads = options_pb2.STANDBY_READS_NEVER
    rules.namespace_scope = options_pb2.NAMESPACE_SCOPE_ONE
    for field, value in fields.items():
        if field == "roles":
            del rules.roles[:]
            rules.roles.extend(value)
        else:
            setattr(rules, field, value)
    return options


def test_a_fully_declared_method_is_read() -> None:
    (found,) = method_rules.declared([_service(_declared_with())]).values()
    assert found.method == "/probe.v1.Probe/Probe"
    assert (found.roles, found.quota, found.standby_reads) == (
        frozenset({"admin"}),
        method_rules.READS,
        method_rules.NEVER,
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (None, "has no (runstore.v1.method_rules)"),
        (_declared_with(roles=[]), "method_rules.roles"),
        (_declared_with(quota=options_pb2.QUOTA_CLASS_UNSPECIFIED), "method_rules.quota"),
        (_declared_with(standby_reads=0), "method_rules.standby_reads"),
        (_declared_with(namespace_scope=0), "method_rules.namespace_scope"),
        (_declared_with(adds_data=True), "method_rules.adds_data"),
        (
            _declared_with(quota=options_pb2.QUOTA_CLASS_WATCH_STREAMS),
            "method_rules.quota",
        ),
    ],
    ids=["no-option", "no-roles", "quota", "standby", "scope", "adds-data-read", "watch-unary"],
)
def test_a_method_not_fully_declared_is_refused(
    options: descriptor_pb2.MethodOptions | None, named: str
) -> None:
    with pytest.raises(method_rules.DeclarationError, match=re.escape(named)):
        method_rules.declared([_service(options)])


class _Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata


async def _lags(method: str, metadata: tuple[tuple[str, str], ...]) -> bool:
    """Whether the read-lag concern lets a call of ``method`` read the standby."""

    async def behaviour(request: Any, context: Any) -> bool:
        return lagging.tolerated()

    chain = Chain([read_lag.ReadLag()])
    handler = chain.compose(method, grpc.unary_unary_rpc_method_handler(behaviour))
    assert handler.unary_unary is not None
    return bool(await handler.unary_unary(b"", _Context(metadata)))


async def test_the_read_lag_concern_applies_each_declaration() -> None:
    """The operator's listings read the standby with or without the header
    (the servicer no longer decides it); the record listings only with it."""
    tolerated = ((READ_LAG_KEY, READ_LAG_TOLERATED),)
    for path, method in METHODS.items():
        if method.server_streaming:
            continue
        declared = _rules(method).standby_reads
        always = declared == options_pb2.STANDBY_READS_ALWAYS
        opting_in = declared == options_pb2.STANDBY_READS_WHEN_TOLERATED
        assert await _lags(path, ()) is always, path
        assert await _lags(path, tolerated) is (always or opting_in), path
    assert await _lags("/runstore.v1.SessionAdmin/ListRuns", ()) is True
    assert await _lags("/runstore.v1.RuntimeStore/LoadRun", tolerated) is False
