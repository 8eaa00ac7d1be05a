"""Building seeds under test (docs/contract.md §9.7): declarations, records and
a whole upload, over the ``runstore.v1`` stubs of a ``tests.support.Store``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import seeds_pb2 as sd
from tests.support import run_start, started_record, unique

MESSAGES = b'[{"role":"user","parts":[{"text":"hello"}]}]'


def declaration(**overrides: Any) -> sd.SeedDeclaration:
    """A literal, sessionless declaration with fresh IDs, unless overridden."""
    fields: dict[str, Any] = {
        "agent_id": "agent",
        "run_id": unique("seeded"),
        "command_id": unique("command"),
        "attempt_id": unique("attempt"),
        "kind": sd.SEED_KIND_LITERAL,
    }
    fields.update(overrides)
    return sd.SeedDeclaration(**fields)


def operation_of(d: sd.SeedDeclaration) -> sd.PreparationOperation:
    return sd.PreparationOperation(
        agent_id=d.agent_id, run_id=d.run_id, session_id=d.session_id, command_id=d.command_id
    )


def messages(key: str, previous: str, data: bytes = MESSAGES) -> sd.SeedRecord:
    return sd.SeedRecord(key=key, previous_id=previous, messages=data)


def part(key: str, previous: str, data: bytes, final: bool) -> sd.SeedRecord:
    return sd.SeedRecord(
        key=key, previous_id=previous, literal_part=sd.LiteralPart(data=data, final=final)
    )


def prepared(key: str, previous: str, data: bytes = b"compiled") -> sd.SeedRecord:
    return sd.SeedRecord(key=key, previous_id=previous, prepared=data)


def prefix(key: str, previous: str, source: sd.HistoryPrefix) -> sd.SeedRecord:
    return sd.SeedRecord(key=key, previous_id=previous, prefix=source)


@dataclass
class Upload:
    """One attempt's upload through ``runtime``: what it appended so far."""

    runtime: rs_grpc.RuntimeStoreStub
    decl: sd.SeedDeclaration
    end: int = 0
    seed_end: int = 0
    prepared_bytes: int = 0
    keys: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.decl.run_id)

    async def begin(self) -> sd.RunSeed:
        response = await self.runtime.BeginRunSeed(sd.BeginRunSeedRequest(declaration=self.decl))
        return response.seed

    def request(self, record: sd.SeedRecord) -> sd.AppendRunSeedRequest:
        return sd.AppendRunSeedRequest(
            run_id=self.decl.run_id, attempt_id=self.decl.attempt_id, record=record
        )

    async def append(self, record: sd.SeedRecord) -> str:
        record_id = (await self.runtime.AppendRunSeed(self.request(record))).id
        self.end = int(record_id)
        if record.WhichOneof("body") == "prepared":
            self.prepared_bytes += len(record.prepared)
        else:
            self.seed_end = self.end
        self.keys.append(record.key)
        return str(record_id)

    async def history(self, data: bytes = MESSAGES) -> str:
        return await self.append(messages(unique("m"), str(self.end), data))

    async def compiled(self, data: bytes = b"compiled") -> str:
        return await self.append(prepared(unique("p"), str(self.end), data))

    def publication(self, **overrides: Any) -> sd.PublishRunSeedRequest:
        fields: dict[str, Any] = {
            "run_id": self.decl.run_id,
            "attempt_id": self.decl.attempt_id,
            "seed_end_id": str(self.seed_end),
            "end_id": str(self.end),
            "prepared_bytes": self.prepared_bytes,
        }
        fields.update(overrides)
        return sd.PublishRunSeedRequest(**fields)

    async def publish(self) -> None:
        await self.runtime.PublishRunSeed(self.publication())

    async def published(self, history: int = 1) -> Upload:
        """Begun, ``history`` literals and one compiled part appended, published."""
        await self.begin()
        for _ in range(history):
            await self.history()
        await self.compiled()
        await self.publish()
        return self

    def settle(self, attempt_id: str | None = None) -> sd.SettleRunPreparationRequest:
        return sd.SettleRunPreparationRequest(
            operation=operation_of(self.decl),
            attempt_id=self.decl.attempt_id if attempt_id is None else attempt_id,
        )

    def find(self) -> sd.FindRunPreparationRequest:
        return sd.FindRunPreparationRequest(operation=operation_of(self.decl))


def another_attempt(upload: Upload) -> Upload:
    """The same operation's next attempt."""
    decl = sd.SeedDeclaration()
    decl.CopyFrom(upload.decl)
    decl.attempt_id = unique("attempt")
    return Upload(upload.runtime, decl)


async def synchronous_request(
    runtime: rs_grpc.RuntimeStoreStub, **fields: Any
) -> sd.StartSynchronousRunRequest:
    """A StartSynchronousRun of a fresh run whose literal seed is published
    (history end "1"); ``fields`` override the seed's declaration."""
    upload = await Upload(runtime, declaration(**fields)).published()
    run = run_start(run_id=upload.run_id, agent_id=str(upload.decl.agent_id), seed_end_id="1")
    return sd.StartSynchronousRunRequest(run=run.start, started=started_record(run.start))
