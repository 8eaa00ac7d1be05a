"""Seed commands racing on one server (§7): one publication wins per run, one
record per position, settlements and publications never both win. On
PostgreSQL the calls run on separate connections of the pool at once."""

from __future__ import annotations

import asyncio
import collections

from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import session_admin_pb2 as sa
from tests.secured import dump_database
from tests.seeds import Upload, another_attempt, declaration, messages
from tests.support import Store, outcome

N = 16


async def _ready(upload: Upload) -> Upload:
    await upload.begin()
    await upload.history()
    await upload.compiled()
    return upload


async def test_racing_publications_of_one_run_have_one_winner(store: Store) -> None:
    first = Upload(store.runtime, declaration())
    uploads = [first] + [another_attempt(first) for _ in range(N - 1)]
    for upload in uploads:
        await _ready(upload)
    outcomes = await asyncio.gather(*(outcome(u.publish()) for u in uploads))
    assert collections.Counter(outcomes) == {"ok": 1, "SEED_CONFLICT": N - 1}
    winner = uploads[outcomes.index("ok")]
    found = await store.runtime.FindRunPreparation(first.find())
    assert found.preparation.seed.declaration.attempt_id == winner.decl.attempt_id


async def test_racing_appends_at_one_position_have_one_winner(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    requests = [upload.request(messages(f"k{index}", "0")) for index in range(N)]
    outcomes = await asyncio.gather(*(outcome(store.runtime.AppendRunSeed(r)) for r in requests))
    assert collections.Counter(outcomes) == {"ok": 1, "SEED_CONFLICT": N - 1}
    identical = upload.request(messages("same", "1"))
    ids = await asyncio.gather(*(store.runtime.AppendRunSeed(identical) for _ in range(N)))
    assert {response.id for response in ids} == {"2"}


async def test_racing_begins_of_other_operations_record_one(store: Store) -> None:
    run_id = declaration().run_id
    decls = [declaration(run_id=run_id) for _ in range(N)]
    outcomes = await asyncio.gather(*(outcome(Upload(store.runtime, d).begin()) for d in decls))
    assert collections.Counter(outcomes) == {"ok": 1, "SEED_CONFLICT": N - 1}


async def test_settlement_and_publication_never_both_win(store: Store) -> None:
    for _ in range(4):
        upload = await _ready(Upload(store.runtime, declaration()))
        settles = [upload.settle() for _ in range(N // 2)]
        results = await asyncio.gather(
            outcome(upload.publish()),
            *(store.runtime.SettleRunPreparation(request) for request in settles),
        )
        published, answers = results[0], results[1:]
        found = await store.runtime.FindRunPreparation(upload.find())
        if published == "ok":
            assert found.found
        else:
            assert published == "PREPARATION_ABANDONED"
            assert not found.found
            assert not any(answer.found for answer in answers)
        for answer in answers:
            assert not answer.found or answer.preparation == found.preparation


async def test_identical_begins_return_one_seed(store: Store) -> None:
    upload = Upload(store.runtime, declaration())
    seeds = await asyncio.gather(*(upload.begin() for _ in range(N)))
    assert all(seed == seeds[0] for seed in seeds)
    assert isinstance(seeds[0], sd.RunSeed)


async def test_a_purge_racing_appends_leaves_no_seed_row_behind(
    store: Store, database_url: str
) -> None:
    for _ in range(3):
        session = await store.session()
        uploads = [Upload(store.runtime, declaration(session_id=session)) for _ in range(4)]
        for upload in uploads:
            await upload.begin()
        await store.end(session)

        async def keep_appending(upload: Upload) -> None:
            for _ in range(6):
                if await outcome(upload.history()) != "ok":
                    return

        await asyncio.gather(
            *(keep_appending(upload) for upload in uploads),
            store.admin.PurgeSession(sa.PurgeSessionRequest(session_id=session)),
        )
        dump = await dump_database(database_url)
        runs = {upload.run_id for upload in uploads}
        for table in ("seed_operations", "seed_attempts", "seed_records"):
            left = [row for row in dump[table] if row[1] in runs]
            assert left == [], (table, left)
