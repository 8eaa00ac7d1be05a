"""Malformed seed commands and the two seed limits (docs/limits.md): each is
INVALID_ARGUMENT naming its field, and nothing is written."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from runstore.contract.seeds import (
    MAX_SEED_COMMAND_BYTES,
    SeedAppend,
    SeedRecord,
    append_size,
)
from runstore.v1 import seeds_pb2 as sd
from tests.seeds import Upload, declaration, messages, operation_of
from tests.support import Store, fails, fails_with

INVALID = grpc.StatusCode.INVALID_ARGUMENT

BAD_DECLARATIONS: list[tuple[dict[str, Any], str]] = [
    ({"agent_id": ""}, "declaration.agent_id"),
    ({"command_id": ""}, "declaration.command_id"),
    ({"attempt_id": ""}, "declaration.attempt_id"),
    ({"kind": sd.SEED_KIND_UNSPECIFIED}, "declaration.kind"),
    ({"kind": 99}, "declaration.kind"),
    ({"source_run_id": "s"}, "declaration.source_run_id"),
    ({"source_end_id": "1"}, "declaration.source_end_id"),
    ({"exclude_reasoning": True}, "declaration.exclude_reasoning"),
    ({"kind": sd.SEED_KIND_NEXT_TURN, "source_run_id": "s"}, "declaration.session_id"),
    (
        {"kind": sd.SEED_KIND_NEXT_TURN, "session_id": "x", "source_run_id": ""},
        "declaration.source_run_id",
    ),
    (
        {"kind": sd.SEED_KIND_NEXT_TURN, "session_id": "x", "source_run_id": "s",
         "source_end_id": "2"},
        "declaration.source_end_id",
    ),
    (
        {"kind": sd.SEED_KIND_CONTINUATION, "session_id": "x", "source_run_id": "s"},
        "declaration.source_end_id",
    ),
    (
        {"kind": sd.SEED_KIND_CONTINUATION, "session_id": "x", "source_run_id": "s",
         "source_end_id": "2", "exclude_reasoning": True},
        "declaration.exclude_reasoning",
    ),
    ({"agent_id": "a" * 1025}, "declaration.agent_id"),
    (
        {"rendered_prompts": [sd.RenderedPrompt(prompt_id="p" * 1000, version="v")] * 1000},
        "declaration",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "field"), BAD_DECLARATIONS)
async def test_a_malformed_declaration_names_its_field_and_reserves_nothing(
    store: Store, fields: dict[str, Any], field: str
) -> None:
    bad = declaration(**fields)
    failure = await fails_with(Upload(store.runtime, bad).begin(), INVALID, "CONTRACT_VALIDATION")
    assert failure.metadata["field"] == field
    # Nothing was recorded: another operation may still take the run ID.
    good = declaration(run_id=bad.run_id)
    await Upload(store.runtime, good).begin()


def _literal_of_size(upload: Upload, size: int) -> bytes:
    """A JSON string literal whose append command measures ``size`` bytes."""
    base = append_size(
        SeedAppend(upload.run_id, str(upload.decl.attempt_id), SeedRecord("k", "0", messages=b'""'))
    )
    return b'"' + b"x" * (size - base) + b'"'


async def test_the_command_limit_is_inclusive_and_a_larger_append_writes_nothing(
    store: Store,
) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    too_big = messages("k", "0", _literal_of_size(upload, MAX_SEED_COMMAND_BYTES + 1))
    failure = await fails_with(
        store.runtime.AppendRunSeed(upload.request(too_big)),
        INVALID,
        "CONTRACT_VALIDATION",
        f"seed command size {MAX_SEED_COMMAND_BYTES + 1} exceeds",
    )
    assert failure.metadata["field"] == "record"
    at_limit = messages("k", "0", _literal_of_size(upload, MAX_SEED_COMMAND_BYTES))
    assert (await store.runtime.AppendRunSeed(upload.request(at_limit))).id == "1"


BAD_RECORDS: list[tuple[sd.SeedRecord, str]] = [
    (sd.SeedRecord(key="k", previous_id="0"), "record"),
    (sd.SeedRecord(key="k", previous_id="0", messages=b""), "record"),
    (sd.SeedRecord(key="k", previous_id="0", prepared=b""), "record"),
    (sd.SeedRecord(id="1", key="k", previous_id="0", messages=b"[]"), "record.id"),
    (sd.SeedRecord(key="", previous_id="0", messages=b"[]"), "record.key"),
    (sd.SeedRecord(key="k", previous_id="", messages=b"[]"), "record.previous_id"),
    (
        sd.SeedRecord(key="k", previous_id="0", literal_part=sd.LiteralPart(final=True)),
        "record.literal_part.data",
    ),
    (sd.SeedRecord(key="k", previous_id="0", messages=b"[NaN]"), "record.messages"),
    (sd.SeedRecord(key="k", previous_id="0", messages=b"[] []"), "record.messages"),
    (sd.SeedRecord(key="k", previous_id="0", messages=b"  "), "record.messages"),
    (sd.SeedRecord(key="k", previous_id="0", messages=b'["\xff"]'), "record.messages"),
]


@pytest.mark.parametrize(("record", "field"), BAD_RECORDS)
async def test_a_malformed_append_names_its_field_and_writes_nothing(
    store: Store, record: sd.SeedRecord, field: str
) -> None:
    upload = Upload(store.runtime, declaration())
    await upload.begin()
    failure = await fails(store.runtime.AppendRunSeed(upload.request(record)))
    assert (failure.code, failure.reason, failure.metadata.get("field")) == (
        INVALID,
        "CONTRACT_VALIDATION",
        field,
    )
    assert await upload.history() == "1"


async def test_bad_operations_and_attempts_name_their_field(store: Store) -> None:
    decl = declaration()
    operation = operation_of(decl)
    operation.command_id = ""
    failure = await fails_with(
        store.runtime.FindRunPreparation(sd.FindRunPreparationRequest(operation=operation)),
        INVALID,
        "CONTRACT_VALIDATION",
    )
    assert failure.metadata["field"] == "operation.command_id"
    settle = sd.SettleRunPreparationRequest(operation=operation_of(decl), attempt_id="")
    failure = await fails_with(
        store.runtime.SettleRunPreparation(settle), INVALID, "CONTRACT_VALIDATION"
    )
    assert failure.metadata["field"] == "attempt_id"
    # Neither settled anything: the attempt can still be begun.
    await Upload(store.runtime, decl).begin()
