"""A budget of response bytes held for callers that do not read them.

A client that stops reading (a zero HTTP/2 window) leaves each response it asked
for parked in the server until its call ends, which may be never. gRPC's own
knobs do not help: ``grpc.max_concurrent_streams`` only makes clients queue and
``maximum_concurrent_rpcs`` refuses without an ErrorInfo. So runstore counts
the bytes itself: a unary response is charged from the moment it is produced
until its call is done (delivered, cancelled or broken). A response larger than
``SMALL_RESPONSE_BYTES`` that would take the total past
``max_response_bytes_in_flight`` is dropped and the call fails
``RESOURCE_EXHAUSTED`` with reason ``OVERLOADED`` (retryable after a backoff).
Small responses are charged but never refused, so while slow readers hold the
budget every ordinary call (status loads, appends, small pages) is served.

The response is serialised here, once, so what is charged is its exact size on
the wire and the message object is freed at once (a parked response then costs
about twice its size, not three times): from this slot outward a unary
response is its serialised bytes. Health checks are exempt, and streaming calls
are not limited here (a streamed message is held only while it is written, and
long-lived streams must not be refused for a budget meant for parked pages).
"""

from __future__ import annotations

from typing import Any, cast

from runstore.contract.errors import OverloadedError
from runstore.server.interceptors.handlers import Context, Handler, Refused, Steps, admits_nothing

SMALL_RESPONSE_BYTES = 64 * 1024
"""Responses this small are never refused for the byte budget."""

EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)
"""Methods no limit applies to: health must answer while the server is loaded."""


class ResponseBytesBudget:
    """Bytes of responses produced and not yet delivered, against a budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.in_flight = 0

    def try_charge(self, size: int) -> bool:
        """Charges ``size`` bytes unless that would pass the budget; small
        responses are always charged."""
        if size > SMALL_RESPONSE_BYTES and self.in_flight + size > self.budget:
            return False
        self.in_flight += size
        return True

    def release(self, size: int) -> None:
        self.in_flight -= size


class Limits:
    """Refuses a large unary response while the response-bytes budget is held."""

    admit = admits_nothing

    def __init__(self, max_response_bytes_in_flight: int) -> None:
        self.budget = ResponseBytesBudget(max_response_bytes_in_flight)

    def steps(self, method: str, handler: Handler) -> Steps | None:
        if handler.unary_unary is None or method.startswith(EXEMPT_PREFIXES):
            return None
        serialize = handler.response_serializer or _already_serialized
        budget = self.budget

        def limited(state: None, produced: Any, context: Context) -> bytes:
            response = serialize(produced)
            del produced  # the message is freed as soon as the chain lets it go
            size = len(response)
            if not budget.try_charge(size):
                del response
                raise Refused(_overloaded(budget))

            def release(_: object) -> None:
                budget.release(size)

            context.add_done_callback(cast(Any, release))
            return response

        return Steps(after=limited, replace={"response_serializer": _already_serialized})


def _already_serialized(raw: bytes) -> bytes:
    return raw


def _overloaded(budget: ResponseBytesBudget) -> OverloadedError:
    return OverloadedError(
        "runstore is overloaded: too many response bytes wait for clients that do not "
        "read them; retry after a backoff",
        details={"limit": "max_response_bytes_in_flight", "budget_bytes": str(budget.budget)},
    )
