"""Both ways the interceptor chain runs its concerns' steps, for the tests that
exercise the chain: the generated flat coroutine and the nested reference
(``RUNSTORE_INTERCEPTOR_CHAIN``, docs/development.md "The interceptor chain")."""

from __future__ import annotations

import pytest

from runstore.server.interceptors.handlers import CHAIN_ENV, CHAIN_KINDS


@pytest.fixture(autouse=True, params=CHAIN_KINDS)
def chain_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every ``Chain`` the test builds (a server's included) runs its steps this
    way; a module takes it by importing it."""
    kind: str = request.param
    monkeypatch.setenv(CHAIN_ENV, kind)
    return kind
