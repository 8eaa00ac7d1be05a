"""An agent worker and its host, talking to runstore over gRPC.

    make run                              # in one terminal
    .venv/bin/python examples/worker.py   # in another (--target host:port)

The host creates a session. The worker starts a root run, delegates a tool
call to a child run, writes the conversation as transcript records, suspends
the root run with a checkpoint while it waits for the user, continues it in a
successor run, completes, and rebuilds the transcript from the run log.

Against a server with authentication on (docs/security.md), each
side proves itself with a token of its own role, over TLS when ``--ca`` names
the CA that signed the server's certificate:

    RUNSTORE_HOST_TOKEN=... RUNSTORE_WORKER_TOKEN=... \\
        .venv/bin/python examples/worker.py --target runstore.internal:50051 --ca ca.crt

``runstore.internal`` stands for the name your DNS (or ``/etc/hosts``) gives
the server, the one its certificate holds (docs/security.md#certificates).

The host (role ``host``) creates, lists and ends the session; the worker (role
``worker``) writes the runs, and could not end or purge the session if it tried.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from datetime import datetime

from runstore.client import (
    Checkpoint,
    PermissionDeniedError,
    RemoteSessionAdmin,
    RemoteStore,
    RunRecord,
    RunStart,
    RunStatus,
    TLSConfig,
    records,
)
from runstore.client.transcript import (
    Message,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    build_messages_from_run_log,
    encode_messages,
    validate_planner_transcript,
)
from runstore.contract.lifecycle import TRANSCRIPT_APPENDED, TRANSCRIPT_SEEDED


def transcript_record(
    run: RunStart, key: str, messages: list[Message], *, seeded: bool = False
) -> RunRecord:
    """Messages as a transcript record of ``run`` (§13.2)."""
    return RunRecord(
        event_key=key,
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        type=TRANSCRIPT_SEEDED if seeded else TRANSCRIPT_APPENDED,
        payload=encode_messages(messages),
        timestamp=records.now(),
    )


async def main(
    target: str,
    *,
    host_token: str | None = None,
    worker_token: str | None = None,
    tls: TLSConfig | None = None,
) -> None:
    tag = uuid.uuid4().hex[:8]
    async with (
        RemoteSessionAdmin(target, tls=tls, token=host_token) as host,
        RemoteStore(target, tls=tls, token=worker_token) as store,
    ):
        session = await host.create_session(f"chat-{tag}", records.now())
        print(f"session {session.id}: {session.status}")

        # 1. The root run: the user's question, the assistant's tool call.
        root = RunStart(
            run_id=f"turn-1-{tag}",
            agent_id="assistant",
            session_id=session.id,
            started_at=records.now(),
            labels={"app": "example"},
        )
        started = await store.start_root_run(records.root_run_start(root))
        print(f"root run {root.run_id}: {started.outcome}")
        question = Message("user", (TextPart("What is the weather in Paris?"),))
        await store.append_run_record(transcript_record(root, "msg-1", [question], seeded=True))
        call = Message(
            "assistant",
            (ToolUsePart(id="call-1", name="weather.lookup", input={"city": "Paris"}),),
        )
        await store.append_run_record(transcript_record(root, "msg-2", [call]))

        # 2. A child run answers the tool call; the link lands on the parent.
        child = RunStart(
            run_id=f"weather-{tag}",
            agent_id="weather-agent",
            session_id=session.id,
            parent_run_id=root.run_id,
            started_at=records.now(),
        )
        linked = await store.start_child_run(
            records.child_run_start(
                child,
                parent_agent_id=root.agent_id,
                tool_name="weather.lookup",
                tool_call_id="call-1",
            )
        )
        print(f"child run {child.run_id}: link is record {linked.parent_record.id} of the root")
        await store.record_run_terminal(records.run_terminal(child, RunStatus.COMPLETED))
        answer = Message("user", (ToolResultPart(tool_use_id="call-1", content={"sky": "rain"}),))
        await store.append_run_record(transcript_record(root, "msg-3", [answer]))

        # 3. The root run waits for the user: suspend it with a checkpoint.
        checkpoint = Checkpoint(
            id=f"await-user-{tag}", data=json.dumps({"asked": "umbrella?"}).encode()
        )
        suspended = await store.record_run_suspension(records.run_suspension(root, checkpoint))
        print(f"root run suspended (record {suspended.id})")

        # 4. The user answers: a successor run continues from the checkpoint.
        successor = RunStart(
            run_id=f"turn-2-{tag}",
            agent_id="assistant",
            session_id=session.id,
            predecessor_run_id=root.run_id,
            started_at=records.now(),
            labels={"app": "example"},
        )
        await store.start_root_run(records.root_run_start(successor))
        resumed = await store.load_run_suspension(root.run_id)
        print(f"successor {successor.run_id} resumes checkpoint {resumed.id}")
        history = [question, call, answer]
        await store.append_run_record(transcript_record(successor, "msg-1", history, seeded=True))
        reply = Message("assistant", (TextPart("Rain in Paris: take an umbrella."),))
        await store.append_run_record(transcript_record(successor, "msg-2", [reply]))
        done = await store.record_run_terminal(records.run_terminal(successor, RunStatus.COMPLETED))
        print(f"successor completed (record {done.id})")

        # 5. Rebuild the conversation from the run log and check it.
        messages = await build_messages_from_run_log(store, successor.run_id)
        validate_planner_transcript(messages)
        for message in messages:
            print(f"  {message.role:>9}: {describe(message)}")
        runs = await host.list_runs_by_session(session.id)
        print("runs: " + ", ".join(f"{run.run_id}={run.status}" for run in runs))
        if worker_token is not None:
            # Roles at work: the worker's token cannot end the host's session.
            async with RemoteSessionAdmin(target, tls=tls, token=worker_token) as as_worker:
                try:
                    await as_worker.end_session(session.id, records.now())
                except PermissionDeniedError as refused:
                    print(f"the worker may not end the session: {refused}")
        await host.end_session(session.id, records.now())


def describe(message: Message) -> str:
    parts = []
    for part in message.parts:
        if isinstance(part, TextPart):
            parts.append(part.text)
        elif isinstance(part, ToolUsePart):
            parts.append(f"calls {part.name}({json.dumps(part.input)})")
        elif isinstance(part, ToolResultPart):
            parts.append(f"result {json.dumps(part.content)}")
    return "; ".join(parts)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="runstore address")
    parser.add_argument("--ca", help="CA certificate of the server (turns TLS on)")
    args = parser.parse_args()
    asyncio.run(
        main(
            args.target,
            # Tokens come from the environment, never from the command line.
            host_token=os.environ.get("RUNSTORE_HOST_TOKEN") or None,
            worker_token=os.environ.get("RUNSTORE_WORKER_TOKEN") or None,
            tls=TLSConfig(ca=args.ca) if args.ca else None,
        )
    )
    print(f"done at {datetime.now():%H:%M:%S}")
