// A Node.js worker: a session, a root run with one record, its completion, and
// the ErrorInfo of a failed call. It loads the protos as they are, with
// @grpc/proto-loader (no code generation).
//
//   node examples/node/worker.js [host:port]      (default 127.0.0.1:50051)
//
// docs/clients/node.md shows and explains it; tests/client/test_node_example.py
// runs it against a real server.
"use strict";

const path = require("node:path");
const { promisify } = require("node:util");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const protobuf = require("protobufjs");
const googleProtos = require("google-proto-files");

const target = process.argv[2] || "127.0.0.1:50051";
const definition = protoLoader.loadSync(
  ["runstore/v1/runtime_store.proto", "runstore/v1/session_admin.proto"],
  {
    includeDirs: [path.join(__dirname, "..", "..", "protos")],
    keepCase: true, // field names as in the protos: session_id, created_at
    longs: String, // 64-bit record ids and cursors as strings
    enums: String, // SESSION_STATUS_ACTIVE rather than 1
    defaults: true,
  },
);
const { runstore } = grpc.loadPackageDefinition(definition);
const credentials = grpc.credentials.createInsecure();
const admin = new runstore.v1.SessionAdmin(target, credentials);
const store = new runstore.v1.RuntimeStore(target, credentials);
const call = (client, method, request) => promisify(client[method].bind(client))(request);

// A Timestamp is {seconds, nanos}; a bytes field is a Buffer.
function now() {
  const ms = Date.now();
  return { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 };
}

// The ErrorInfo of a failed call, from the google.rpc.Status in its trailer.
const rpc = new protobuf.Root().loadSync(
  [googleProtos.getProtoPath("rpc/status.proto"), googleProtos.getProtoPath("rpc/error_details.proto")],
  { keepCase: true },
);
const Status = rpc.lookupType("google.rpc.Status");
const ErrorInfo = rpc.lookupType("google.rpc.ErrorInfo");

function errorInfo(err) {
  const [bytes] = (err.metadata && err.metadata.get("grpc-status-details-bin")) || [];
  if (!bytes) return null; // not from runstore: treat it as transient
  const detail = Status.decode(bytes).details.find((any) => any.type_url.endsWith("/google.rpc.ErrorInfo"));
  return detail ? ErrorInfo.decode(detail.value) : null;
}

async function main() {
  const tag = Math.random().toString(16).slice(2, 10);
  const sessionId = `chat-${tag}`;
  const runId = `turn-${tag}`;
  const identity = { run_id: runId, agent_id: "assistant", session_id: sessionId };

  const created = await call(admin, "CreateSession", { session_id: sessionId, created_at: now() });
  console.log(`session: ${created.session.status}`);

  // Build each record once: a retry must resend the very same bytes.
  const startedAt = now();
  const started = await call(store, "StartRootRun", {
    run: { ...identity, started_at: startedAt },
    started: { ...identity, event_key: "start", type: "run_started", payload: Buffer.from("{}"), timestamp: startedAt },
    canceled: {
      ...identity,
      event_key: "stop",
      type: "run_completed",
      payload: Buffer.from('{"status":"canceled","phase":"canceled","cancellation":{"reason":"session_ended"}}'),
      timestamp: startedAt,
    },
  });
  console.log(`start: ${started.outcome}`);

  const appended = await call(store, "AppendRunRecord", {
    record: {
      ...identity,
      event_key: "note-1",
      type: "planner_note",
      payload: Buffer.from('{"note":"check the weather"}'),
      timestamp: now(),
    },
  });
  console.log(`appended record ${appended.id}`);

  await call(store, "RecordRunTerminal", {
    run_id: runId,
    status: "RUN_STATUS_COMPLETED",
    record: {
      ...identity,
      event_key: "done",
      type: "run_completed",
      payload: Buffer.from('{"status":"success","phase":"completed"}'),
      timestamp: now(),
    },
  });
  const loaded = await call(store, "LoadRun", { run_id: runId });
  console.log(`run: ${loaded.run.status}`);

  try {
    await call(store, "LoadRun", { run_id: `missing-${tag}` });
  } catch (err) {
    const info = errorInfo(err);
    console.log(`error: ${grpc.status[err.code]} ${info.reason} permanent=${info.metadata.permanent}`);
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
