"""Typed helpers for the memory and context stores, against a real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from runstore.client import (
    ContextMessage,
    ContextSnapshot,
    ContextVersionConflictError,
    IdempotencyConflictError,
    ImageURLPart,
    RemoteContextStore,
    RemoteMemoryStore,
    RetryPolicy,
    memory,
)
from runstore.client.transcript import (
    CacheCheckpointPart,
    Citation,
    CitationLocation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    decode_json,
)
from runstore.server.app import create_stores, open_database
from runstore.server.config import ServerConfig
from runstore.server.interceptors.handlers import Chain
from runstore.server.interceptors.namespaces import NamespaceResolution
from runstore.server.servicers.memory_store import MemoryStoreServicer
from runstore.v1 import memory_store_pb2_grpc
from tests.support import Store, unique

FAST = RetryPolicy(initial=0.001, maximum=0.002, deadline=10.0)
AT = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
async def contexts(store: Store) -> AsyncIterator[RemoteContextStore]:
    async with RemoteContextStore(store.target, retry=FAST) as client:
        yield client


@pytest.fixture
async def memories(store: Store) -> AsyncIterator[RemoteMemoryStore]:
    async with RemoteMemoryStore(store.target, retry=FAST) as client:
        yield client


def every_kind() -> ContextSnapshot:
    """A snapshot with every message type and block kind."""
    return ContextSnapshot(
        system_prompt="You are concise.",
        summary="The user asked about nvim.",
        messages=(
            ContextMessage("system", (TextPart("house rules"),)),
            ContextMessage(
                "user",
                (
                    TextPart("What is in these?"),
                    ImagePart(format="png", bytes=b"\x89PNG\x00\xff\x00binary"),
                    ImageURLPart(format="jpeg", url="https://example.test/cat.jpg"),
                    DocumentPart(name="spec", format="pdf", bytes=b"%PDF-\x00\x01"),
                    DocumentPart(name="notes", format="txt", text="plain text"),
                    DocumentPart(name="parts", format="md", chunks=("one", "two")),
                    DocumentPart(name="remote", format="html", uri="s3://bucket/doc", cite=True),
                ),
            ),
            ContextMessage(
                "assistant",
                (
                    ThinkingPart(
                        text="let me look", signature="sig-Äé==", redacted=b"", index=0, final=True
                    ),
                    ThinkingPart(redacted=b"\x00\x01\x02opaque", index=1),
                    CitationsPart(
                        text="cited",
                        citations=(
                            Citation(
                                title="Spec",
                                source="spec.pdf",
                                location=CitationLocation("document_page", 0, 2, 3),
                                source_content=("quote",),
                            ),
                            Citation(title="No location"),
                        ),
                    ),
                    ToolUsePart(
                        id="call-1",
                        name="tools.search",
                        input=decode_json(b'{"q":"nvim","n":12345678901234567890,"x":1.10}'),  # type: ignore[arg-type]
                        thought_signature="ts-1",
                    ),
                    CacheCheckpointPart(),
                ),
                meta=decode_json(b'{"model":"m-1","usage":{"tokens":42}}'),  # type: ignore[arg-type]
            ),
            ContextMessage(
                "user",
                (
                    ToolResultPart(
                        tool_use_id="call-1",
                        content=decode_json(b'[{"hit":"nvim","score":0.9}]'),
                        is_error=False,
                    ),
                ),
            ),
        ),
    )


async def test_every_message_and_block_kind_round_trips_exactly(
    contexts: RemoteContextStore,
) -> None:
    key = unique("ctx")
    snapshot = every_kind()
    assert await contexts.save_context(key, snapshot, expected_version=0) == 1
    loaded = await contexts.get_context(key)
    assert loaded.snapshot == snapshot
    assert loaded.version == loaded.current_version == 1
    image = loaded.snapshot.messages[1].parts[1]
    assert isinstance(image, ImagePart) and image.bytes == b"\x89PNG\x00\xff\x00binary"
    thinking = loaded.snapshot.messages[2].parts[0]
    assert isinstance(thinking, ThinkingPart) and thinking.signature == "sig-Äé=="
    tool_use = loaded.snapshot.messages[2].parts[3]
    assert isinstance(tool_use, ToolUsePart)
    assert tool_use.input["n"] == 12345678901234567890


async def test_plain_transcript_messages_are_accepted(contexts: RemoteContextStore) -> None:
    key = unique("ctx")
    outcome = await contexts.append_transcript(
        key, [Message(role="user", parts=(TextPart("Hello"),))]
    )
    assert (outcome.first_position, outcome.count, outcome.inserted) == (0, 1, True)
    messages, cursor = await contexts.list_transcript(key)
    assert messages == (ContextMessage("user", (TextPart("Hello"),)),) and cursor == ""


async def test_context_continuation_with_a_stale_saver(contexts: RemoteContextStore) -> None:
    """§12.1: runs continue from the stored context; two runs saving from the
    same version produce one successor and one stale writer who reloads."""
    key = unique("conversation")
    assert await contexts.load_context(key) is None
    first = ContextSnapshot(
        system_prompt="You are a concise assistant.",
        messages=(
            ContextMessage("user", (TextPart("What is nvim?"),)),
            ContextMessage("assistant", (TextPart("A Vim-based editor."),)),
        ),
    )
    assert await contexts.save_context(key, first, expected_version=0) == 1

    state = await contexts.load_context(key)
    assert state is not None and state.version == 1

    def successor(base: ContextSnapshot, question: str) -> ContextSnapshot:
        return ContextSnapshot(
            system_prompt=base.system_prompt,
            messages=(*base.messages, ContextMessage("user", (TextPart(question),))),
        )

    a = successor(state.snapshot, "How does it differ from vim?")
    b = successor(state.snapshot, "Is it fast?")
    outcomes = await asyncio.gather(
        contexts.save_context(key, a, expected_version=state.version),
        contexts.save_context(key, b, expected_version=state.version),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if isinstance(o, int)]
    losers = [o for o in outcomes if isinstance(o, ContextVersionConflictError)]
    assert winners == [2] and len(losers) == 1
    assert losers[0].current_version == 2 and losers[0].permanent

    latest = await contexts.get_context(key)
    merged = successor(
        latest.snapshot, "Is it fast?" if latest.snapshot == a else "How does it differ from vim?"
    )
    assert await contexts.save_context(key, merged, expected_version=latest.version) == 3
    final = (await contexts.get_context(key)).snapshot
    texts = [part.text for m in final.messages for part in m.parts if isinstance(part, TextPart)]
    assert texts[:2] == ["What is nvim?", "A Vim-based editor."]
    assert set(texts[2:]) == {"How does it differ from vim?", "Is it fast?"}
    assert (await contexts.get_context(key, version=1)).snapshot == first


async def test_memory_events_round_trip_through_the_typed_helpers(
    memories: RemoteMemoryStore,
) -> None:
    agent, run = "agent-a", unique("mem")
    events = [
        memory.user_message("hi", timestamp=AT),
        memory.assistant_message(structured={"answer": 42}, timestamp=AT),
        memory.tool_call(
            "c1", "search", payload='{"q":"x"}', expected_children_total=2, timestamp=AT
        ),
        memory.tool_result(
            "c1", "search", result_json="[1]", duration_ns=1_500_000, bounds={"n": 1}, timestamp=AT
        ),
        memory.planner_note("plan", timestamp=AT, labels={"k": "v"}),
        memory.thinking(text="hmm", signature="s", content_index=0, final=True, timestamp=AT),
    ]
    outcome = await memories.append_events(agent, run, events)
    assert (outcome.first_position, outcome.count, outcome.inserted) == (0, 6, True)
    snapshot = await memories.load_run(agent, run)
    assert snapshot.events == tuple(events)
    assert snapshot.meta["event_count"] == "6"
    assert snapshot.events[2].decoded() == {
        "tool_call_id": "c1",
        "tool_name": "search",
        "payload": '{"q":"x"}',
        "expected_children_total": 2,
    }
    assert snapshot.events[5].decoded() == {
        "text": "hmm",
        "signature": "s",
        "content_index": 0,
        "final": True,
    }
    assert (await memories.load_run("other-agent", run)).events == ()


async def test_an_explicit_idempotency_key_replays_or_conflicts(
    memories: RemoteMemoryStore,
) -> None:
    agent, run = "agent-a", unique("mem")
    note = [memory.planner_note("once", timestamp=AT)]
    first = await memories.append_events(agent, run, note, idempotency_key="step-1")
    again = await memories.append_events(agent, run, note, idempotency_key="step-1")
    assert (again.first_position, again.count, again.inserted) == (0, 1, False)
    assert first.inserted
    with pytest.raises(IdempotencyConflictError):
        await memories.append_events(
            agent, run, [memory.planner_note("other", timestamp=AT)], idempotency_key="step-1"
        )
    assert len((await memories.load_run(agent, run)).events) == 1


class LosingReplies(MemoryStoreServicer):
    """Runs AppendEvents, then loses the reply ``lose`` times."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.lose = 0
        self.calls = 0

    async def AppendEvents(self, request: Any, context: Any) -> Any:
        self.calls += 1
        response = await super().AppendEvents(request, context)
        if self.lose:
            self.lose -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "reply lost")
        return response


async def test_a_lost_reply_never_appends_twice(tmp_path: Path) -> None:
    """The key made once per call is resent on every retry (D5)."""
    config = ServerConfig(listen="127.0.0.1:0", database_url=f"sqlite:///{tmp_path / 'm.db'}")
    async with open_database(config) as db:
        servicer = LosingReplies(create_stores(config, db).memory)
        # Only the concern that names each call's namespace (here: default).
        server = grpc.aio.server(
            interceptors=[Chain([NamespaceResolution(None, authenticated=False)])]
        )
        memory_store_pb2_grpc.add_MemoryStoreServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with RemoteMemoryStore(f"127.0.0.1:{port}", retry=FAST) as client:
                servicer.lose = 2
                outcome = await client.append_events(
                    "a", "r", [memory.planner_note("only once", timestamp=AT)]
                )
                assert servicer.calls == 3
                assert (outcome.first_position, outcome.count, outcome.inserted) == (0, 1, False)
                assert len((await client.load_run("a", "r")).events) == 1
        finally:
            await server.stop(None)
