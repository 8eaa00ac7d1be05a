"""Seeds and preparations (docs/contract.md §9.7) on every backend: each
method's rules, exact and changed retries, and settlement's permanence."""

from __future__ import annotations

import grpc

from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from tests.seeds import (
    MESSAGES,
    Upload,
    another_attempt,
    declaration,
    messages,
    part,
    prefix,
    prepared,
)
from tests.support import Store, fails_with, unique

NOT_FOUND = grpc.StatusCode.NOT_FOUND
CONFLICT = grpc.StatusCode.ALREADY_EXISTS
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT


async def test_a_literal_seed_is_begun_appended_published_and_read_back(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    seed = await upload.begin()
    assert (seed.end_id, seed.HasField("source")) == ("0", False)
    assert seed.declaration == upload.decl
    assert await upload.history() == "1"
    assert await upload.append(part("lit-a", "1", b'[{"ro', final=False)) == "2"
    assert await upload.append(part("lit-b", "2", b'le":"user"}]', final=True)) == "3"
    assert await upload.compiled(b"abc") == "4"
    assert await upload.compiled(b"de") == "5"
    await upload.publish()

    loaded = (
        await store.runtime.LoadRunSeed(sd.LoadRunSeedRequest(run_id=upload.run_id, end_id="3"))
    ).seed
    assert (loaded.end_id, loaded.declaration) == ("3", upload.decl)
    page = await store.runtime.ListRunSeedRecords(
        sd.ListRunSeedRecordsRequest(run_id=upload.run_id, end_id="3", limit=10)
    )
    assert [(r.id, r.previous_id, r.WhichOneof("body")) for r in page.records] == [
        ("1", "0", "messages"),
        ("2", "1", "literal_part"),
        ("3", "2", "literal_part"),
    ]
    assert (page.records[0].messages, page.next_cursor) == (MESSAGES, "")
    assert page.records[1].literal_part == sd.LiteralPart(data=b'[{"ro', final=False)

    compiled = await store.runtime.ListRunPreparationRecords(
        sd.ListRunPreparationRecordsRequest(run_id=upload.run_id, end_id="5", limit=1)
    )
    assert ([r.prepared for r in compiled.records], compiled.next_cursor) == ([b"abc"], "4")
    rest = await store.runtime.ListRunPreparationRecords(
        sd.ListRunPreparationRecordsRequest(run_id=upload.run_id, end_id="5", after_id="4", limit=9)
    )
    assert ([r.id for r in rest.records], rest.next_cursor) == (["5"], "")

    found = await store.runtime.FindRunPreparation(upload.find())
    assert found.found
    assert (found.preparation.end_id, found.preparation.prepared_bytes) == ("5", 5)
    assert found.preparation.seed == loaded
    settled = await store.runtime.SettleRunPreparation(upload.settle())
    assert (settled.found, settled.preparation) == (True, found.preparation)


async def test_begin_retries_return_the_original_and_changes_conflict(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    first = await upload.begin()
    assert await upload.begin() == first
    changed = sd.SeedDeclaration()
    changed.CopyFrom(upload.decl)
    changed.rendered_prompts.add(prompt_id="p", version="1")
    await fails_with(
        store.runtime.BeginRunSeed(sd.BeginRunSeedRequest(declaration=changed)),
        CONFLICT,
        "SEED_CONFLICT",
        "run seed conflict",
    )
    other_command = declaration(run_id=upload.run_id, command_id="another")
    await fails_with(
        store.runtime.BeginRunSeed(sd.BeginRunSeedRequest(declaration=other_command)),
        CONFLICT,
        "SEED_CONFLICT",
    )
    # Another attempt of the same operation is a new upload of its own.
    second = another_attempt(upload)
    assert (await second.begin()).declaration.attempt_id == second.decl.attempt_id


async def test_rendered_prompts_compare_in_order_with_their_scopes(store: Store) -> None:
    decl = declaration()
    decl.rendered_prompts.add(prompt_id="a", version="1").scope.labels["tier"] = "x"
    decl.rendered_prompts.add(prompt_id="b", version="2")
    upload = Upload(store.runtime, decl)
    assert (await upload.begin()).declaration == decl
    assert await upload.begin() == await upload.begin()
    swapped = sd.SeedDeclaration()
    swapped.CopyFrom(decl)
    del swapped.rendered_prompts[:]
    swapped.rendered_prompts.extend([decl.rendered_prompts[1], decl.rendered_prompts[0]])
    await fails_with(
        store.runtime.BeginRunSeed(sd.BeginRunSeedRequest(declaration=swapped)),
        CONFLICT,
        "SEED_CONFLICT",
    )


async def test_appends_retry_exactly_and_conflict_otherwise(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    record = messages("first", "0")
    assert await upload.append(record) == "1"
    assert (await store.runtime.AppendRunSeed(upload.request(record))).id == "1"
    for changed in (
        messages("first", "0", b"[]"),
        prepared("first", "0"),
        messages("second", "0"),  # not the current end
        sd.SeedRecord(key="x", previous_id="7", messages=b"[]"),
    ):
        await fails_with(
            store.runtime.AppendRunSeed(upload.request(changed)), CONFLICT, "SEED_CONFLICT"
        )
    await upload.compiled()
    # History after compiled-start parts, and after publication, conflicts;
    # the exact retry of an accepted record still answers its ID.
    await fails_with(
        store.runtime.AppendRunSeed(upload.request(messages("late", "2"))),
        CONFLICT,
        "SEED_CONFLICT",
    )
    await upload.publish()
    await fails_with(
        store.runtime.AppendRunSeed(upload.request(prepared("after", "2"))),
        CONFLICT,
        "SEED_CONFLICT",
    )
    assert (await store.runtime.AppendRunSeed(upload.request(record))).id == "1"


async def test_an_open_literal_takes_only_its_next_part(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    await upload.append(part("a", "0", b"[", final=False))
    for record in (messages("m", "1"), prepared("p", "1")):
        await fails_with(
            store.runtime.AppendRunSeed(upload.request(record)), CONFLICT, "SEED_CONFLICT"
        )
    await fails_with(
        store.runtime.PublishRunSeed(upload.publication(prepared_bytes=1)),
        CONFLICT,
        "SEED_CONFLICT",
    )
    await upload.append(part("b", "1", b"]", final=True))
    await upload.compiled()
    await upload.publish()


async def test_publication_must_match_the_chain_and_is_one_per_run(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    await upload.history()
    await fails_with(
        store.runtime.PublishRunSeed(upload.publication()), CONFLICT, "SEED_CONFLICT"
    )  # no compiled start yet
    await upload.compiled(b"xyz")
    for wrong in (
        {"seed_end_id": "2"},
        {"end_id": "1"},
        {"prepared_bytes": 2},
        {"prepared_bytes": 0},
    ):
        await fails_with(
            store.runtime.PublishRunSeed(upload.publication(**wrong)), CONFLICT, "SEED_CONFLICT"
        )
    await upload.publish()
    await upload.publish()  # an exact retry
    rival = another_attempt(upload)
    await fails_with(rival.begin(), CONFLICT, "SEED_CONFLICT")
    await fails_with(
        store.runtime.PublishRunSeed(upload.publication(attempt_id="unknown")),
        NOT_FOUND,
        "SEED_NOT_FOUND",
    )


async def test_a_second_attempt_cannot_publish_after_the_first(store: Store) -> None:
    first = Upload(store.runtime, declaration())
    second = another_attempt(first)
    await first.begin()
    await second.begin()
    for upload in (first, second):
        await upload.history()
        await upload.compiled()
    await second.publish()
    await fails_with(first.publish(), CONFLICT, "SEED_CONFLICT")
    found = await store.runtime.FindRunPreparation(first.find())
    assert found.preparation.seed.declaration.attempt_id == second.decl.attempt_id


async def test_settling_abandons_an_attempt_for_ever(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    settled = await store.runtime.SettleRunPreparation(upload.settle())
    assert (settled.found, settled.HasField("preparation")) == (False, False)
    # A late first begin of the settled attempt cannot reopen it.
    await fails_with(upload.begin(), PRECONDITION, "PREPARATION_ABANDONED")
    # An attempt settled while uploading takes nothing more.
    live = another_attempt(upload)
    await live.begin()
    await live.history()
    assert not (await store.runtime.SettleRunPreparation(live.settle())).found
    await fails_with(live.compiled(), PRECONDITION, "PREPARATION_ABANDONED")
    await fails_with(live.publish(), PRECONDITION, "PREPARATION_ABANDONED")
    await fails_with(live.begin(), PRECONDITION, "PREPARATION_ABANDONED")
    # A third attempt may still publish; settling then returns it.
    third = await another_attempt(upload).published()
    settled = await store.runtime.SettleRunPreparation(upload.settle())
    assert settled.found
    assert settled.preparation.seed.declaration.attempt_id == third.decl.attempt_id


async def test_find_and_settle_refuse_another_operation(store: Store) -> None:
    upload = await Upload(store.runtime, declaration()).published()
    request = upload.find()
    request.operation.command_id = "other"
    await fails_with(store.runtime.FindRunPreparation(request), CONFLICT, "SEED_CONFLICT")
    settle = upload.settle()
    settle.operation.agent_id = "other"
    await fails_with(store.runtime.SettleRunPreparation(settle), CONFLICT, "SEED_CONFLICT")
    nothing = Upload(store.runtime, declaration())
    found = await store.runtime.FindRunPreparation(nothing.find())
    assert (found.found, found.HasField("preparation")) == (False, False)


async def test_a_next_turn_seed_captures_the_completed_source(store: Store) -> None:
    source = await store.root()
    await store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=source.record("tool")))
    await store.runtime.RecordRunTerminal(source.terminal_request())
    decl = declaration(
        session_id=source.start.session_id,
        kind=sd.SEED_KIND_NEXT_TURN,
        source_run_id=source.id,
        exclude_reasoning=True,
    )
    upload = Upload(store.runtime, decl)
    seed = await upload.begin()
    expected = sd.HistoryPrefix(
        run_id=source.id, end_id="3", exclude_system=True, exclude_reasoning=True
    )
    assert seed.source == expected
    wrong = sd.HistoryPrefix()
    wrong.CopyFrom(expected)
    wrong.end_id = "2"
    await fails_with(
        store.runtime.AppendRunSeed(upload.request(prefix("p", "0", wrong))),
        CONFLICT,
        "SEED_CONFLICT",
    )
    await upload.history()
    await upload.compiled()
    # The declared source must be in the chain before publication.
    await fails_with(upload.publish(), CONFLICT, "SEED_CONFLICT")
    await fails_with(
        store.runtime.AppendRunSeed(upload.request(prefix("p", "2", expected))),
        CONFLICT,
        "SEED_CONFLICT",
    )


async def test_a_continuation_names_a_record_of_its_suspended_source(store: Store) -> None:
    source = await store.root()
    await store.runtime.RecordRunSuspension(source.suspension_request())
    base = {
        "session_id": source.start.session_id,
        "kind": sd.SEED_KIND_CONTINUATION,
        "source_run_id": source.id,
    }
    for end_id in ("3", "01", "x"):
        await fails_with(
            Upload(store.runtime, declaration(source_end_id=end_id, **base)).begin(),
            INVALID,
            "INVALID_TRANSCRIPT_POSITION",
        )
    upload = Upload(store.runtime, declaration(source_end_id="2", **base))
    seed = await upload.begin()
    assert seed.source == sd.HistoryPrefix(run_id=source.id, end_id="2")
    assert await upload.append(prefix("p", "0", seed.source)) == "1"
    await upload.history()
    await fails_with(
        store.runtime.AppendRunSeed(upload.request(prefix("q", "2", seed.source))),
        CONFLICT,
        "SEED_CONFLICT",
    )
    await upload.compiled()
    await upload.publish()


async def test_a_source_must_exist_match_and_be_in_the_right_state(store: Store) -> None:
    running = await store.root()
    session = running.start.session_id

    def begin(**fields: object) -> object:
        decl = declaration(session_id=session, kind=sd.SEED_KIND_NEXT_TURN, **fields)
        return Upload(store.runtime, decl).begin()

    await fails_with(begin(source_run_id="missing"), NOT_FOUND, "RUN_NOT_FOUND")
    await fails_with(begin(source_run_id=running.id), INVALID, "CONTRACT_VALIDATION", "has status")
    await fails_with(
        begin(source_run_id=running.id, agent_id="other"),
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )
    other_session = await store.root()
    await fails_with(
        Upload(
            store.runtime,
            declaration(
                session_id=other_session.start.session_id,
                kind=sd.SEED_KIND_NEXT_TURN,
                source_run_id=running.id,
            ),
        ).begin(),
        PRECONDITION,
        "RUN_RECORD_OWNER_MISMATCH",
    )


async def test_a_seed_cannot_reserve_an_existing_run(store: Store) -> None:
    run = await store.one_shot()
    await fails_with(
        Upload(store.runtime, declaration(run_id=run.id)).begin(), CONFLICT, "RUN_CONFLICT"
    )


async def test_a_sessionful_seed_needs_its_session(store: Store) -> None:
    await fails_with(
        Upload(store.runtime, declaration(session_id=unique("nobody"))).begin(),
        NOT_FOUND,
        "SESSION_NOT_FOUND",
    )
    session = await store.session()
    upload = await Upload(store.runtime, declaration(session_id=session)).published()
    await store.end(session)
    # An ended session keeps its seeds; a purged one loses them.
    await store.runtime.LoadRunSeed(sd.LoadRunSeedRequest(run_id=upload.run_id, end_id="1"))
    await store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session))
    await fails_with(
        store.runtime.LoadRunSeed(sd.LoadRunSeedRequest(run_id=upload.run_id, end_id="1")),
        NOT_FOUND,
        "SEED_NOT_FOUND",
    )
    await fails_with(
        Upload(store.runtime, declaration(session_id=session)).begin(),
        PRECONDITION,
        "SESSION_PURGED",
    )


async def test_reads_need_a_publication_and_its_exact_ends(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    await upload.history()
    load = sd.LoadRunSeedRequest(run_id=upload.run_id, end_id="1")
    # goa-ai's store answers "not found" while an attempt is unpublished.
    await fails_with(store.runtime.LoadRunSeed(load), NOT_FOUND, "SEED_NOT_FOUND")
    await upload.compiled()
    await upload.publish()
    await store.runtime.LoadRunSeed(load)
    await fails_with(
        store.runtime.LoadRunSeed(sd.LoadRunSeedRequest(run_id=upload.run_id, end_id="2")),
        CONFLICT,
        "SEED_CONFLICT",
    )
    seed_list = sd.ListRunSeedRecordsRequest(run_id=upload.run_id, end_id="1", limit=0)
    await fails_with(
        store.runtime.ListRunSeedRecords(seed_list), INVALID, "INVALID_TRANSCRIPT_POSITION"
    )
    for after in ("2", "0", "01", "-1", "x"):
        seed_list = sd.ListRunSeedRecordsRequest(
            run_id=upload.run_id, end_id="1", after_id=after, limit=5
        )
        await fails_with(
            store.runtime.ListRunSeedRecords(seed_list), INVALID, "INVALID_TRANSCRIPT_POSITION"
        )
    prep_list = sd.ListRunPreparationRecordsRequest(run_id=upload.run_id, end_id="1", limit=5)
    await fails_with(store.runtime.ListRunPreparationRecords(prep_list), CONFLICT, "SEED_CONFLICT")
    prep_list.end_id, prep_list.after_id = "2", "1"  # history is not in range
    await fails_with(
        store.runtime.ListRunPreparationRecords(prep_list), INVALID, "INVALID_TRANSCRIPT_POSITION"
    )
    await fails_with(
        store.runtime.ListRunPreparationRecords(
            sd.ListRunPreparationRecordsRequest(run_id="missing", end_id="2", limit=1)
        ),
        NOT_FOUND,
        "SEED_NOT_FOUND",
    )


async def test_seed_pages_hold_at_most_512_records(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    for _ in range(513):
        await upload.history(b"[]")
    await upload.compiled()
    await upload.publish()
    request = sd.ListRunSeedRecordsRequest(run_id=upload.run_id, end_id="513", limit=1000)
    first = await store.runtime.ListRunSeedRecords(request)
    assert (len(first.records), first.next_cursor) == (512, "512")
    request.after_id = first.next_cursor
    second = await store.runtime.ListRunSeedRecords(request)
    assert ([r.id for r in second.records], second.next_cursor) == (["513"], "")


async def test_seed_pages_stop_before_the_byte_budget(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    big = b'"' + b"x" * 600_000 + b'"'
    for _ in range(3):
        await upload.history(big)
    await upload.compiled()
    await upload.publish()
    request = sd.ListRunSeedRecordsRequest(run_id=upload.run_id, end_id="3", limit=10)
    first = await store.runtime.ListRunSeedRecords(request)
    # Messages count as raw JSON: two of 600,002 bytes exceed 1,000,045, one a page.
    assert ([r.id for r in first.records], first.next_cursor) == (["1"], "1")
