"""ContextStore: the versioned conversation context and its transcript (§12.1, D5).

A snapshot per key replaced only by a save naming the current version; the last
N versions stay readable; an append-only transcript per key. Everything goes
through ``store.context`` with fresh keys, so the suite runs on every backend.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import pytest

from runstore.v1 import context_store_pb2 as ctx
from tests.support import Failure, Store, fails, fails_with, failure_of, unique

NOT_FOUND = grpc.StatusCode.NOT_FOUND
INVALID = grpc.StatusCode.INVALID_ARGUMENT
CONFLICT = grpc.StatusCode.ALREADY_EXISTS
ABORTED = grpc.StatusCode.ABORTED

VALIDATION = "CONTRACT_VALIDATION"
READ_ARGUMENT = "INVALID_ARGUMENT_READ"
CONTEXT_NOT_FOUND = "CONTEXT_NOT_FOUND"
VERSION_NOT_FOUND = "CONTEXT_VERSION_NOT_FOUND"
VERSION_CONFLICT = "CONTEXT_VERSION_CONFLICT"
IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"

VERSIONS_KEPT = 10
"""The test server's ``context_versions_kept`` (the default)."""

SERVER_MAX_PAGE = 1000
"""The test server's ListTranscript page cap (proto: "default 1000")."""

N = 8


# --- Builders ----------------------------------------------------------------------


def text(value: str) -> ctx.ContentBlock:
    return ctx.ContentBlock(type="text", text=ctx.TextBlock(text=value))


def user(value: str) -> ctx.ContextMessage:
    return ctx.ContextMessage(type="user", content=[text(value)])


def assistant(value: str, meta: bytes = b"") -> ctx.ContextMessage:
    return ctx.ContextMessage(type="assistant", content=[text(value)], meta=meta)


def snapshot(
    *messages: ctx.ContextMessage, system: str = "You are concise.", summary: str = ""
) -> ctx.ContextSnapshot:
    return ctx.ContextSnapshot(system_prompt=system, summary=summary, messages=list(messages))


def wire(message: Any) -> bytes:
    serialised: bytes = message.SerializeToString(deterministic=True)
    return serialised


# --- Calls ---------------------------------------------------------------------------


async def save(store: Store, key: str, snap: ctx.ContextSnapshot, expected_version: int) -> int:
    response = await store.context.SaveContext(
        ctx.SaveContextRequest(key=key, snapshot=snap, expected_version=expected_version)
    )
    version: int = response.version
    return version


async def get(store: Store, key: str, version: int = 0) -> ctx.GetContextResponse:
    response: ctx.GetContextResponse = await store.context.GetContext(
        ctx.GetContextRequest(key=key, version=version)
    )
    return response


async def append(
    store: Store, key: str, messages: Sequence[ctx.ContextMessage], idempotency_key: str = ""
) -> ctx.AppendTranscriptResponse:
    response: ctx.AppendTranscriptResponse = await store.context.AppendTranscript(
        ctx.AppendTranscriptRequest(
            key=key, messages=list(messages), idempotency_key=idempotency_key
        )
    )
    return response


async def page(
    store: Store, key: str, cursor: str = "", limit: int = 0
) -> ctx.ListTranscriptResponse:
    response: ctx.ListTranscriptResponse = await store.context.ListTranscript(
        ctx.ListTranscriptRequest(key=key, cursor=cursor, limit=limit)
    )
    return response


async def transcript(store: Store, key: str, limit: int = 0) -> list[ctx.ContextMessage]:
    """The whole transcript, following next_cursor to the end."""
    messages: list[ctx.ContextMessage] = []
    cursor = ""
    while True:
        response = await page(store, key, cursor, limit)
        messages.extend(response.messages)
        if not response.next_cursor:
            return messages
        cursor = response.next_cursor


async def saved(store: Store, key: str) -> list[tuple[int, bytes, int]]:
    """Every readable version of ``key`` as (version, snapshot bytes, saved_at ns)."""
    try:
        current = (await get(store, key)).current_version
    except grpc.aio.AioRpcError as err:
        if err.code() is NOT_FOUND:
            return []
        raise
    kept = []
    for version in range(1, current + 1):
        try:
            response = await get(store, key, version)
        except grpc.aio.AioRpcError as err:
            if err.code() is NOT_FOUND:
                continue
            raise
        kept.append((response.version, wire(response.snapshot), response.saved_at.ToNanoseconds()))
    return kept


async def state(store: Store, key: str) -> tuple[list[tuple[int, bytes, int]], list[bytes]]:
    """Everything a failed call must leave untouched: kept versions and transcript."""
    return await saved(store, key), [wire(m) for m in await transcript(store, key)]


def texts(messages: Sequence[ctx.ContextMessage]) -> list[str]:
    return [block.text.text for message in messages for block in message.content]


async def saving(
    store: Store, key: str, snap: ctx.ContextSnapshot, expected_version: int
) -> int | Failure:
    """The new version, or the failure (for tallying racing saves)."""
    try:
        return await save(store, key, snap, expected_version)
    except grpc.aio.AioRpcError as err:
        return failure_of(err)


async def conflict(
    store: Store, key: str, snap: ctx.ContextSnapshot, expected_version: int, current: int
) -> Failure:
    failure = await fails_with(
        store.context.SaveContext(
            ctx.SaveContextRequest(key=key, snapshot=snap, expected_version=expected_version)
        ),
        ABORTED,
        VERSION_CONFLICT,
    )
    assert failure.metadata["current_version"] == str(current), failure
    assert failure.metadata["permanent"] == "true", failure
    return failure


# --- GetContext / SaveContext --------------------------------------------------------


async def test_get_context_of_an_unknown_key_is_context_not_found(store: Store) -> None:
    """proto GetContext: an unknown key is NOT_FOUND (CONTEXT_NOT_FOUND), whatever
    version is asked for."""
    key = unique("ctx")
    for version in (0, 1, 7):
        failure = await fails_with(get(store, key, version), NOT_FOUND, CONTEXT_NOT_FOUND)
        assert failure.metadata["permanent"] == "true"


async def test_save_with_expected_version_zero_creates_version_one(store: Store) -> None:
    """proto SaveContext: 0 creates; GetContext returns exactly what was saved."""
    key = unique("ctx")
    snap = snapshot(user("What is nvim?"), assistant("A text editor."))
    before = time.time_ns()
    assert await save(store, key, snap, 0) == 1
    after = time.time_ns()

    response = await get(store, key)
    assert (response.key, response.version, response.current_version) == (key, 1, 1)
    assert wire(response.snapshot) == wire(snap)
    assert before - 1_000_000_000 <= response.saved_at.ToNanoseconds() <= after + 1_000_000_000
    assert wire((await get(store, key, 1)).snapshot) == wire(snap)


async def test_save_from_the_current_version_makes_the_next(store: Store) -> None:
    """§12.1: each successful run replaces the stored state; versions go up by one."""
    key = unique("ctx")
    snaps = [snapshot(user(f"turn {i}")) for i in range(4)]
    versions = [await save(store, key, snaps[0], 0)]
    for snap in snaps[1:]:
        versions.append(await save(store, key, snap, versions[-1]))
    assert versions == [1, 2, 3, 4]
    current = await get(store, key)
    assert (current.version, current.current_version) == (4, 4)
    assert wire(current.snapshot) == wire(snaps[-1])


async def test_empty_snapshot_is_a_valid_state(store: Store) -> None:
    """A context with nothing in it yet (no prompt, no messages) can be stored."""
    key = unique("ctx")
    assert await save(store, key, ctx.ContextSnapshot(), 0) == 1
    response = await get(store, key)
    assert (response.version, wire(response.snapshot)) == (1, b"")


@pytest.mark.parametrize(
    ("expected", "note"),
    [(0, "create-again"), (1, "stale"), (2, "stale-by-one"), (4, "ahead"), (99, "far-ahead")],
)
async def test_stale_expected_version_is_aborted_with_the_current_one(
    store: Store, expected: int, note: str
) -> None:
    """§12.1, D5: an older result never overwrites a newer one: ABORTED,
    CONTEXT_VERSION_CONFLICT, metadata current_version and permanent=true; nothing
    changes (stale-by-one with a different snapshot is not a retry)."""
    key = unique("ctx")
    for version in range(3):
        await save(store, key, snapshot(user(f"v{version + 1}")), version)
    await append(store, key, [user("kept")])
    before = await state(store, key)

    await conflict(store, key, snapshot(user(f"late {note}")), expected, current=3)
    assert await state(store, key) == before


async def test_save_to_an_unknown_key_with_a_version_is_a_conflict_at_zero(
    store: Store,
) -> None:
    """A key that was never saved is at version 0; naming another version is stale
    and creates nothing."""
    key = unique("ctx")
    await conflict(store, key, snapshot(user("x")), 1, current=0)
    await fails_with(get(store, key), NOT_FOUND, CONTEXT_NOT_FOUND)
    assert await save(store, key, snapshot(user("x")), 0) == 1


async def test_retrying_a_save_that_succeeded_returns_the_same_version(store: Store) -> None:
    """proto SaveContext: a retry (same snapshot, same expected_version) after a lost
    reply returns the same version and makes no new one."""
    key = unique("ctx")
    first = snapshot(user("one"))
    assert await save(store, key, first, 0) == 1
    assert await save(store, key, first, 0) == 1
    second = snapshot(user("one"), assistant("two"))
    assert await save(store, key, second, 1) == 2
    before = await state(store, key)

    assert await save(store, key, second, 1) == 2
    assert await state(store, key) == before
    current = await get(store, key)
    assert (current.version, current.current_version) == (2, 2)
    failure = await fails_with(get(store, key, 3), NOT_FOUND, VERSION_NOT_FOUND)
    assert failure.metadata["current_version"] == "2"


async def test_save_then_successor_never_rolls_back(store: Store) -> None:
    """An exact retry of an older save after a newer one landed cannot roll back:
    the state stays at the newer version."""
    key = unique("ctx")
    first, second, third = (snapshot(user(name)) for name in ("a", "b", "c"))
    await save(store, key, first, 0)
    await save(store, key, second, 1)
    await save(store, key, third, 2)
    await conflict(store, key, second, 1, current=3)
    current = await get(store, key)
    assert (current.version, wire(current.snapshot)) == (3, wire(third))


async def test_only_the_last_n_versions_stay_readable(store: Store) -> None:
    """proto: the last N versions stay readable (test server: 10); older ones are
    NOT_FOUND (CONTEXT_VERSION_NOT_FOUND) with current_version; kept ones return
    their original content and saved_at."""
    key = unique("ctx")
    total = VERSIONS_KEPT + 2
    snaps = [snapshot(user(f"state {i}"), system=f"prompt {i}") for i in range(1, total + 1)]
    first_saved_at = None
    for version, snap in enumerate(snaps, start=1):
        assert await save(store, key, snap, version - 1) == version
        if version == 3:
            first_saved_at = (await get(store, key, 3)).saved_at.ToNanoseconds()

    for pruned in range(1, total - VERSIONS_KEPT + 1):
        failure = await fails_with(get(store, key, pruned), NOT_FOUND, VERSION_NOT_FOUND)
        assert failure.metadata["current_version"] == str(total)
        assert failure.metadata["permanent"] == "true"
    for version in range(total - VERSIONS_KEPT + 1, total + 1):
        response = await get(store, key, version)
        assert (response.key, response.version, response.current_version) == (
            key,
            version,
            total,
        )
        assert wire(response.snapshot) == wire(snaps[version - 1])
    assert (await get(store, key, 3)).saved_at.ToNanoseconds() == first_saved_at
    assert [v for v, _, _ in await saved(store, key)] == list(
        range(total - VERSIONS_KEPT + 1, total + 1)
    )


async def test_version_newer_than_the_current_is_not_found(store: Store) -> None:
    key = unique("ctx")
    await save(store, key, snapshot(user("a")), 0)
    failure = await fails_with(get(store, key, 2), NOT_FOUND, VERSION_NOT_FOUND)
    assert failure.metadata["current_version"] == "1"


async def test_negative_version_is_invalid(store: Store) -> None:
    key = unique("ctx")
    await save(store, key, snapshot(user("a")), 0)
    failure = await fails(get(store, key, -1))
    assert failure.code is INVALID
    assert failure.metadata["field"] == "version"
    before = await state(store, key)
    failure = await fails(save(store, key, snapshot(user("b")), -1))
    assert failure.code is INVALID
    assert failure.metadata["field"] == "expected_version"
    assert await state(store, key) == before


async def test_every_call_requires_a_key(store: Store) -> None:
    calls = [
        store.context.GetContext(ctx.GetContextRequest(key="")),
        store.context.SaveContext(ctx.SaveContextRequest(key="", snapshot=snapshot())),
        store.context.DeleteContext(ctx.DeleteContextRequest(key="")),
        store.context.AppendTranscript(ctx.AppendTranscriptRequest(key="", messages=[user("a")])),
        store.context.ListTranscript(ctx.ListTranscriptRequest(key="")),
    ]
    for call in calls:
        failure = await fails_with(call, INVALID, VALIDATION)
        assert failure.metadata["field"] == "key"


# --- DeleteContext -------------------------------------------------------------------


async def test_delete_removes_snapshots_and_transcript(store: Store) -> None:
    """proto DeleteContext: the key's snapshots and transcript are gone; deleted is
    false the second time; the key starts again from version 0 and position 0."""
    key = unique("ctx")
    for version in range(3):
        await save(store, key, snapshot(user(f"old {version}")), version)
    await append(store, key, [user("t0"), user("t1")], idempotency_key="batch-1")

    assert (await store.context.DeleteContext(ctx.DeleteContextRequest(key=key))).deleted
    for version in (0, 1, 3):
        await fails_with(get(store, key, version), NOT_FOUND, CONTEXT_NOT_FOUND)
    assert await transcript(store, key) == []
    assert not (await store.context.DeleteContext(ctx.DeleteContextRequest(key=key))).deleted

    await conflict(store, key, snapshot(user("stale")), 3, current=0)
    fresh = snapshot(user("new life"))
    assert await save(store, key, fresh, 0) == 1
    response = await get(store, key, 1)
    assert (response.current_version, wire(response.snapshot)) == (1, wire(fresh))
    await fails_with(get(store, key, 2), NOT_FOUND, VERSION_NOT_FOUND)

    again = await append(store, key, [user("n0")], idempotency_key="batch-1")
    assert (again.first_position, again.count, again.inserted) == (0, 1, True)
    assert texts(await transcript(store, key)) == ["n0"]


async def test_delete_of_an_unknown_key_is_false(store: Store) -> None:
    key = unique("ctx")
    assert not (await store.context.DeleteContext(ctx.DeleteContextRequest(key=key))).deleted


async def test_delete_of_a_key_with_only_a_transcript(store: Store) -> None:
    key = unique("ctx")
    await append(store, key, [user("only")])
    assert (await store.context.DeleteContext(ctx.DeleteContextRequest(key=key))).deleted
    assert await transcript(store, key) == []


async def test_delete_leaves_other_keys_alone(store: Store) -> None:
    key, other = unique("ctx"), unique("ctx")
    for k in (key, other):
        await save(store, k, snapshot(user(k)), 0)
        await append(store, k, [user(k)])
    before = await state(store, other)
    await store.context.DeleteContext(ctx.DeleteContextRequest(key=key))
    assert await state(store, other) == before


# --- Transcript ----------------------------------------------------------------------


async def test_transcript_of_an_unknown_key_is_an_empty_page(store: Store) -> None:
    response = await page(store, unique("ctx"))
    assert (list(response.messages), response.next_cursor) == ([], "")


async def test_transcript_appends_keep_order_and_report_positions(store: Store) -> None:
    key = unique("ctx")
    first = await append(store, key, [user("q1"), assistant("a1"), user("q2")])
    assert (first.first_position, first.count, first.inserted) == (0, 3, True)
    second = await append(store, key, [assistant("a2"), user("q3")])
    assert (second.first_position, second.count, second.inserted) == (3, 2, True)
    messages = await transcript(store, key)
    assert texts(messages) == ["q1", "a1", "q2", "a2", "q3"]
    assert [m.type for m in messages] == ["user", "assistant", "user", "assistant", "user"]


async def test_zero_message_transcript_append_is_a_no_op(store: Store) -> None:
    key = unique("ctx")
    await append(store, key, [user("a")])
    before = await state(store, key)
    result = await append(store, key, [])
    assert result.count == 0
    assert await state(store, key) == before


async def test_transcript_is_independent_of_the_snapshot(store: Store) -> None:
    """The transcript keeps history beside the snapshot: appending never creates or
    bumps a version, and saving never touches the transcript."""
    key = unique("ctx")
    await append(store, key, [user("before any save")])
    await fails_with(get(store, key), NOT_FOUND, CONTEXT_NOT_FOUND)
    assert await save(store, key, snapshot(user("s1")), 0) == 1
    await append(store, key, [user("after save")])
    assert (await get(store, key)).current_version == 1
    assert await save(store, key, snapshot(user("s2")), 1) == 2
    assert texts(await transcript(store, key)) == ["before any save", "after save"]


async def test_transcript_pages_chain_to_every_message_once(store: Store) -> None:
    key = unique("ctx")
    sent = [user(f"m{i}") for i in range(7)]
    await append(store, key, sent)
    sizes = []
    collected: list[ctx.ContextMessage] = []
    cursor = ""
    while True:
        response = await page(store, key, cursor, limit=3)
        sizes.append(len(response.messages))
        collected.extend(response.messages)
        if not response.next_cursor:
            break
        cursor = response.next_cursor
    assert sizes == [3, 3, 1]
    assert [wire(m) for m in collected] == [wire(m) for m in sent]


async def test_transcript_limit_zero_means_the_server_maximum_page(store: Store) -> None:
    key = unique("ctx")
    sent = [user(f"m{i}") for i in range(SERVER_MAX_PAGE + 1)]
    result = await append(store, key, sent)
    assert result.count == SERVER_MAX_PAGE + 1
    for limit in (0, SERVER_MAX_PAGE * 2):
        first = await page(store, key, limit=limit)
        assert len(first.messages) == SERVER_MAX_PAGE, limit
        assert first.next_cursor
        rest = await page(store, key, first.next_cursor, limit=limit)
        assert (texts(rest.messages), rest.next_cursor) == ([f"m{SERVER_MAX_PAGE}"], "")


async def test_transcript_negative_limit_is_invalid_argument(store: Store) -> None:
    """§11.3 / D3 / Q12: read argument errors are INVALID_ARGUMENT_READ, permanent."""
    key = unique("ctx")
    await append(store, key, [user("a")])
    failure = await fails_with(
        store.context.ListTranscript(ctx.ListTranscriptRequest(key=key, limit=-1)),
        INVALID,
        READ_ARGUMENT,
    )
    assert failure.metadata["field"] == "limit"
    assert failure.metadata["permanent"] == "true"


@pytest.mark.parametrize("cursor", ["x", "-1", "+1", "0"])
async def test_transcript_cursor_must_be_positive_ascii_digits(store: Store, cursor: str) -> None:
    key = unique("ctx")
    await append(store, key, [user("a"), user("b")])
    failure = await fails_with(
        store.context.ListTranscript(ctx.ListTranscriptRequest(key=key, cursor=cursor)),
        INVALID,
        READ_ARGUMENT,
        "invalid cursor",
    )
    assert failure.metadata["field"] == "cursor"


async def test_transcript_retry_with_same_key_appends_nothing(store: Store) -> None:
    """D5 (as for memory): same key + same messages returns the original position
    and count with inserted=false, even after later appends."""
    key = unique("ctx")
    await append(store, key, [user("pad")])
    batch = [user("q"), assistant("a")]
    first = await append(store, key, batch, idempotency_key="turn-1")
    assert (first.first_position, first.count, first.inserted) == (1, 2, True)
    await append(store, key, [user("later")])
    before = await state(store, key)
    retry = await append(store, key, batch, idempotency_key="turn-1")
    assert (retry.first_position, retry.count, retry.inserted) == (1, 2, False)
    assert await state(store, key) == before


@pytest.mark.parametrize(
    "changed",
    [
        [user("q"), assistant("different")],
        [user("q")],
        [user("q"), assistant("a"), user("more")],
        [user("q"), assistant("a", meta=b'{"id":"r1"}')],
    ],
    ids=["other-text", "fewer", "more", "other-meta"],
)
async def test_transcript_same_key_different_messages_is_a_conflict(
    store: Store, changed: list[ctx.ContextMessage]
) -> None:
    key = unique("ctx")
    await append(store, key, [user("q"), assistant("a")], idempotency_key="turn-1")
    before = await state(store, key)
    failure = await fails_with(
        append(store, key, changed, idempotency_key="turn-1"), CONFLICT, IDEMPOTENCY_CONFLICT
    )
    assert failure.metadata["permanent"] == "true"
    assert await state(store, key) == before


async def test_transcript_idempotency_keys_belong_to_their_context_key(store: Store) -> None:
    first, second = unique("ctx"), unique("ctx")
    await append(store, first, [user("pad")])
    a = await append(store, first, [user("x")], idempotency_key="same")
    b = await append(store, second, [user("x")], idempotency_key="same")
    assert (a.first_position, a.inserted, b.first_position, b.inserted) == (1, True, 0, True)
    assert texts(await transcript(store, second)) == ["x"]


# --- Shape validation ----------------------------------------------------------------


def valid_assistant() -> ctx.ContextMessage:
    """A message every check accepts; each bad case breaks exactly one thing."""
    return ctx.ContextMessage(
        type="assistant",
        content=[
            text("calling a tool"),
            ctx.ContentBlock(
                type="tool_use",
                tool_use=ctx.ToolUseBlock(id="call-1", name="search", input=b'{"q":"x"}'),
            ),
        ],
        meta=b'{"id":"resp-1"}',
    )


Mutation = Callable[[ctx.ContextMessage], None]


def _msg(**fields: Any) -> Mutation:
    def mutate(message: ctx.ContextMessage) -> None:
        for name, value in fields.items():
            setattr(message, name, value)

    return mutate


def _block(block: ctx.ContentBlock) -> Mutation:
    def mutate(message: ctx.ContextMessage) -> None:
        message.content[1].CopyFrom(block)

    return mutate


def _tag(tag: str) -> Mutation:
    def mutate(message: ctx.ContextMessage) -> None:
        message.content[0].type = tag

    return mutate


def _image(**fields: Any) -> ctx.ContentBlock:
    return ctx.ContentBlock(type="image", image=ctx.ImageBlock(**fields))


def _document(**fields: Any) -> ctx.ContentBlock:
    return ctx.ContentBlock(type="document", document=ctx.DocumentBlock(name="doc", **fields))


def _tool_use(**fields: Any) -> ctx.ContentBlock:
    values = {"id": "call-1", "name": "search", "input": b"{}"} | fields
    return ctx.ContentBlock(type="tool_use", tool_use=ctx.ToolUseBlock(**values))


def _tool_result(**fields: Any) -> ctx.ContentBlock:
    values = {"tool_use_id": "call-1", "content": b'"ok"'} | fields
    return ctx.ContentBlock(type="tool_result", tool_result=ctx.ToolResultBlock(**values))


def _citation_kind(kind: str) -> ctx.ContentBlock:
    return ctx.ContentBlock(
        type="citations",
        citations=ctx.CitationsBlock(
            text="cited",
            citations=[
                ctx.Citation(title="ok"),
                ctx.Citation(title="bad", location=ctx.CitationLocation(kind=kind, start=1)),
            ],
        ),
    )


# (case id, mutation, field suffix after "<prefix>[1]")
BAD_MESSAGES: list[tuple[str, Mutation, str]] = [
    ("message-type-tool", _msg(type="tool"), ".type"),
    ("message-type-empty", _msg(type=""), ".type"),
    ("message-type-case", _msg(type="User"), ".type"),
    ("block-tag-other-kind", _tag("image"), ".content[0].type"),
    ("block-tag-unknown", _tag("video"), ".content[0].type"),
    ("block-tag-empty", _tag(""), ".content[0].type"),
    ("block-without-value", _block(ctx.ContentBlock(type="text")), ".content[1]"),
    ("image-format-bmp", _block(_image(format="bmp", data=b"\x00")), ".content[1].image.format"),
    ("image-format-empty", _block(_image(url="https://x/y.png")), ".content[1].image.format"),
    ("image-without-source", _block(_image(format="png")), ".content[1].image"),
    ("document-without-source", _block(_document()), ".content[1].document"),
    ("document-data-and-text", _block(_document(data=b"%", text="t")), ".content[1].document"),
    (
        "document-uri-and-chunks",
        _block(_document(uri="https://x", chunks=["a"])),
        ".content[1].document",
    ),
    (
        "document-all-sources",
        _block(_document(data=b"%", text="t", chunks=["a"], uri="u")),
        ".content[1].document",
    ),
    ("tool-use-without-id", _block(_tool_use(id="")), ".content[1].tool_use"),
    ("tool-use-without-name", _block(_tool_use(name="")), ".content[1].tool_use"),
    ("tool-use-input-array", _block(_tool_use(input=b"[1]")), ".content[1].tool_use.input"),
    ("tool-use-input-string", _block(_tool_use(input=b'"x"')), ".content[1].tool_use.input"),
    ("tool-use-input-not-json", _block(_tool_use(input=b"{q:1}")), ".content[1].tool_use.input"),
    ("tool-use-input-empty", _block(_tool_use(input=b"")), ".content[1].tool_use.input"),
    (
        "tool-result-content-not-json",
        _block(_tool_result(content=b"not json")),
        ".content[1].tool_result.content",
    ),
    (
        "tool-result-content-bad-utf8",
        _block(_tool_result(content=b'"\xff"')),
        ".content[1].tool_result.content",
    ),
    (
        "tool-result-without-tool-use-id",
        _block(_tool_result(tool_use_id="")),
        ".content[1].tool_result.tool_use_id",
    ),
    ("meta-array", _msg(meta=b"[]"), ".meta"),
    ("meta-not-json", _msg(meta=b"{oops"), ".meta"),
    ("meta-null", _msg(meta=b"null"), ".meta"),
    (
        "citation-location-kind-unknown",
        _block(_citation_kind("page")),
        ".content[1].citations.citations[1].location.kind",
    ),
    (
        "citation-location-kind-empty",
        _block(_citation_kind("")),
        ".content[1].citations.citations[1].location.kind",
    ),
]

BAD_CASES = [pytest.param(mutate, field, id=name) for name, mutate, field in BAD_MESSAGES]


def bad_message(mutate: Mutation) -> ctx.ContextMessage:
    message = valid_assistant()
    mutate(message)
    return message


async def test_the_valid_base_message_is_accepted(store: Store) -> None:
    """Guards the cases below: the message they break is itself valid."""
    key = unique("ctx")
    assert await save(store, key, snapshot(user("q"), valid_assistant()), 0) == 1
    assert (await append(store, key, [user("q"), valid_assistant()])).count == 2


@pytest.mark.parametrize(("mutate", "field"), BAD_CASES)
async def test_save_rejects_a_malformed_snapshot(
    store: Store, mutate: Mutation, field: str
) -> None:
    """§12.1 shape rules: INVALID_ARGUMENT with the offending field; the
    stored versions are unchanged."""
    key = unique("ctx")
    await save(store, key, snapshot(user("v1")), 0)
    before = await state(store, key)
    failure = await fails_with(
        store.context.SaveContext(
            ctx.SaveContextRequest(
                key=key, snapshot=snapshot(user("q"), bad_message(mutate)), expected_version=1
            )
        ),
        INVALID,
        VALIDATION,
    )
    assert failure.metadata["field"] == f"snapshot.messages[1]{field}"
    assert failure.metadata["permanent"] == "true"
    assert await state(store, key) == before


@pytest.mark.parametrize(("mutate", "field"), BAD_CASES)
async def test_append_transcript_rejects_a_malformed_message(
    store: Store, mutate: Mutation, field: str
) -> None:
    """Same shape rules for transcript messages; the whole batch is refused."""
    key = unique("ctx")
    await append(store, key, [user("existing")])
    before = await state(store, key)
    failure = await fails_with(
        append(store, key, [user("q"), bad_message(mutate)], idempotency_key="k"),
        INVALID,
        VALIDATION,
    )
    assert failure.metadata["field"] == f"messages[1]{field}"
    assert await state(store, key) == before


# --- Byte-exact round trip -----------------------------------------------------------

RAW_ARGUMENTS = (
    b'{ "zeta":1,\n  "alpha" : [12345678901234567890123456789, 1.10e-7],'
    b'"big": 9007199254740993, "s":"\\u00e9\xc3\xa9\\n\\u0000" ,"o":{"b":1,"a":2}}'
)
RESULT_CONTENT = b' [ {"rows":3 , "z":null}, "text", 1e400 ] '
META = b'{"response_id":"resp-1", "model" : "m",\t"usage":{"in":10,"out":20}}'
PNG = b"\x89PNG\r\n\x1a\n\x00\xff\x00\xfe" + bytes(range(256))


def every_kind_snapshot() -> ctx.ContextSnapshot:
    """One message of each type and one block of each kind (and each source)."""
    blocks = [
        text("plain text with ünïcode ✓ and trailing spaces  "),
        ctx.ContentBlock(type="image", image=ctx.ImageBlock(format="png", data=PNG)),
        ctx.ContentBlock(
            type="image", image=ctx.ImageBlock(format="jpeg", url="https://example.com/a.jpg")
        ),
        ctx.ContentBlock(type="image", image=ctx.ImageBlock(format="gif", data=b"\x00\xff")),
        ctx.ContentBlock(
            type="image", image=ctx.ImageBlock(format="webp", url="data:image/webp;base64,AA==")
        ),
        ctx.ContentBlock(
            type="document",
            document=ctx.DocumentBlock(
                name="report.pdf", format="pdf", data=b"%PDF-\x00\xff", context="q3", cite=True
            ),
        ),
        ctx.ContentBlock(
            type="document", document=ctx.DocumentBlock(name="notes", format="txt", text="n")
        ),
        ctx.ContentBlock(
            type="document",
            document=ctx.DocumentBlock(name="chunks", chunks=["first", "second", "ünï"]),
        ),
        ctx.ContentBlock(
            type="document",
            document=ctx.DocumentBlock(name="remote", format="html", uri="https://x.org/d"),
        ),
    ]
    thinking = [
        ctx.ContentBlock(
            type="thinking",
            thinking=ctx.ThinkingBlock(text="let me think", signature="c2ln+/==", index=0),
        ),
        ctx.ContentBlock(
            type="thinking",
            thinking=ctx.ThinkingBlock(redacted=b"\x00\xffredacted\x01", index=1, final=True),
        ),
        ctx.ContentBlock(
            type="tool_use",
            tool_use=ctx.ToolUseBlock(
                id="toolu_01", name="search.web", input=RAW_ARGUMENTS, thought_signature="ts=="
            ),
        ),
        ctx.ContentBlock(
            type="citations",
            citations=ctx.CitationsBlock(
                text="nvim is a fork of vim",
                citations=[
                    ctx.Citation(title="no location", source="https://neovim.io"),
                    ctx.Citation(
                        title="char",
                        source="doc-0",
                        location=ctx.CitationLocation(
                            kind="document_char", document_index=0, start=3, end=42
                        ),
                        source_content=["fork", "of vim"],
                    ),
                    ctx.Citation(
                        title="chunk",
                        location=ctx.CitationLocation(
                            kind="document_chunk", document_index=2, start=0, end=1
                        ),
                    ),
                    ctx.Citation(
                        title="page",
                        location=ctx.CitationLocation(
                            kind="document_page", document_index=1, start=5, end=6
                        ),
                    ),
                    ctx.Citation(
                        title="zero location", location=ctx.CitationLocation(kind="document_char")
                    ),
                ],
            ),
        ),
        ctx.ContentBlock(type="cache_checkpoint", cache_checkpoint=ctx.CacheCheckpointBlock()),
    ]
    results = [
        ctx.ContentBlock(
            type="tool_result",
            tool_result=ctx.ToolResultBlock(tool_use_id="toolu_01", content=RESULT_CONTENT),
        ),
        ctx.ContentBlock(
            type="tool_result",
            tool_result=ctx.ToolResultBlock(
                tool_use_id="toolu_02", content=b'"boom"', is_error=True
            ),
        ),
        ctx.ContentBlock(
            type="tool_result", tool_result=ctx.ToolResultBlock(tool_use_id="toolu_03")
        ),
        ctx.ContentBlock(type="cache_checkpoint", cache_checkpoint=ctx.CacheCheckpointBlock()),
    ]
    return ctx.ContextSnapshot(
        system_prompt="You are concise.\n\tBe exact. ✓",
        summary="Earlier: the user asked about editors.",
        messages=[
            ctx.ContextMessage(type="system", content=[text("extra system note")]),
            ctx.ContextMessage(type="user", content=blocks),
            ctx.ContextMessage(type="assistant", content=thinking, meta=META),
            ctx.ContextMessage(type="user", content=results),
            ctx.ContextMessage(type="assistant", content=[], meta=b"{}"),
        ],
    )


def assert_raw_fields(got: ctx.ContextSnapshot) -> None:
    """The bytes a provider replay depends on, checked one by one."""
    user_blocks = got.messages[1].content
    assert user_blocks[1].image.data == PNG
    assert user_blocks[1].image.WhichOneof("source") == "data"
    assert user_blocks[2].image.WhichOneof("source") == "url"
    assert user_blocks[3].image.data == b"\x00\xff"
    assert user_blocks[5].document.data == b"%PDF-\x00\xff"
    assistant_blocks = got.messages[2].content
    assert assistant_blocks[0].thinking.signature == "c2ln+/=="
    assert assistant_blocks[1].thinking.redacted == b"\x00\xffredacted\x01"
    assert assistant_blocks[2].tool_use.input == RAW_ARGUMENTS
    assert assistant_blocks[3].citations.citations[0].HasField("location") is False
    assert assistant_blocks[3].citations.citations[4].HasField("location") is True
    assert got.messages[2].meta == META
    assert got.messages[3].content[0].tool_result.content == RESULT_CONTENT
    assert [b.type for b in assistant_blocks] == [
        "thinking",
        "thinking",
        "tool_use",
        "citations",
        "cache_checkpoint",
    ]
    assert [b.WhichOneof("block") for b in assistant_blocks] == [b.type for b in assistant_blocks]


async def test_snapshot_of_every_message_and_block_kind_round_trips_byte_exact(
    store: Store,
) -> None:
    """§12.1: the stored record keeps image bytes or URLs, metadata, tool call IDs
    and names, raw arguments, results and thinking signatures: what comes back
    serialises to exactly what was sent, and every raw bytes field is identical."""
    key = unique("ctx")
    sent = every_kind_snapshot()
    assert await save(store, key, sent, 0) == 1
    got = (await get(store, key)).snapshot
    assert wire(got) == wire(sent)
    assert got == sent
    assert_raw_fields(got)
    # A successor keeps it too, and the older version still reads back exact.
    successor = ctx.ContextSnapshot.FromString(wire(sent))
    successor.messages.append(user("next"))
    assert await save(store, key, successor, 1) == 2
    assert wire((await get(store, key, 1)).snapshot) == wire(sent)
    assert wire((await get(store, key)).snapshot) == wire(successor)


async def test_transcript_messages_of_every_kind_round_trip_byte_exact(store: Store) -> None:
    key = unique("ctx")
    sent = list(every_kind_snapshot().messages)
    await append(store, key, sent, idempotency_key="all")
    got = await transcript(store, key)
    assert [wire(m) for m in got] == [wire(m) for m in sent]
    assert_raw_fields(ctx.ContextSnapshot(messages=got))
    retry = await append(store, key, sent, idempotency_key="all")
    assert (retry.first_position, retry.count, retry.inserted) == (0, len(sent), False)


# --- The continuation loop end to end (§12.1) -------------------------------------


async def test_conversation_continues_across_runs_and_races(store: Store) -> None:
    """§12.1: run 1 stores its context; run 2 loads it and stores a successor; two
    runs continue from the same version concurrently: one wins, the other is told
    the winner's version, reloads and saves again; nothing is lost."""
    key = unique("conversation")
    system = "You are a concise assistant."

    # First run: empty state + "What is nvim?".
    first = snapshot(
        user("What is nvim?"), assistant("A modal text editor, a fork of vim."), system=system
    )
    assert await save(store, key, first, 0) == 1
    await append(store, key, list(first.messages), idempotency_key="run-1")

    # Second run: continues from the stored context; "it" resolves through it.
    loaded = await get(store, key)
    assert loaded.version == 1
    second = ctx.ContextSnapshot.FromString(wire(loaded.snapshot))
    new = [user("How does it differ from vim?"), assistant("Lua config, built-in LSP.")]
    second.messages.extend(new)
    assert await save(store, key, second, loaded.version) == 2
    await append(store, key, new, idempotency_key="run-2")

    # Two runs from the same stored version, concurrently.
    base = await get(store, key)
    contributions = {
        "left": [user("Is it fast?"), assistant("Yes.")],
        "right": [user("Does it have plugins?"), assistant("Many.")],
    }
    successors = {}
    for name, messages in contributions.items():
        successor = ctx.ContextSnapshot.FromString(wire(base.snapshot))
        successor.messages.extend(messages)
        successors[name] = successor
    outcomes = dict(
        zip(
            successors,
            await asyncio.gather(
                *(saving(store, key, s, base.version) for s in successors.values())
            ),
            strict=True,
        )
    )
    winners = [name for name, result in outcomes.items() if result == 3]
    assert len(winners) == 1, outcomes
    (winner,) = winners
    (loser,) = set(outcomes) - {winner}
    failure = outcomes[loser]
    assert isinstance(failure, Failure), outcomes
    assert (failure.code, failure.reason) == (ABORTED, VERSION_CONFLICT)
    assert failure.metadata["current_version"] == "3"
    assert failure.metadata["permanent"] == "true"
    assert wire((await get(store, key)).snapshot) == wire(successors[winner])
    await append(store, key, contributions[winner], idempotency_key=f"run-{winner}")

    # The loser reloads, reapplies its turn and saves on top of the winner.
    reloaded = await get(store, key)
    assert reloaded.version == 3
    merged = ctx.ContextSnapshot.FromString(wire(reloaded.snapshot))
    merged.messages.extend(contributions[loser])
    assert await save(store, key, merged, reloaded.version) == 4
    await append(store, key, contributions[loser], idempotency_key=f"run-{loser}")

    final = await get(store, key)
    assert (final.version, final.current_version) == (4, 4)
    assert final.snapshot.system_prompt == system
    expected = [
        *first.messages,
        *new,
        *contributions[winner],
        *contributions[loser],
    ]
    assert [wire(m) for m in final.snapshot.messages] == [wire(m) for m in expected]
    assert [v for v, _, _ in await saved(store, key)] == [1, 2, 3, 4]
    assert wire((await get(store, key, 1)).snapshot) == wire(first)
    assert wire((await get(store, key, 2)).snapshot) == wire(second)
    assert [wire(m) for m in await transcript(store, key)] == [wire(m) for m in expected]


async def test_many_concurrent_saves_from_one_version_have_one_winner(store: Store) -> None:
    """D5: writes are serialised; of N savers from the same version exactly one wins
    and every other is ABORTED naming the winner's version."""
    key = unique("ctx")
    await save(store, key, snapshot(user("base")), 0)
    snaps = [snapshot(user("base"), assistant(f"saver {i}")) for i in range(N)]
    results = await asyncio.gather(*(saving(store, key, s, 1) for s in snaps))
    wins = [i for i, r in enumerate(results) if r == 2]
    assert len(wins) == 1, results
    for result in results:
        if isinstance(result, Failure):
            assert (result.code, result.reason) == (ABORTED, VERSION_CONFLICT)
            assert result.metadata["current_version"] == "2"
    assert sum(isinstance(r, Failure) for r in results) == N - 1
    current = await get(store, key)
    assert (current.version, wire(current.snapshot)) == (2, wire(snaps[wins[0]]))
    await fails_with(get(store, key, 3), NOT_FOUND, VERSION_NOT_FOUND)


async def test_concurrent_creates_of_a_new_key_have_one_winner(store: Store) -> None:
    key = unique("ctx")
    snaps = [snapshot(user(f"creator {i}")) for i in range(N)]
    results = await asyncio.gather(*(saving(store, key, s, 0) for s in snaps))
    assert [r for r in results if not isinstance(r, Failure)] == [1]
    for result in results:
        if isinstance(result, Failure):
            assert (result.reason, result.metadata["current_version"]) == (VERSION_CONFLICT, "1")
    assert (await get(store, key)).current_version == 1


async def test_concurrent_identical_retries_of_one_save_all_return_its_version(
    store: Store,
) -> None:
    """Racing retries of the same save are one save: all get version 2, no version 3."""
    key = unique("ctx")
    await save(store, key, snapshot(user("base")), 0)
    retry = snapshot(user("base"), assistant("same"))
    results = await asyncio.gather(*(saving(store, key, retry, 1) for _ in range(N)))
    assert results == [2] * N
    assert (await get(store, key)).current_version == 2


async def test_concurrent_transcript_appends_get_dense_positions(store: Store) -> None:
    key = unique("ctx")
    batches = [[user(f"c{call}-q"), assistant(f"c{call}-a")] for call in range(N * 2)]
    results = await asyncio.gather(*(append(store, key, batch) for batch in batches))
    assert all(r.inserted and r.count == 2 for r in results)
    assert sorted(r.first_position for r in results) == list(range(0, 4 * N, 2))
    stored = [wire(m) for m in await transcript(store, key)]
    assert len(stored) == 4 * N
    for batch, result in zip(batches, results, strict=True):
        start = result.first_position
        assert stored[start : start + 2] == [wire(m) for m in batch]


async def test_concurrent_identical_idempotent_transcript_appends_append_once(
    store: Store,
) -> None:
    key = unique("ctx")
    batch = [user("q"), assistant("a")]
    results = await asyncio.gather(
        *(append(store, key, batch, idempotency_key="once") for _ in range(N * 2))
    )
    assert sum(r.inserted for r in results) == 1
    assert {(r.first_position, r.count) for r in results} == {(0, 2)}
    assert texts(await transcript(store, key)) == ["q", "a"]
