"""What every remote client does with a call: the channel it opens or is
given, each attempt's deadline, metadata, namespace and bearer token, retries
of transient failures and reported refusals (``runstore.client.retry``), and
failures rebuilt as runstore errors, a TLS mistake named as such
(``runstore.client.handshake``)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import grpc

from runstore.client import handshake
from runstore.client.channel import Keepalive, TLSConfig, open_channel, read_pem
from runstore.client.errors import from_rpc_error
from runstore.client.handshake import TLSHandshakeError, TLSProblem
from runstore.client.retry import (
    DEFAULT_RETRY,
    SYSTEM_CLOCK,
    RetryCallback,
    RetryClock,
    RetryPolicy,
    call_with_retry,
)
from runstore.client.tokens import clean_token
from runstore.contract.errors import RunstoreError, UnavailableError
from runstore.contract.metadata import NAMESPACE_KEY, namespace_metadata
from runstore.contract.namespaces import NAME_RULE as NAMESPACE_RULE
from runstore.contract.namespaces import is_valid_name as is_valid_namespace

T = TypeVar("T")
Req = TypeVar("Req")
Resp = TypeVar("Resp")

TokenSource: TypeAlias = str | Callable[[], str] | Callable[[], Awaitable[str]]
"""A bearer token, or a callable asked before every attempt (for tokens that rotate)."""


@dataclass(frozen=True, slots=True)
class _Connection:
    """The target and TLS settings of a channel a client opened itself."""

    target: str
    uses_tls: bool
    has_ca: bool
    cert: bytes | None
    key: bytes | None
    may_probe: bool

    @classmethod
    def of(
        cls,
        target: str | None,
        tls: TLSConfig | None,
        credentials: grpc.ChannelCredentials | None,
    ) -> _Connection | None:
        if target is None:
            return None  # a channel passed in: its credentials are unknown here
        if tls is None:
            # Raw credentials: TLS of unknown make-up, so only the status text counts.
            raw = credentials is not None
            return cls(target, raw, raw, None, None, may_probe=not raw)
        return cls(target, True, tls.ca is not None, read_pem(tls.cert), read_pem(tls.key), True)

    def diagnose(self, details: str) -> TLSProblem | None:
        return handshake.diagnose(
            details,
            self.target,
            uses_tls=self.uses_tls,
            has_ca=self.has_ca,
            cert=self.cert,
            key=self.key,
            may_probe=self.may_probe,
        )


class Client:
    """What every remote client shares: the channel, deadlines, metadata, retries.

    Not thread-safe: one client per event loop (or ``runstore.client.sync``)."""

    def __init__(
        self,
        target: str | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        tls: TLSConfig | None = None,
        token: TokenSource | None = None,
        timeout: float | None = 10.0,
        metadata: Sequence[tuple[str, str]] = (),
        namespace: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        keepalive: Keepalive | None = Keepalive(),
        options: Sequence[tuple[str, Any]] = (),
        on_retry: RetryCallback | None = None,
        clock: RetryClock = SYSTEM_CLOCK,
        tracing: bool | None = None,
        tracer_provider: Any | None = None,
    ) -> None:
        if (target is None) == (channel is None):
            raise ValueError("pass either a target or a channel")
        if tls is not None and credentials is not None:
            raise ValueError("pass tls= or credentials=, not both")
        if tls is not None and channel is not None:
            raise ValueError("tls= configures a channel this client opens; not with channel=")
        if token is not None and any(key.lower() == "authorization" for key, _ in metadata):
            raise ValueError("pass token= or an authorization metadata entry, not both")
        if namespace is not None:
            if not is_valid_namespace(namespace):
                raise ValueError(f"namespace= must match {NAMESPACE_RULE}, not {namespace!r}")
            if any(key.lower() == NAMESPACE_KEY for key, _ in metadata):
                raise ValueError(f"pass namespace= or a {NAMESPACE_KEY} metadata entry, not both")
            metadata = (*metadata, *namespace_metadata(namespace))
        self.namespace = namespace
        """The namespace every call acts in (docs/namespaces.md); None: the server decides."""
        self._connection = _Connection.of(target, tls, credentials)
        """What a failed handshake is diagnosed with (``runstore.client.handshake``)."""
        if tls is not None:
            credentials = tls.credentials()
            options = [*tls.channel_options(), *options]
        self._owns_channel = channel is None
        self.channel: grpc.aio.Channel = channel or open_channel(
            target or "",
            credentials=credentials,
            keepalive=keepalive,
            options=options,
            tracing=tracing,
            tracer_provider=tracer_provider,
        )
        self.timeout = timeout
        """Deadline of each attempt, in seconds (clipped to the retry deadline)."""
        self.metadata = tuple(metadata)
        self._token = clean_token(token) if isinstance(token, str) else token
        """A string is checked now, so a bad one fails before any call."""
        self.retry = retry
        self._on_retry = on_retry
        self._clock = clock

    async def _call_metadata(self) -> tuple[tuple[str, str], ...]:
        """The metadata of one attempt: a rotating token is asked for every time."""
        if self._token is None:
            return self.metadata
        token = self._token if isinstance(self._token, str) else self._token()
        if inspect.isawaitable(token):
            token = await token
        return (*self.metadata, ("authorization", f"Bearer {clean_token(token)}"))

    async def _call(
        self, method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp], request: Req
    ) -> Resp:
        async def attempt(seconds: float | None) -> Resp:
            metadata = await self._call_metadata()
            try:
                return await method(request, timeout=seconds, metadata=metadata or None)
            except grpc.aio.AioRpcError as error:
                raise await self._rebuilt(error) from error

        return await call_with_retry(
            attempt,
            self.retry,
            attempt_timeout=self.timeout,
            clock=self._clock,
            on_retry=self._on_retry,
        )

    async def _rebuilt(self, error: grpc.aio.AioRpcError) -> RunstoreError:
        """The runstore error for a failed call; an UNAVAILABLE that a TLS
        mistake caused becomes a ``TLSHandshakeError`` (never retried)."""
        rebuilt = from_rpc_error(error)
        if isinstance(rebuilt, UnavailableError) and self._connection is not None:
            problem = await asyncio.to_thread(self._connection.diagnose, rebuilt.message)
            if problem is not None:
                tls_error = TLSHandshakeError(problem, rebuilt.message)
                tls_error.status_code = rebuilt.status_code
                return tls_error
        return rebuilt

    async def close(self) -> None:
        """Closes the channel if this client opened it."""
        if self._owns_channel:
            await self.channel.close()

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
