"""Slot 1: every call gets a request id, from ``x-request-id`` or generated.

The id is set for the whole call (``runstore.server.call_request_id``): later
concerns, logs and every ErrorInfo (``request_id``) use it, and it goes
back to the caller in the trailing metadata ``x-request-id``.
"""

from __future__ import annotations

from typing import Any

import grpc

from runstore.server import call_request_id
from runstore.server.interceptors.handlers import Context, Handler, Steps


def _tagged(request: Any, context: Context) -> None:
    context.set_trailing_metadata(((call_request_id.METADATA_KEY, call_request_id.current()),))


_STEPS = Steps(enter=_tagged)


class RequestIds:
    def admit(self, details: grpc.HandlerCallDetails) -> None:
        call_request_id.set_current(call_request_id.from_metadata(details.invocation_metadata))

    def steps(self, method: str, handler: Handler) -> Steps:
        return _STEPS
