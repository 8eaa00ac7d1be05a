"""The pure transcript validators (§13.4)."""

from __future__ import annotations

from collections.abc import Sequence

from runstore.contract.transcript.model import (
    _PART_KINDS,
    Message,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    TranscriptValidationError,
)


def _tool_uses(message: Message) -> list[ToolUsePart]:
    return [part for part in message.parts if isinstance(part, ToolUsePart)]


def _tool_results(message: Message) -> list[ToolResultPart]:
    return [part for part in message.parts if isinstance(part, ToolResultPart)]


def _nil(index: int) -> TranscriptValidationError:
    return TranscriptValidationError(f"transcript: message[{index}] is nil")


def _check_answer(uses: list[ToolUsePart], group: str, answer: Message, answer_index: int) -> None:
    """Rule 5: the user answer holds exactly the group's tool results, by ID."""
    where = f"transcript: user message[{answer_index}]"
    results = _tool_results(answer)
    if not results:
        raise TranscriptValidationError(
            f"{where} must contain tool_result parts for the tool_use of {group}"
        )
    if len(results) != len(uses):
        raise TranscriptValidationError(
            f"{where} must contain exactly {len(uses)} tool_result parts for {group}, "
            f"got {len(results)}"
        )
    result_ids: set[str] = set()
    for result in results:
        if not result.tool_use_id:
            raise TranscriptValidationError(f"{where} has a tool_result with an empty tool_use_id")
        if result.tool_use_id in result_ids:
            raise TranscriptValidationError(
                f"{where} repeats tool_result tool_use_id {result.tool_use_id!r}"
            )
        result_ids.add(result.tool_use_id)
    use_ids = {use.id for use in uses}
    missing = sorted(use_ids - result_ids)
    if missing:
        raise TranscriptValidationError(
            f"{where} is missing tool_result for tool_use id {missing[0]!r} of {group}"
        )
    extra = sorted(result_ids - use_ids)
    if extra:  # unreachable with equal counts and unique IDs; kept for clarity
        raise TranscriptValidationError(
            f"{where} has tool_result id {extra[0]!r} matching no tool_use of {group}"
        )


def validate_planner_transcript(messages: Sequence[Message | None]) -> None:
    """Checks the tool-loop invariants of §13.4 before planning resumes.

    Consecutive assistant messages form a group; a group with tool uses must be
    answered by the very next message, a user message carrying exactly one
    tool_result per tool_use ID. A tool_result anywhere else is an error. Pure: the
    input is never modified.

    Raises:
        TranscriptValidationError: the first broken rule, naming the message index.
    """
    index = 0
    count = len(messages)
    while index < count:
        message = messages[index]
        if message is None:
            raise _nil(index)
        if message.role != "assistant":
            if _tool_results(message):
                raise TranscriptValidationError(
                    f"transcript: {message.role} message[{index}] contains tool_result parts "
                    "that do not answer an immediately preceding assistant tool_use group"
                )
            index += 1
            continue
        start = index
        uses: list[ToolUsePart] = []
        while index < count:
            member = messages[index]
            if member is None or member.role != "assistant":
                break
            uses.extend(_tool_uses(member))
            index += 1
        if not uses:
            continue
        group = (
            f"assistant message[{start}]"
            if index - start == 1
            else f"assistant messages[{start}..{index - 1}]"
        )
        use_ids: set[str] = set()
        for use in uses:
            if not use.id:
                raise TranscriptValidationError(
                    f"transcript: {group} has a tool_use with an empty id"
                )
            if use.id in use_ids:
                raise TranscriptValidationError(
                    f"transcript: {group} repeats tool_use id {use.id!r}"
                )
            use_ids.add(use.id)
        if index >= count:
            raise TranscriptValidationError(
                f"transcript: {group} with tool_use must be followed by a user tool_result "
                "message, but the transcript ends"
            )
        answer = messages[index]
        if answer is None:
            raise _nil(index)
        if answer.role != "user":
            raise TranscriptValidationError(
                f"transcript: {group} with tool_use must be followed immediately by a user "
                f"tool_result message, not {answer.role} message[{index}]"
            )
        _check_answer(uses, group, answer, index)
        index += 1


def validate_bedrock(messages: Sequence[Message | None], thinking_enabled: bool) -> None:
    """Adds Bedrock's thinking rule to a canonically valid transcript (§13.4).

    With thinking enabled, every non-null assistant message holding a tool_use must
    start with a ThinkingPart (per message, not per group). Canonical validation is
    the caller's job. Pure: the input is never modified.

    Raises:
        TranscriptValidationError: the first assistant message breaking the rule.
    """
    if not thinking_enabled:
        return
    for index, message in enumerate(messages):
        if message is None or message.role != "assistant" or not _tool_uses(message):
            continue
        if not isinstance(message.parts[0], ThinkingPart):
            kinds = ", ".join(_PART_KINDS.get(type(part), "?") for part in message.parts)
            raise TranscriptValidationError(
                f"bedrock: assistant message[{index}] with tool_use must start with thinking "
                f"(parts: {kinds})"
            )
