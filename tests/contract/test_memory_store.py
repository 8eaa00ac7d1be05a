"""MemoryStore: per-run memory events keyed by (agent, run) (§12, D5, Q18).

Every test talks to the server through ``store.memory`` only and uses fresh
agent and run IDs, so the suite runs unchanged on every backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from runstore.v1 import memory_store_pb2 as ms
from tests.support import Store, fails_with, unique

INVALID = grpc.StatusCode.INVALID_ARGUMENT
CONFLICT = grpc.StatusCode.ALREADY_EXISTS

VALIDATION = "CONTRACT_VALIDATION"
READ_ARGUMENT = "INVALID_ARGUMENT_READ"
IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"

SERVER_MAX_PAGE = 1000
"""The test server's default page cap (``page_limit``; proto: "default 1000")."""

N = 16

BASE_SECONDS = 1_700_000_000


# --- Helpers -------------------------------------------------------------------------


def stamp(offset: int = 0, nanos: int = 0) -> Timestamp:
    return Timestamp(seconds=BASE_SECONDS + offset, nanos=nanos)


def event(
    type: str = "user_message",
    data: bytes = b'{"message":"hi"}',
    labels: Mapping[str, str] | None = None,
    at: Timestamp | None = None,
) -> ms.MemoryEvent:
    return ms.MemoryEvent(
        type=type,
        timestamp=at if at is not None else stamp(),
        data=data,
        labels=dict(labels or {}),
    )


def numbered(count: int, tag: str = "e") -> list[ms.MemoryEvent]:
    """``count`` distinct events whose data names their index."""
    return [
        event(data=f'{{"message":"{tag}-{index}"}}'.encode(), at=stamp(index))
        for index in range(count)
    ]


def history_ids() -> tuple[str, str]:
    return unique("agent"), unique("run")


async def append(
    store: Store,
    agent: str,
    run: str,
    events: list[ms.MemoryEvent],
    idempotency_key: str = "",
) -> ms.AppendEventsResponse:
    response: ms.AppendEventsResponse = await store.memory.AppendEvents(
        ms.AppendEventsRequest(
            agent_id=agent, run_id=run, events=events, idempotency_key=idempotency_key
        )
    )
    return response


async def load(
    store: Store, agent: str, run: str, cursor: str = "", limit: int = 0
) -> ms.MemoryLoadRunResponse:
    response: ms.MemoryLoadRunResponse = await store.memory.LoadRun(
        ms.MemoryLoadRunRequest(agent_id=agent, run_id=run, cursor=cursor, limit=limit)
    )
    return response


async def load_all(store: Store, agent: str, run: str, limit: int = 0) -> list[ms.MemoryEvent]:
    """Every event of the history, following next_cursor to the end."""
    events: list[ms.MemoryEvent] = []
    cursor = ""
    while True:
        page = await load(store, agent, run, cursor, limit)
        events.extend(page.events)
        if not page.next_cursor:
            return events
        cursor = page.next_cursor


async def memory_state(store: Store, agent: str, run: str) -> tuple[list[bytes], str]:
    """Everything a failed append must leave untouched: the serialised events and
    the stored count."""
    events = await load_all(store, agent, run)
    count = (await load(store, agent, run)).meta.get("event_count", "")
    return [e.SerializeToString(deterministic=True) for e in events], count


def messages_of(events: list[ms.MemoryEvent]) -> list[bytes]:
    return [e.data for e in events]


# --- LoadRun of nothing ---------------------------------------------------------------


async def test_load_run_of_an_unknown_run_is_an_empty_snapshot(store: Store) -> None:
    """§12: an unknown (agent, run) is an empty snapshot, not an error."""
    agent, run = history_ids()
    page = await load(store, agent, run)
    assert (page.agent_id, page.run_id) == (agent, run)
    assert list(page.events) == []
    assert page.next_cursor == ""
    assert dict(page.meta) == {"event_count": "0"}


async def test_load_run_of_a_known_run_under_another_agent_is_empty(store: Store) -> None:
    """§12: history is keyed by the pair; the run ID alone names nothing."""
    agent, run = history_ids()
    await append(store, agent, run, numbered(2))
    page = await load(store, unique("agent"), run)
    assert (list(page.events), page.next_cursor) == ([], "")


# --- AppendEvents ----------------------------------------------------------------------


async def test_append_events_keeps_order_and_reports_positions(store: Store) -> None:
    """§12: appended in the given order; first_position is 0-based, count is the batch."""
    agent, run = history_ids()
    first = await append(store, agent, run, numbered(3, "a"))
    assert (first.first_position, first.count, first.inserted) == (0, 3, True)
    second = await append(store, agent, run, numbered(2, "b"))
    assert (second.first_position, second.count, second.inserted) == (3, 2, True)

    page = await load(store, agent, run)
    assert messages_of(list(page.events)) == [
        b'{"message":"a-0"}',
        b'{"message":"a-1"}',
        b'{"message":"a-2"}',
        b'{"message":"b-0"}',
        b'{"message":"b-1"}',
    ]
    assert page.meta["event_count"] == "5"
    assert page.next_cursor == ""


async def test_events_are_returned_in_append_order_not_timestamp_order(store: Store) -> None:
    """§12: "chronological" means the order of appends; timestamps are not sorted."""
    agent, run = history_ids()
    late, early = (
        event(data=b'{"message":"late"}', at=stamp(100)),
        event(data=b'{"message":"early"}', at=stamp(1)),
    )
    await append(store, agent, run, [late, early])
    assert messages_of(await load_all(store, agent, run)) == [
        b'{"message":"late"}',
        b'{"message":"early"}',
    ]


async def test_same_run_id_under_two_agents_is_two_histories(store: Store) -> None:
    """§12: keyed by (agent_id, run_id); positions count per history."""
    run = unique("run")
    planner, executor = unique("planner"), unique("executor")
    a = await append(store, planner, run, numbered(2, "planner"))
    b = await append(store, executor, run, numbered(3, "executor"))
    assert (a.first_position, a.count) == (0, 2)
    assert (b.first_position, b.count) == (0, 3)
    assert messages_of(await load_all(store, planner, run)) == [
        b'{"message":"planner-0"}',
        b'{"message":"planner-1"}',
    ]
    assert len(await load_all(store, executor, run)) == 3
    assert (await load(store, planner, run)).meta["event_count"] == "2"


async def test_zero_events_is_a_no_op(store: Store) -> None:
    """§12: zero events = no-op, on a new history and on an existing one."""
    agent, run = history_ids()
    empty = await append(store, agent, run, [])
    assert empty.count == 0
    page = await load(store, agent, run)
    assert (list(page.events), dict(page.meta)) == ([], {"event_count": "0"})

    await append(store, agent, run, numbered(2))
    before = await memory_state(store, agent, run)
    again = await append(store, agent, run, [])
    assert again.count == 0
    assert await memory_state(store, agent, run) == before
    after = await append(store, agent, run, numbered(1, "next"))
    assert after.first_position == 2


async def test_appends_without_idempotency_key_are_not_deduplicated(store: Store) -> None:
    """Q18, D5: without a key the store appends blindly; a repeat is a second copy."""
    agent, run = history_ids()
    batch = numbered(2)
    first = await append(store, agent, run, batch)
    second = await append(store, agent, run, batch)
    assert (second.first_position, second.count, second.inserted) == (2, 2, True)
    assert first.first_position == 0
    assert messages_of(await load_all(store, agent, run)) == messages_of(batch) * 2


# --- Paging ----------------------------------------------------------------------------


async def test_next_cursor_chaining_returns_every_event_once_in_order(store: Store) -> None:
    """proto LoadRun: large histories page; pass next_cursor back; "" at the end."""
    agent, run = history_ids()
    batch = numbered(10)
    await append(store, agent, run, batch)

    pages: list[list[bytes]] = []
    cursor = ""
    while True:
        page = await load(store, agent, run, cursor, limit=3)
        pages.append(messages_of(list(page.events)))
        assert page.meta["event_count"] == "10"
        if not page.next_cursor:
            break
        assert page.next_cursor != cursor
        cursor = page.next_cursor
    assert [len(p) for p in pages] == [3, 3, 3, 1]
    assert [m for p in pages for m in p] == messages_of(batch)


async def test_page_ending_exactly_at_the_last_event_has_no_cursor(store: Store) -> None:
    agent, run = history_ids()
    await append(store, agent, run, numbered(4))
    first = await load(store, agent, run, limit=2)
    assert len(first.events) == 2 and first.next_cursor
    second = await load(store, agent, run, first.next_cursor, limit=2)
    assert len(second.events) == 2
    assert second.next_cursor == ""


async def test_limit_zero_means_the_server_maximum_page(store: Store) -> None:
    """proto: 0 means the server's maximum page (default 1000); larger limits are capped."""
    agent, run = history_ids()
    batch = numbered(SERVER_MAX_PAGE + 1)
    result = await append(store, agent, run, batch)
    assert (result.first_position, result.count) == (0, SERVER_MAX_PAGE + 1)

    for limit in (0, SERVER_MAX_PAGE + 500):
        page = await load(store, agent, run, limit=limit)
        assert len(page.events) == SERVER_MAX_PAGE, limit
        assert page.next_cursor, limit
        rest = await load(store, agent, run, page.next_cursor, limit=limit)
        assert messages_of(list(rest.events)) == [batch[-1].data]
        assert rest.next_cursor == ""
    assert messages_of(await load_all(store, agent, run)) == messages_of(batch)


async def test_cursor_at_or_past_the_end_is_an_empty_page(store: Store) -> None:
    agent, run = history_ids()
    await append(store, agent, run, numbered(2))
    for cursor in ("2", "3", "1000000"):
        page = await load(store, agent, run, cursor)
        assert (list(page.events), page.next_cursor) == ([], ""), cursor


async def test_negative_limit_is_invalid_argument(store: Store) -> None:
    """§11.3 / D3 / Q12: a read argument error is INVALID_ARGUMENT, reason
    INVALID_ARGUMENT_READ, permanent; checked before existence."""
    agent, run = history_ids()
    await append(store, agent, run, numbered(1))
    for target in (run, unique("ghost")):
        failure = await fails_with(
            store.memory.LoadRun(ms.MemoryLoadRunRequest(agent_id=agent, run_id=target, limit=-1)),
            INVALID,
            READ_ARGUMENT,
        )
        assert failure.metadata["field"] == "limit"
        assert failure.metadata["permanent"] == "true"


@pytest.mark.parametrize("cursor", ["abc", "-1", "+1", "1.0", " 1"])
async def test_cursor_must_be_ascii_digits(store: Store, cursor: str) -> None:
    """D3: cursors accept ASCII digits only."""
    agent, run = history_ids()
    await append(store, agent, run, numbered(2))
    failure = await fails_with(
        store.memory.LoadRun(ms.MemoryLoadRunRequest(agent_id=agent, run_id=run, cursor=cursor)),
        INVALID,
        READ_ARGUMENT,
        "invalid cursor",
    )
    assert failure.metadata["field"] == "cursor"


# --- Round trips -----------------------------------------------------------------------


ODD_DATA = (
    b'{ "zeta" :1,\n\t"alpha":  [ 1.0e3 , 12345678901234567890123456789 , -0.0 ],'
    b' "text":"caf\xc3\xa9 \\u00e9 \xf0\x9f\x98\x80 \\"q\\"",  "nested":{"b":null,"a":{}}'
    b',"big":9007199254740993, "nul":"a\\u0000b" }  '
)


async def test_data_and_labels_round_trip_byte_for_byte(store: Store) -> None:
    """§12: Data is stored and returned without interpretation (whitespace, key order,
    escapes, numbers beyond float64 all survive); labels are an exact map."""
    agent, run = history_ids()
    labels = {"tenant": "acme", "ünïcode": "värde ✓", "empty": "", "spaces": " a b "}
    sent = event(type="assistant_message", data=ODD_DATA, labels=labels)
    await append(store, agent, run, [sent, event(data=b"{}")])

    events = await load_all(store, agent, run)
    assert events[0].data == ODD_DATA
    assert dict(events[0].labels) == labels
    assert events[0].type == "assistant_message"
    assert events[1].data == b"{}"
    assert dict(events[1].labels) == {}


@pytest.mark.parametrize(
    "at",
    [
        Timestamp(seconds=BASE_SECONDS, nanos=123_456_789),
        Timestamp(seconds=BASE_SECONDS, nanos=1),
        Timestamp(seconds=BASE_SECONDS, nanos=999_999_999),
        Timestamp(seconds=-1, nanos=999_999_999),
    ],
    ids=["nanos", "one-nano", "max-nanos", "before-epoch"],
)
async def test_timestamps_keep_nanoseconds(store: Store, at: Timestamp) -> None:
    """D7: memory event times keep full precision (only records are whole ms)."""
    agent, run = history_ids()
    await append(store, agent, run, [event(at=at)])
    (stored,) = await load_all(store, agent, run)
    assert (stored.timestamp.seconds, stored.timestamp.nanos) == (at.seconds, at.nanos)


EVERY_TYPE: list[tuple[str, bytes]] = [
    ("user_message", b'{"message":"What is nvim?","structured":{"lang":"en"}}'),
    ("assistant_message", b'{"message":"A text editor.","structured":[1,2]}'),
    (
        "tool_call",
        b'{"tool_call_id":"call-1","tool_name":"search.web","parent_tool_call_id":"call-0",'
        b'"payload":"{\\"q\\":\\"nvim\\"}","queue":"default","expected_children_total":2}',
    ),
    (
        "tool_result",
        b'{"tool_call_id":"call-1","tool_name":"search.web","parent_tool_call_id":"call-0",'
        b'"result_json":"{\\"hits\\":3}","preview":"3 hits","bounds":{"returned":3},'
        b'"duration":1500000,"error_message":""}',
    ),
    ("planner_note", b'{"note":"search first"}'),
    (
        "thinking",
        b'{"text":"hmm","signature":"sig==","redacted":"AP8=","content_index":0,"final":true}',
    ),
    ("user_message", b"{}"),
    ("thinking", b'{"content_index":3,"final":false}'),
]


async def test_every_event_type_of_section_12_is_stored(store: Store) -> None:
    """§12 table: each type with its data keys, in one atomic batch."""
    agent, run = history_ids()
    batch = [
        event(type=t, data=d, labels={"i": str(i)}, at=stamp(i))
        for i, (t, d) in enumerate(EVERY_TYPE)
    ]
    result = await append(store, agent, run, batch)
    assert (result.first_position, result.count) == (0, len(EVERY_TYPE))
    stored = await load_all(store, agent, run)
    assert [(e.type, e.data, dict(e.labels)) for e in stored] == [
        (t, d, {"i": str(i)}) for i, (t, d) in enumerate(EVERY_TYPE)
    ]
    assert [e.SerializeToString(deterministic=True) for e in stored] == [
        e.SerializeToString(deterministic=True) for e in batch
    ]


# --- Validation ------------------------------------------------------------------------


def _set(**fields: Any) -> Callable[[ms.MemoryEvent], None]:
    def mutate(message: ms.MemoryEvent) -> None:
        for name, value in fields.items():
            if isinstance(value, Timestamp):
                getattr(message, name).CopyFrom(value)
            else:
                setattr(message, name, value)

    return mutate


def _no_timestamp(message: ms.MemoryEvent) -> None:
    message.ClearField("timestamp")


BAD_EVENTS: list[tuple[str, Callable[[ms.MemoryEvent], None], str]] = [
    ("unknown-type", _set(type="note"), "type"),
    ("empty-type", _set(type=""), "type"),
    ("type-wrong-case", _set(type="User_Message"), "type"),
    ("missing-timestamp", _no_timestamp, "timestamp"),
    ("timestamp-after-9999", _set(timestamp=Timestamp(seconds=253402300800)), "timestamp"),
    ("timestamp-nanos-negative", _set(timestamp=Timestamp(seconds=1, nanos=-1)), "timestamp"),
    ("data-array", _set(data=b"[1,2]"), "data"),
    ("data-string", _set(data=b'"hello"'), "data"),
    ("data-null", _set(data=b"null"), "data"),
    ("data-number", _set(data=b"42"), "data"),
    ("data-not-json", _set(data=b'{"message":'), "data"),
    ("data-empty", _set(data=b""), "data"),
    ("data-invalid-utf8", _set(data=b'{"message":"\xff"}'), "data"),
    ("tool-call-without-id", _set(type="tool_call", data=b'{"tool_name":"t"}'), "data"),
    ("tool-call-without-name", _set(type="tool_call", data=b'{"tool_call_id":"c"}'), "data"),
    ("tool-result-without-id", _set(type="tool_result", data=b'{"tool_name":"t"}'), "data"),
    ("tool-result-without-name", _set(type="tool_result", data=b'{"tool_call_id":"c"}'), "data"),
    ("planner-note-without-note", _set(type="planner_note", data=b'{"text":"x"}'), "data"),
]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [pytest.param(m, f, id=name) for name, m, f in BAD_EVENTS],
)
async def test_invalid_event_rejects_the_whole_batch(
    store: Store, mutate: Callable[[ms.MemoryEvent], None], field: str
) -> None:
    """§12 event shape: a bad event fails the call with its field; the valid event
    before it in the batch is not written either (atomic)."""
    agent, run = history_ids()
    await append(store, agent, run, numbered(1, "existing"))
    before = await memory_state(store, agent, run)

    bad = event(data=b'{"message":"bad"}', at=stamp(5))
    mutate(bad)
    failure = await fails_with(
        store.memory.AppendEvents(
            ms.AppendEventsRequest(
                agent_id=agent, run_id=run, events=[event(data=b'{"message":"ok"}'), bad]
            )
        ),
        INVALID,
        VALIDATION,
    )
    assert failure.metadata["field"] == f"events[1].{field}"
    assert failure.metadata["permanent"] == "true"
    assert await memory_state(store, agent, run) == before


async def test_invalid_event_with_an_idempotency_key_burns_nothing(store: Store) -> None:
    """A rejected call is not remembered: the key still works for a valid batch."""
    agent, run = history_ids()
    await fails_with(
        append(store, agent, run, [event(type="bogus")], idempotency_key="k1"),
        INVALID,
        VALIDATION,
    )
    result = await append(store, agent, run, numbered(2), idempotency_key="k1")
    assert (result.first_position, result.count, result.inserted) == (0, 2, True)


@pytest.mark.parametrize(
    ("agent", "run", "field"),
    [("", "run", "agent_id"), ("agent", "", "run_id"), ("", "", "agent_id")],
    ids=["no-agent", "no-run", "neither"],
)
async def test_agent_and_run_ids_are_required(
    store: Store, agent: str, run: str, field: str
) -> None:
    """An empty agent_id or run_id names no history: INVALID_ARGUMENT with the field."""
    suffix = unique("x")
    agent_id = agent and agent + suffix
    run_id = run and run + suffix
    for call in (
        store.memory.AppendEvents(
            ms.AppendEventsRequest(agent_id=agent_id, run_id=run_id, events=numbered(1))
        ),
        store.memory.LoadRun(ms.MemoryLoadRunRequest(agent_id=agent_id, run_id=run_id)),
    ):
        failure = await fails_with(call, INVALID, VALIDATION)
        assert failure.metadata["field"] == field
    if agent_id:
        assert await load_all(store, agent_id, "run" + suffix) == []
    if run_id:
        assert await load_all(store, "agent" + suffix, run_id) == []


# --- Idempotency (D5) -----------------------------------------------------------------


async def test_same_key_and_events_appends_nothing_and_returns_original(store: Store) -> None:
    """D5: a retried call appends nothing and returns the original first_position and
    count with inserted=false, even after other appends moved the end."""
    agent, run = history_ids()
    await append(store, agent, run, numbered(1, "before"))
    batch = numbered(2, "keyed")
    first = await append(store, agent, run, batch, idempotency_key="key-1")
    assert (first.first_position, first.count, first.inserted) == (1, 2, True)
    await append(store, agent, run, numbered(3, "after"))

    before = await memory_state(store, agent, run)
    retry = await append(store, agent, run, batch, idempotency_key="key-1")
    assert (retry.first_position, retry.count, retry.inserted) == (1, 2, False)
    assert await memory_state(store, agent, run) == before
    assert before[1] == "6"


async def test_idempotent_zero_event_append_replays(store: Store) -> None:
    agent, run = history_ids()
    first = await append(store, agent, run, [], idempotency_key="nothing")
    retry = await append(store, agent, run, [], idempotency_key="nothing")
    assert (retry.first_position, retry.count, retry.inserted) == (
        first.first_position,
        0,
        False,
    )
    assert await load_all(store, agent, run) == []


def _other_data(batch: list[ms.MemoryEvent]) -> None:
    batch[1].data = b'{"message":"changed"}'


def _other_whitespace(batch: list[ms.MemoryEvent]) -> None:
    batch[1].data = batch[1].data.replace(b":", b": ")


def _other_time(batch: list[ms.MemoryEvent]) -> None:
    batch[0].timestamp.nanos += 1


def _other_labels(batch: list[ms.MemoryEvent]) -> None:
    batch[0].labels["extra"] = "1"


def _other_type(batch: list[ms.MemoryEvent]) -> None:
    batch[0].type = "assistant_message"


def _extra_event(batch: list[ms.MemoryEvent]) -> None:
    batch.append(event(data=b'{"message":"more"}'))


def _fewer_events(batch: list[ms.MemoryEvent]) -> None:
    batch.pop()


def _reordered(batch: list[ms.MemoryEvent]) -> None:
    batch.reverse()


@pytest.mark.parametrize(
    "change",
    [
        _other_data,
        _other_whitespace,
        _other_time,
        _other_labels,
        _other_type,
        _extra_event,
        _fewer_events,
        _reordered,
    ],
)
async def test_same_key_with_different_events_is_a_conflict(
    store: Store, change: Callable[[list[ms.MemoryEvent]], None]
) -> None:
    """D5: the same key with different events is ALREADY_EXISTS
    (IDEMPOTENCY_CONFLICT), permanent, and nothing is written."""
    agent, run = history_ids()
    batch = numbered(2)
    await append(store, agent, run, batch, idempotency_key="key-1")
    before = await memory_state(store, agent, run)

    changed = [ms.MemoryEvent.FromString(e.SerializeToString()) for e in batch]
    change(changed)
    failure = await fails_with(
        append(store, agent, run, changed, idempotency_key="key-1"),
        CONFLICT,
        IDEMPOTENCY_CONFLICT,
    )
    assert failure.metadata["permanent"] == "true"
    assert await memory_state(store, agent, run) == before


async def test_different_keys_with_the_same_events_both_append(store: Store) -> None:
    """The key, not the content, identifies a logical append."""
    agent, run = history_ids()
    batch = numbered(2)
    a = await append(store, agent, run, batch, idempotency_key="a")
    b = await append(store, agent, run, batch, idempotency_key="b")
    assert (a.first_position, a.inserted, b.first_position, b.inserted) == (0, True, 2, True)
    assert len(await load_all(store, agent, run)) == 4


async def test_idempotency_key_belongs_to_its_history(store: Store) -> None:
    """§12: (agent, run) pairs are separate histories, so a key used in one does not
    suppress the same key in another."""
    run = unique("run")
    first_agent, second_agent = unique("agent"), unique("agent")
    batch = numbered(2)
    await append(store, first_agent, run, numbered(3, "pad"))
    a = await append(store, first_agent, run, batch, idempotency_key="shared")
    b = await append(store, second_agent, run, batch, idempotency_key="shared")
    assert (a.first_position, a.inserted) == (3, True)
    assert (b.first_position, b.count, b.inserted) == (0, 2, True)
    assert messages_of(await load_all(store, second_agent, run)) == messages_of(batch)


# --- Concurrency -----------------------------------------------------------------------


async def test_concurrent_identical_idempotent_appends_append_exactly_once(
    store: Store,
) -> None:
    """§7, D5: N racing retries of one logical append write it once; every caller
    gets the same first_position and count."""
    agent, run = history_ids()
    batch = numbered(3)
    results = await asyncio.gather(
        *(append(store, agent, run, batch, idempotency_key="race") for _ in range(N))
    )
    assert sum(result.inserted for result in results) == 1
    assert {(r.first_position, r.count) for r in results} == {(0, 3)}
    assert messages_of(await load_all(store, agent, run)) == messages_of(batch)


async def test_concurrent_appends_get_disjoint_dense_positions(store: Store) -> None:
    """§12: each append is atomic; racing appends to one (new) history never
    interleave, overlap or lose events."""
    agent, run = history_ids()
    batches = [
        [event(data=f'{{"message":"c{call}-{i}"}}'.encode()) for i in range(3)] for call in range(N)
    ]
    results = await asyncio.gather(*(append(store, agent, run, batch) for batch in batches))
    assert all(r.inserted and r.count == 3 for r in results)
    assert sorted(r.first_position for r in results) == list(range(0, 3 * N, 3))

    stored = messages_of(await load_all(store, agent, run))
    assert len(stored) == 3 * N
    for batch, result in zip(batches, results, strict=True):
        start = result.first_position
        assert stored[start : start + 3] == messages_of(batch)
    assert (await load(store, agent, run)).meta["event_count"] == str(3 * N)


# --- DeleteRun ----------------------------------------------------------------------


async def delete(store: Store, agent: str, run: str) -> bool:
    response = await store.memory.DeleteRun(ms.MemoryDeleteRunRequest(agent_id=agent, run_id=run))
    return bool(response.deleted)


async def test_delete_run_removes_the_history_and_its_idempotency_keys(store: Store) -> None:
    agent, run = history_ids()
    await append(store, agent, run, numbered(3), idempotency_key="key-1")
    other_agent = unique("agent")
    await append(store, other_agent, run, numbered(2, "kept"))

    assert await delete(store, agent, run)
    assert await load_all(store, agent, run) == []
    assert not await delete(store, agent, run)  # a retried delete finds nothing
    # The key is gone with the run: the same key appends anew from position 0.
    again = await append(store, agent, run, numbered(1, "new"), idempotency_key="key-1")
    assert (again.first_position, again.count, again.inserted) == (0, 1, True)
    # Another agent's run of the same ID is another history, untouched.
    assert messages_of(await load_all(store, other_agent, run)) == messages_of(numbered(2, "kept"))


async def test_delete_run_of_an_unknown_run_is_not_an_error(store: Store) -> None:
    assert not await delete(store, *history_ids())


async def test_delete_run_needs_both_ids(store: Store) -> None:
    agent, run = history_ids()
    for request in (
        ms.MemoryDeleteRunRequest(run_id=run),
        ms.MemoryDeleteRunRequest(agent_id=agent),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await store.memory.DeleteRun(request)
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_delete_racing_appends_leaves_a_whole_history_or_none(store: Store) -> None:
    """Appends and a delete at once: every append is all in or all out, and
    what remains is a gap-free history."""
    agent, run = history_ids()
    await append(store, agent, run, numbered(2, "before"))
    batches = [numbered(3, f"b{index}") for index in range(6)]
    results = await asyncio.gather(
        *(append(store, agent, run, batch) for batch in batches),
        delete(store, agent, run),
    )
    assert results[-1] is True
    events = await load_all(store, agent, run)
    assert len(events) % 3 == 0  # never part of a batch, never the 2 deleted ones
    data = messages_of(events)
    kept = [batch for batch in batches if messages_of(batch)[0] in data]
    assert data == [
        d
        for batch in sorted(kept, key=lambda b: data.index(messages_of(b)[0]))
        for d in messages_of(batch)
    ]
