"""The seed limits measure goa-ai's Go JSON encoding (docs/limits.md): the
length of the exact text a Go worker's ``json.Marshal`` writes."""

from __future__ import annotations

from runstore.contract.seeds import (
    MAX_SEED_PAGE_BYTES,
    HistoryPrefix,
    LiteralPart,
    RenderedPrompt,
    SeedAppend,
    SeedDeclaration,
    SeedKind,
    SeedRecord,
    append_size,
    declaration_size,
    page_size,
    record_size,
)


def test_the_page_limit_is_goa_ais() -> None:
    assert MAX_SEED_PAGE_BYTES == 1_000_045


def test_an_append_of_raw_messages_is_compacted_and_html_escaped() -> None:
    command = SeedAppend(
        "r", "a", SeedRecord(key="k<", previous_id="0", messages=b' [ "<a>",\n 1 ] ')
    )
    go = (
        '{"RunID":"r","AttemptID":"a","Record":{"ID":"","Key":"k\\u003c","PreviousID":"0",'
        '"Messages":["\\u003ca\\u003e",1],"Prefix":null,"Prepared":null}}'
    )
    assert append_size(command) == len(go)


def test_a_literal_part_is_base64_and_named_as_goa_ai_tags_it() -> None:
    record = SeedRecord(key="k", previous_id="1", id="2", literal_part=LiteralPart(b"abcd", False))
    go = (
        '{"ID":"2","Key":"k","PreviousID":"1","Messages":null,'
        '"literal_part":{"Data":"YWJjZA==","Final":false},"Prefix":null,"Prepared":null}'
    )
    assert record_size(record) == len(go)


def test_a_prefix_and_prepared_bytes() -> None:
    prefix = SeedRecord(key="k", previous_id="0", prefix=HistoryPrefix("s", "3", True, False))
    go_prefix = (
        '{"ID":"","Key":"k","PreviousID":"0","Messages":null,'
        '"Prefix":{"RunID":"s","EndID":"3","ExcludeSystem":true,"ExcludeReasoning":false},'
        '"Prepared":null}'
    )
    assert record_size(prefix) == len(go_prefix)
    compiled = SeedRecord(key="k", previous_id="0", prepared=b"\x00\x01")
    go_compiled = (
        '{"ID":"","Key":"k","PreviousID":"0","Messages":null,"Prefix":null,"Prepared":"AAE="}'
    )
    assert record_size(compiled) == len(go_compiled)


def test_a_declaration_with_prompts_and_sorted_labels() -> None:
    declaration = SeedDeclaration(
        agent_id="ag",
        run_id="r",
        session_id="",
        command_id="c",
        attempt_id="a",
        kind=SeedKind.LITERAL,
        rendered_prompts=(RenderedPrompt("p", "1", "s", {"b": "2", "a": "é"}),),
    )
    go = (
        '{"AgentID":"ag","RunID":"r","SessionID":"","CommandID":"c","AttemptID":"a",'
        '"Kind":"literal","SourceRunID":"","SourceEndID":"","ExcludeReasoning":false,'
        '"RenderedPrompts":[{"PromptID":"p","Version":"1","Scope":{"SessionID":"s",'
        '"Labels":{"a":"é","b":"2"}}}]}'
    )
    assert declaration_size(declaration) == len(go.encode())


def test_a_page_counts_its_records_and_cursor() -> None:
    assert page_size([], "") == len('{"Records":null,"NextCursor":""}')
    assert page_size([10, 20], "7") == len('{"Records":[],"NextCursor":"7"}') + 30 + 1
