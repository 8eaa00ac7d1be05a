"""``runstore.v1.RuntimeStore``: the worker-facing store (§2)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeAlias

import grpc

from runstore.contract import seed_wire, wire
from runstore.contract.model import RunRepairResult
from runstore.contract.seeds import SeedAppend, SeedPage, SeedPublication
from runstore.server import convert
from runstore.server.carried_calls import CarriedCalls
from runstore.server.core.store import RuntimeStore
from runstore.server.core.watch import NoWakeups, RecordWatch, WatchBatch
from runstore.server.error_status import maps_errors, maps_stream_errors
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import runtime_store_pb2_grpc as rs_grpc
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import types_pb2 as pb

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


def _repair_fields(result: RunRepairResult) -> dict[str, Any]:
    return {
        "outcome": wire.REPAIR_OUTCOME_TO_WIRE[result.outcome],
        "status": wire.RUN_STATUS_TO_WIRE[result.status],
        "record": convert.append_result_to_wire(result.record),
    }


class RuntimeStoreServicer(rs_grpc.RuntimeStoreServicer):
    def __init__(
        self,
        store: RuntimeStore,
        watch: RecordWatch | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        """``interceptors``: the server's, which every call AppendRunRecordCalls
        carries goes through as a call of its own (``runstore.server.carried_calls``)."""
        self._store = store
        self._watch = watch if watch is not None else RecordWatch(store, NoWakeups())
        self._carried = CarriedCalls(
            interceptors,
            grpc.unary_unary_rpc_method_handler(
                self.AppendRunRecord,
                request_deserializer=rs.AppendRunRecordRequest.FromString,
                response_serializer=rs.AppendRunRecordResponse.SerializeToString,
            ),
        )

    @maps_errors
    async def LoadSessionStatus(
        self, request: rs.LoadSessionStatusRequest, context: Context
    ) -> rs.LoadSessionStatusResponse:
        status = await self._store.load_session_status(request.session_id)
        return rs.LoadSessionStatusResponse(status=wire.SESSION_STATUS_TO_WIRE[status])

    @maps_errors
    async def StartRootRun(
        self, request: rs.StartRootRunRequest, context: Context
    ) -> rs.StartRootRunResponse:
        result = await self._store.start_root_run(convert.root_run_start(request))
        return rs.StartRootRunResponse(
            outcome=wire.START_OUTCOME_TO_WIRE[result.outcome],
            started=convert.append_result_to_wire(result.started),
            canceled=convert.append_result_to_wire(result.canceled),
            run_status=wire.RUN_STATUS_TO_WIRE[result.run_status],
            cancellation=convert.append_result_to_wire(result.cancellation),
        )

    @maps_errors
    async def StartChildRun(
        self, request: rs.StartChildRunRequest, context: Context
    ) -> rs.StartChildRunResponse:
        result = await self._store.start_child_run(convert.child_run_start(request))
        return rs.StartChildRunResponse(
            outcome=wire.START_OUTCOME_TO_WIRE[result.outcome],
            parent_record=convert.append_result_to_wire(result.parent_record),
            started=convert.append_result_to_wire(result.started),
            canceled=convert.append_result_to_wire(result.canceled),
            run_status=wire.RUN_STATUS_TO_WIRE[result.run_status],
            cancellation=convert.append_result_to_wire(result.cancellation),
        )

    @maps_errors
    async def StartOneShotRun(
        self, request: rs.StartOneShotRunRequest, context: Context
    ) -> rs.StartOneShotRunResponse:
        result = await self._store.start_one_shot_run(convert.one_shot_run_start(request))
        return rs.StartOneShotRunResponse(
            record=convert.append_result_to_wire(result.started),
            run_status=wire.RUN_STATUS_TO_WIRE[result.run_status],
        )

    @maps_errors
    async def StartOneShotChildRun(
        self, request: rs.StartOneShotChildRunRequest, context: Context
    ) -> rs.StartOneShotChildRunResponse:
        result = await self._store.start_one_shot_child_run(
            convert.one_shot_child_run_start(request)
        )
        return rs.StartOneShotChildRunResponse(
            parent_record=convert.append_result_to_wire(result.parent_record),
            started=convert.append_result_to_wire(result.started),
            run_status=wire.RUN_STATUS_TO_WIRE[result.run_status],
        )

    @maps_errors
    async def StartSynchronousRun(
        self, request: sd.StartSynchronousRunRequest, context: Context
    ) -> sd.StartSynchronousRunResponse:
        command = convert.synchronous_run_start(request)
        result = await self._store.start_synchronous_run(command)
        return sd.StartSynchronousRunResponse(
            record=convert.append_result_to_wire(result.started),
            run_status=wire.RUN_STATUS_TO_WIRE[result.run_status],
        )

    @maps_errors
    async def AppendRunRecord(
        self, request: rs.AppendRunRecordRequest, context: Context
    ) -> rs.AppendRunRecordResponse:
        result = await self._store.append_run_record(convert.record_from_wire(request, "record"))
        return rs.AppendRunRecordResponse(**convert.append_fields(result))

    @maps_errors
    async def AppendRunRecords(
        self, request: rs.AppendRunRecordsRequest, context: Context
    ) -> rs.AppendRunRecordsResponse:
        results = await self._store.append_run_records(
            convert.records_from_wire(request.records, "records")
        )
        return rs.AppendRunRecordsResponse(
            results=[convert.append_result_to_wire(result) for result in results]
        )

    @maps_errors
    async def AppendRunRecordCalls(
        self, request: rs.AppendRunRecordCallsRequest, context: Context
    ) -> rs.AppendRunRecordCallsResponse:
        return await self._carried.serve(request, context)

    @maps_errors
    async def RecordRunCancellation(
        self, request: rs.RecordRunCancellationRequest, context: Context
    ) -> rs.RecordRunCancellationResponse:
        result = await self._store.record_run_cancellation(convert.run_cancellation(request))
        return rs.RecordRunCancellationResponse(**convert.append_fields(result))

    @maps_errors
    async def RecordRunSuspension(
        self, request: rs.RecordRunSuspensionRequest, context: Context
    ) -> rs.RecordRunSuspensionResponse:
        result = await self._store.record_run_suspension(convert.run_suspension(request))
        return rs.RecordRunSuspensionResponse(**convert.append_fields(result))

    @maps_errors
    async def RecordRunTerminal(
        self, request: rs.RecordRunTerminalRequest, context: Context
    ) -> rs.RecordRunTerminalResponse:
        result = await self._store.record_run_terminal(convert.run_terminal(request))
        return rs.RecordRunTerminalResponse(**convert.append_fields(result))

    @maps_errors
    async def RepairRunSuspension(
        self, request: rs.RepairRunSuspensionRequest, context: Context
    ) -> rs.RepairRunSuspensionResponse:
        result = await self._store.repair_run_suspension(convert.run_suspension(request))
        return rs.RepairRunSuspensionResponse(**_repair_fields(result))

    @maps_errors
    async def RepairRunTerminal(
        self, request: rs.RepairRunTerminalRequest, context: Context
    ) -> rs.RepairRunTerminalResponse:
        result = await self._store.repair_run_terminal(convert.run_terminal(request))
        return rs.RepairRunTerminalResponse(**_repair_fields(result))

    @maps_errors
    async def LoadRun(self, request: rs.LoadRunRequest, context: Context) -> rs.LoadRunResponse:
        return rs.LoadRunResponse(
            run=convert.run_to_wire(await self._store.load_run(request.run_id))
        )

    @maps_errors
    async def LoadRunSuspension(
        self, request: rs.LoadRunSuspensionRequest, context: Context
    ) -> rs.LoadRunSuspensionResponse:
        checkpoint = await self._store.load_run_suspension(request.run_id)
        return rs.LoadRunSuspensionResponse(
            suspension=pb.Checkpoint(id=checkpoint.id, data=checkpoint.data)
        )

    @maps_errors
    async def ListRunRecords(
        self, request: rs.ListRunRecordsRequest, context: Context
    ) -> rs.ListRunRecordsResponse:
        page = await self._store.list_run_records(
            request.run_id, request.cursor, request.limit, request.types
        )
        return rs.ListRunRecordsResponse(
            events=[convert.record_to_wire(record) for record in page.events],
            next_cursor=page.next_cursor,
        )

    @maps_errors
    async def ListSessionRunRecords(
        self, request: rs.ListSessionRunRecordsRequest, context: Context
    ) -> rs.ListSessionRunRecordsResponse:
        page = await self._store.list_session_run_records(
            request.session_id, request.cursor, request.limit
        )
        return rs.ListSessionRunRecordsResponse(
            events=[convert.record_to_wire(record) for record in page.events],
            next_cursor=page.next_cursor,
        )

    @maps_errors
    async def ListRunTranscriptRecords(
        self, request: rs.ListRunTranscriptRecordsRequest, context: Context
    ) -> rs.ListRunTranscriptRecordsResponse:
        page = await self._store.list_run_transcript_records(
            request.run_id, request.through_record_id, request.after_record_id, request.limit
        )
        return rs.ListRunTranscriptRecordsResponse(
            events=[convert.record_to_wire(record) for record in page.events],
            next_cursor=page.next_cursor,
        )

    @maps_errors
    async def BeginRunSeed(
        self, request: sd.BeginRunSeedRequest, context: Context
    ) -> sd.BeginRunSeedResponse:
        declaration = seed_wire.declaration_from_wire(request.declaration)
        seed = await self._store.begin_run_seed(declaration)
        return sd.BeginRunSeedResponse(seed=seed_wire.seed_to_wire(seed))

    @maps_errors
    async def AppendRunSeed(
        self, request: sd.AppendRunSeedRequest, context: Context
    ) -> sd.AppendRunSeedResponse:
        record = seed_wire.record_from_wire(request.record)
        record_id = await self._store.append_run_seed(
            SeedAppend(request.run_id, request.attempt_id, record)
        )
        return sd.AppendRunSeedResponse(id=record_id)

    @maps_errors
    async def PublishRunSeed(
        self, request: sd.PublishRunSeedRequest, context: Context
    ) -> sd.PublishRunSeedResponse:
        await self._store.publish_run_seed(
            SeedPublication(
                request.run_id,
                request.attempt_id,
                request.seed_end_id,
                request.end_id,
                request.prepared_bytes,
            )
        )
        return sd.PublishRunSeedResponse()

    @maps_errors
    async def FindRunPreparation(
        self, request: sd.FindRunPreparationRequest, context: Context
    ) -> sd.FindRunPreparationResponse:
        found = await self._store.find_run_preparation(
            seed_wire.operation_from_wire(request.operation)
        )
        return sd.FindRunPreparationResponse(
            preparation=seed_wire.preparation_to_wire(found), found=found is not None
        )

    @maps_errors
    async def SettleRunPreparation(
        self, request: sd.SettleRunPreparationRequest, context: Context
    ) -> sd.SettleRunPreparationResponse:
        found = await self._store.settle_run_preparation(
            seed_wire.operation_from_wire(request.operation), request.attempt_id
        )
        return sd.SettleRunPreparationResponse(
            preparation=seed_wire.preparation_to_wire(found), found=found is not None
        )

    @maps_errors
    async def ListRunPreparationRecords(
        self, request: sd.ListRunPreparationRecordsRequest, context: Context
    ) -> sd.ListRunPreparationRecordsResponse:
        page = await self._store.list_run_preparation_records(
            request.run_id, request.end_id, request.after_id, request.limit
        )
        return sd.ListRunPreparationRecordsResponse(**_seed_page_fields(page))

    @maps_errors
    async def LoadRunSeed(
        self, request: sd.LoadRunSeedRequest, context: Context
    ) -> sd.LoadRunSeedResponse:
        seed = await self._store.load_run_seed(request.run_id, request.end_id)
        return sd.LoadRunSeedResponse(seed=seed_wire.seed_to_wire(seed))

    @maps_errors
    async def ListRunSeedRecords(
        self, request: sd.ListRunSeedRecordsRequest, context: Context
    ) -> sd.ListRunSeedRecordsResponse:
        page = await self._store.list_run_seed_records(
            request.run_id, request.end_id, request.after_id, request.limit
        )
        return sd.ListRunSeedRecordsResponse(**_seed_page_fields(page))

    @maps_stream_errors
    async def WatchSessionRunRecords(
        self, request: rs.WatchSessionRunRecordsRequest, context: Context
    ) -> AsyncIterator[rs.WatchSessionRunRecordsResponse]:
        batches = self._watch.session(request.session_id, request.cursor)
        async for batch in batches:
            yield rs.WatchSessionRunRecordsResponse(**_batch_fields(batch))

    @maps_stream_errors
    async def WatchRunRecords(
        self, request: rs.WatchRunRecordsRequest, context: Context
    ) -> AsyncIterator[rs.WatchRunRecordsResponse]:
        async for batch in self._watch.run(request.run_id, request.cursor):
            yield rs.WatchRunRecordsResponse(**_batch_fields(batch))


def _batch_fields(batch: WatchBatch) -> dict[str, Any]:
    return {
        "events": [convert.record_to_wire(record) for record in batch.events],
        "next_cursor": batch.next_cursor,
    }


def _seed_page_fields(page: SeedPage) -> dict[str, Any]:
    return {
        "records": [seed_wire.record_to_wire(record) for record in page.records],
        "next_cursor": page.next_cursor,
    }
