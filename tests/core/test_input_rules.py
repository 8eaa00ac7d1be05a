"""The id, key and text rules (D8) and caller JSON, as pure functions."""

from __future__ import annotations

import pytest

from runstore.contract.errors import ValidationError
from runstore.contract.namespaces import DEFAULT
from runstore.server.core import input_rules
from runstore.server.core.model import RecordDraft, RunStart


@pytest.mark.parametrize(
    "value", ["", "a", "x" * 1024, "é" * 512, "🙂" * 256, "line\nbreak", "\u2028"]
)
def test_ids_up_to_1024_bytes_without_nul_are_accepted(value: str) -> None:
    input_rules.check_id(value, "run_id")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x" * 1025, "run_id is longer than 1024 bytes"),
        ("é" * 512 + "x", "run_id is longer than 1024 bytes"),
        ("🙂" * 257, "run_id is longer than 1024 bytes"),
        ("\x00", "run_id must not contain U+0000"),
        ("a\x00b", "run_id must not contain U+0000"),
    ],
)
def test_ids_over_1024_bytes_or_with_nul_are_refused_naming_the_field(
    value: str, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        input_rules.check_id(value, "run_id")
    assert (caught.value.message, caught.value.field) == (message, "run_id")


def test_a_start_checks_its_ids_then_labels_then_each_record() -> None:
    record = RecordDraft("k", "r", "a", "s", "", "t", b"{}", 0, DEFAULT)
    run = RunStart(run_id="r", agent_id="a", session_id="s", labels={"x": "y"})
    input_rules.check_run_start(run, started=record, canceled=None)
    cases = {
        "run.predecessor_run_id": RunStart(run_id="r", predecessor_run_id="\x00"),
        "run.labels.key": RunStart(run_id="r", labels={"\x00": "v"}),
        "run.labels.value": RunStart(run_id="r", labels={"k": "\x00"}),
    }
    for field, bad in cases.items():
        with pytest.raises(ValidationError) as caught:
            input_rules.check_run_start(bad)
        assert caught.value.field == field
    long_turn = RecordDraft("k", "r", "a", "s", "t" * 1025, "t", b"{}", 0, DEFAULT)
    with pytest.raises(ValidationError) as caught:
        input_rules.check_run_start(run, started=long_turn)
    assert caught.value.field == "started.turn_id"
    # Types are text, not ids: long is fine, U+0000 is not.
    input_rules.check_record(
        RecordDraft("k", "r", "a", "s", "", "t" * 5000, b"{}", 0, DEFAULT), "record"
    )
    with pytest.raises(ValidationError) as caught:
        input_rules.check_record(
            RecordDraft("k", "r", "a", "s", "", "t\x00", b"{}", 0, DEFAULT), "record"
        )
    assert caught.value.field == "record.type"


def test_caller_json_too_deep_is_exceeded_max_depth() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(ValidationError) as caught:
        input_rules.decode_json(deep, "events[0].data")
    assert caught.value.message == "events[0].data: json: exceeded max depth"
    assert caught.value.field == "events[0].data"
    assert input_rules.decode_json(b'{"a":[[1]]}', "f") == {"a": [[1]]}
    for bad in (b"{", b"\xff", b""):
        with pytest.raises(ValidationError, match="f must be JSON"):
            input_rules.decode_json(bad, "f")
    with pytest.raises(ValidationError, match=r"^custom$"):
        input_rules.decode_json(b"{", "f", "custom")
