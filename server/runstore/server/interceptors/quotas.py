"""Slot 4b: the quotas of the namespace a call acts in (docs/namespaces.md#quotas).

Right after the namespace is decided and on the raw request, before it is
parsed, so a refusal (RESOURCE_EXHAUSTED, ``QUOTA_EXCEEDED``) costs almost
nothing. What each method counts against is ``core.quota_rules`` (declared on
the method); the state is ``core.quotas``'; this only calls them. A Watch
stream holds its place in the namespace's ``watch_streams`` while it is open
(a deleted namespace's streams are ended by the namespace concern).
"""

from __future__ import annotations

from typing import Any

from runstore.contract.errors import RunstoreError
from runstore.contract.namespaces import DEFAULT
from runstore.server.core.quota_rules import Rule, rule
from runstore.server.core.quotas import Quotas, StreamLease
from runstore.server.interceptors.handlers import Context, Handler, Refused, Steps, admits_nothing
from runstore.server.interceptors.namespaces import resolved


class QuotaEnforcement:
    """Admits each call of a namespaced method within its namespace's quotas."""

    admit = admits_nothing

    def __init__(self, quotas: Quotas) -> None:
        self._quotas = quotas

    def steps(self, method: str, handler: Handler) -> Steps | None:
        counted = rule(method)
        if counted is None:
            return None
        if handler.response_streaming:
            return self._stream_steps()
        return self._unary_steps(counted)

    def _unary_steps(self, rule: Rule) -> Steps:
        quotas = self._quotas

        def enter(request: Any, context: Context) -> tuple[str, int]:
            namespace = resolved() or DEFAULT
            size = len(request) if isinstance(request, bytes) else _size(request)
            refusal = quotas.admit(rule, namespace, size)
            if refusal is not None:
                raise Refused(refusal)
            return namespace, size

        if not rule.adds_data:
            return Steps(enter=enter)

        def after(state: tuple[str, int], response: Any, context: Context) -> Any:
            quotas.committed(*state)
            return response

        return Steps(enter=enter, after=after)

    def _stream_steps(self) -> Steps:
        quotas = self._quotas

        def enter(request: Any, context: Context) -> StreamLease:
            lease = quotas.open_stream(resolved() or DEFAULT)
            if isinstance(lease, RunstoreError):
                raise Refused(lease)
            return lease

        def close(lease: StreamLease, *_: Any) -> None:
            lease.close()

        return Steps(enter=enter, after=close, fail=close)


def _size(request: Any) -> int:
    """A parsed request's encoded size (the chain hands this slot raw bytes)."""
    byte_size = getattr(request, "ByteSize", None)
    return int(byte_size()) if byte_size is not None else 0
