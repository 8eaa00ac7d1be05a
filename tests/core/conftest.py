"""The store core's tests call it directly, as the interceptor chain would
inside a call: each acts in ``default`` unless it names another namespace
(``call_scope``; outside any, database work raises)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runstore.contract.namespaces import DEFAULT
from runstore.server import call_scope


@pytest.fixture(autouse=True)
def _acting_in_default() -> Iterator[None]:
    with call_scope.acting_in(DEFAULT):
        yield
