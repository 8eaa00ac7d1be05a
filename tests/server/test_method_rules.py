"""The declared method rules equal the hand tables they replace (transitional)."""

from __future__ import annotations

from runstore.server import method_rules
from runstore.server.auth import roles
from runstore.server.console import access
from runstore.server.core import quotas
from runstore.server.interceptors import namespaces, read_lag

KIND = {"reads": "read", "writes": "write", "watch_streams": "watch"}


def test_the_declarations_equal_the_hand_tables() -> None:
    declared = method_rules.DECLARED
    assert {m: d.roles for m, d in declared.items()} == {
        m: r for m, r in roles.METHOD_ROLES.items() if m.startswith("/runstore.v1.")
    }
    assert {m for m, d in declared.items() if d.audited} == roles.AUDITED_METHODS
    assert {
        m: quotas.Rule(KIND[d.quota], d.adds_data) for m, d in declared.items() if d.quota
    } == dict(quotas.METHODS)
    assert {m for m, d in declared.items() if d.standby_reads == "when_tolerated"} == (
        read_lag.OPTING_IN
    )
    assert {m for m, d in declared.items() if d.standby_reads == "always"} == {
        "/runstore.v1.SessionAdmin/ListSessions",
        "/runstore.v1.SessionAdmin/ListRuns",
    }
    assert {m for m, d in declared.items() if d.namespace_scope == "one"} == {
        m for m in declared if m.startswith(namespaces.NAMESPACED_SERVICES)
    }
    assert {m for m, d in declared.items() if d.namespace_scope == "all"} == {
        m for m in declared if m.startswith(namespaces.ADMINISTRATION)
    }
    assert {m for m, d in declared.items() if d.console_reads} == access.CONSOLE_METHODS
