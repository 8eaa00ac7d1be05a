"""Seeds and preparations to and from their ``runstore.v1`` messages (§9.7),
used alike by the server's servicer and the client."""

from __future__ import annotations

from typing import Final

from runstore.contract.seeds import (
    HistoryPrefix,
    LiteralPart,
    PreparationOperation,
    RenderedPrompt,
    RunPreparation,
    RunSeed,
    SeedDeclaration,
    SeedKind,
    SeedPage,
    SeedRecord,
)
from runstore.v1 import seeds_pb2 as pb

KIND_TO_WIRE: Final = {
    None: pb.SEED_KIND_UNSPECIFIED,
    SeedKind.LITERAL: pb.SEED_KIND_LITERAL,
    SeedKind.NEXT_TURN: pb.SEED_KIND_NEXT_TURN,
    SeedKind.CONTINUATION: pb.SEED_KIND_CONTINUATION,
}
KIND_FROM_WIRE: Final = {value: kind for kind, value in KIND_TO_WIRE.items()}


def declaration_to_wire(d: SeedDeclaration) -> pb.SeedDeclaration:
    return pb.SeedDeclaration(
        agent_id=d.agent_id,
        run_id=d.run_id,
        session_id=d.session_id,
        command_id=d.command_id,
        attempt_id=d.attempt_id,
        kind=KIND_TO_WIRE[d.kind],
        source_run_id=d.source_run_id,
        source_end_id=d.source_end_id,
        exclude_reasoning=d.exclude_reasoning,
        rendered_prompts=[
            pb.RenderedPrompt(
                prompt_id=p.prompt_id,
                version=p.version,
                scope=(
                    pb.PromptScope(session_id=p.scope_session_id, labels=dict(p.scope_labels))
                    if p.scope_session_id or p.scope_labels
                    else None
                ),
            )
            for p in d.rendered_prompts
        ],
    )


def declaration_from_wire(m: pb.SeedDeclaration) -> SeedDeclaration:
    """An unknown kind number reads as unspecified (refused by every command)."""
    return SeedDeclaration(
        agent_id=m.agent_id,
        run_id=m.run_id,
        session_id=m.session_id,
        command_id=m.command_id,
        attempt_id=m.attempt_id,
        kind=KIND_FROM_WIRE.get(m.kind),
        source_run_id=m.source_run_id,
        source_end_id=m.source_end_id,
        exclude_reasoning=m.exclude_reasoning,
        rendered_prompts=tuple(
            RenderedPrompt(
                prompt_id=p.prompt_id,
                version=p.version,
                scope_session_id=p.scope.session_id,
                scope_labels=dict(p.scope.labels),
            )
            for p in m.rendered_prompts
        ),
    )


def prefix_to_wire(p: HistoryPrefix | None) -> pb.HistoryPrefix | None:
    if p is None:
        return None
    return pb.HistoryPrefix(
        run_id=p.run_id,
        end_id=p.end_id,
        exclude_system=p.exclude_system,
        exclude_reasoning=p.exclude_reasoning,
    )


def prefix_from_wire(m: pb.HistoryPrefix) -> HistoryPrefix:
    return HistoryPrefix(m.run_id, m.end_id, m.exclude_system, m.exclude_reasoning)


def seed_to_wire(seed: RunSeed) -> pb.RunSeed:
    return pb.RunSeed(
        declaration=declaration_to_wire(seed.declaration),
        source=prefix_to_wire(seed.source),
        end_id=seed.end_id,
    )


def seed_from_wire(m: pb.RunSeed) -> RunSeed:
    return RunSeed(
        declaration=declaration_from_wire(m.declaration),
        source=prefix_from_wire(m.source) if m.HasField("source") else None,
        end_id=m.end_id,
    )


def record_to_wire(r: SeedRecord) -> pb.SeedRecord:
    message = pb.SeedRecord(id=r.id, key=r.key, previous_id=r.previous_id)
    if r.literal_part is not None:
        message.literal_part.CopyFrom(
            pb.LiteralPart(data=r.literal_part.data, final=r.literal_part.final)
        )
    elif r.prefix is not None:
        message.prefix.CopyFrom(
            pb.HistoryPrefix(
                run_id=r.prefix.run_id,
                end_id=r.prefix.end_id,
                exclude_system=r.prefix.exclude_system,
                exclude_reasoning=r.prefix.exclude_reasoning,
            )
        )
    elif r.prepared:
        message.prepared = r.prepared
    elif r.messages:
        message.messages = r.messages
    return message


def record_from_wire(m: pb.SeedRecord) -> SeedRecord:
    """The set member of the ``body`` oneof; an empty bytes member counts as unset."""
    body = m.WhichOneof("body")
    return SeedRecord(
        key=m.key,
        previous_id=m.previous_id,
        id=m.id,
        messages=m.messages if body == "messages" else b"",
        literal_part=(
            LiteralPart(m.literal_part.data, m.literal_part.final)
            if body == "literal_part"
            else None
        ),
        prefix=prefix_from_wire(m.prefix) if body == "prefix" else None,
        prepared=m.prepared if body == "prepared" else b"",
    )


def operation_to_wire(o: PreparationOperation) -> pb.PreparationOperation:
    return pb.PreparationOperation(
        agent_id=o.agent_id, run_id=o.run_id, session_id=o.session_id, command_id=o.command_id
    )


def operation_from_wire(m: pb.PreparationOperation) -> PreparationOperation:
    return PreparationOperation(m.agent_id, m.run_id, m.session_id, m.command_id)


def preparation_to_wire(p: RunPreparation | None) -> pb.RunPreparation | None:
    if p is None:
        return None
    return pb.RunPreparation(
        seed=seed_to_wire(p.seed), end_id=p.end_id, prepared_bytes=p.prepared_bytes
    )


def preparation_from_wire(m: pb.RunPreparation) -> RunPreparation:
    return RunPreparation(seed_from_wire(m.seed), m.end_id, m.prepared_bytes)


def page_from_wire(records: list[pb.SeedRecord], next_cursor: str) -> SeedPage:
    return SeedPage(tuple(record_from_wire(r) for r in records), next_cursor)
