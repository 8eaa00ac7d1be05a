"""Every response's initial metadata names the server's version
(``x-runstore-version``), on every service and method the chain serves: success
or error, unary or streamed (docs/observability.md#the-servers-version).

The entry is one constant tuple made at import. grpc.aio sends initial metadata
it is given at once (it has no way to attach it to the response's own send), so
this is one more batch per call, sent before any concern may refuse the call.
"""

from __future__ import annotations

from typing import Any, Final

from runstore.contract.metadata import VERSION_KEY
from runstore.server.interceptors.handlers import Context, Handler, Steps, admits_nothing
from runstore.server.version import __version__

VERSION_METADATA: Final = ((VERSION_KEY, __version__),)


async def _announce(request: Any, context: Context) -> None:
    await context.send_initial_metadata(VERSION_METADATA)


_STEPS: Final = Steps(enter=_announce)


class ServerVersion:
    admit = admits_nothing

    def steps(self, method: str, handler: Handler) -> Steps:
        return _STEPS
