"""The store core's tests call it directly, as the interceptor chain would
inside a call: each acts in ``default`` unless it names another namespace
(``call_scope``; outside any, database work raises)."""

import pytest


@pytest.fixture(autouse=True)
def _acting_in_default(acting_in_default: None) -> None:
    """Every test here: ``tests/conftest.py``'s ``acting_in_default``."""
