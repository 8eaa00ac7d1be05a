"""Hostile peers for the operating-limit tests: clients that never read, sockets that
never speak, and the server's memory as the kernel reports it.

Every peer targets a loopback address and is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from runstore.contract.errors import ERROR_DOMAIN


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (VmRSS from /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def descriptor_limits(pid: int) -> tuple[int, int]:
    """The soft and hard descriptor limits of process ``pid`` (from /proc)."""
    with open(f"/proc/{pid}/limits") as limits:
        for line in limits:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError(f"no descriptor limit for pid {pid}")


def grpc_message(message: Message) -> bytes:
    """A protobuf message framed as one gRPC length-prefixed message."""
    body = message.SerializeToString()
    return struct.pack(">BI", 0, len(body)) + body


@dataclass
class CallResult:
    """What a raw client learnt about one call: its status and ErrorInfo reason."""

    status: int | None = None
    reason: str = ""
    answered: bool = False
    """The server sent response headers: it has produced the response."""
    data_bytes: int = 0


def _reason(details: bytes) -> str:
    status = status_pb2.Status.FromString(details)
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            return info.reason
    return ""


@dataclass
class ZeroWindowClient:
    """One HTTP/2 connection that announces a zero stream window, so the server
    can send no response body, and keeps answering pings (a live peer, not a
    dead one a keepalive would notice)."""

    host: str
    port: int
    calls: dict[int, CallResult] = field(default_factory=dict)
    _conn: h2.connection.H2Connection = field(init=False)
    _reader: asyncio.StreamReader = field(init=False)
    _writer: asyncio.StreamWriter = field(init=False)
    _pump: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self._conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
            },
        )
        self._conn.initiate_connection()
        await self._flush()
        self._pump = asyncio.ensure_future(self._read_forever())

    def call(self, path: str, request: Message) -> int:
        """Starts a unary call; its response can never be read."""
        stream_id = self._conn.get_next_available_stream_id()
        self._conn.send_headers(
            stream_id,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", f"{self.host}:{self.port}"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        self._conn.send_data(stream_id, grpc_message(request), end_stream=True)
        self.calls[stream_id] = CallResult()
        return stream_id

    async def _flush(self) -> None:
        self._writer.write(self._conn.data_to_send())
        await self._writer.drain()

    async def _read_forever(self) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while chunk := await self._reader.read(65536):
                for event in self._conn.receive_data(chunk):
                    self._note(event)
                await self._flush()

    def _note(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived) and event.stream_id in self.calls:
            self.calls[event.stream_id].data_bytes += len(event.data)
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            if event.stream_id in self.calls:
                self.calls[event.stream_id].answered = True
            headers = dict(event.headers)
            if "grpc-status" in headers and event.stream_id in self.calls:
                result = self.calls[event.stream_id]
                result.status = int(headers["grpc-status"])
                if "grpc-status-details-bin" in headers:
                    encoded = headers["grpc-status-details-bin"]
                    result.reason = _reason(base64.b64decode(encoded + "=" * (-len(encoded) % 4)))

    async def flush(self) -> None:
        await self._flush()

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


@contextlib.asynccontextmanager
async def zero_window_clients(target: str, count: int) -> AsyncIterator[list[ZeroWindowClient]]:
    """``count`` open zero-window connections to ``target``, closed on exit."""
    host, port = target.rsplit(":", 1)
    clients = [ZeroWindowClient(host, int(port)) for _ in range(count)]
    try:
        await asyncio.gather(*(client.open() for client in clients))
        yield clients
    finally:
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)


@contextlib.contextmanager
def silent_sockets(target: str, count: int) -> Iterator[list[socket.socket]]:
    """``count`` TCP connections to ``target`` that never send a byte."""
    host, port = target.rsplit(":", 1)
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect((host, int(port)))
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()
