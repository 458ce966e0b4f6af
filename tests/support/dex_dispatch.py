"""The SDK's AsyncWorker dispatcher and codecs, fed the requests a Dex server would send.

No Dex server can be installed on these machines, so the Dex tests hand the SDK's own
`AsyncWorkerDispatcher` the protobuf requests a server would send. That dispatcher, its codecs
and the Registry are the SDK's, not mocks; only the server is absent. (These are SDK internals
of dex-python-sdk 1.23; the public Worker needs a server.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from dex import BlobCache, Flow, Registry, Step
from dex._async_value_hydrator import AsyncValueHydrator
from dex._async_worker_dispatcher import AsyncWorkerDispatcher
from dex._server_protocol import NegotiatedServerProtocol
from dex._value_mapper import ValueMapper
from dex.dexpb import dex_pb2 as pb
from dex.dexpb import dex_pb2_grpc

from adapters.dex import DECIDE_RPC, DECISIONS, ApprovalSignal, DecideRequest, DecideResult
from adapters.dex import channel_key as decision_key

__all__ = ["TIMER_FIRED", "Driver", "SdkWorker", "next_steps"]

T = TypeVar("T")

TIMER_FIRED = pb.ConditionResults(
    timer_results=[pb.TimerResult(condition_status=pb.CONDITION_STATUS_COMPLETED)]
)


def next_steps(response: pb.InvokeExecuteMethodResponse) -> list[str]:
    return [m.step_type for m in response.step_decision.next_steps]


class SdkWorker:
    """One Flow in a real Registry, its handlers invoked through the SDK's dispatcher."""

    def __init__(self, flow: Flow[Any], cache: BlobCache) -> None:
        self.flow = flow
        self.registry = Registry([flow], allow_async_handlers=True)
        self.values = ValueMapper(self.registry.codec_registry)
        # The hydrator calls the server only for values stored as blobs; these have none.
        no_server = cast(dex_pb2_grpc.FlowServiceStub, None)
        self.dispatcher = AsyncWorkerDispatcher(
            self.registry,
            self.values,
            AsyncValueHydrator(no_server, cache),
            NegotiatedServerProtocol(),
        )

    def encode(self, value: object) -> pb.Value:
        if isinstance(value, pb.Value):  # already encoded (a movement's step input)
            return value
        return self.values.encode(value, self.registry.codec_registry.resolve(type(value)))

    def decode(self, value: pb.Value, type_: type[T]) -> T:
        decoded: T = self.values.decode(value, self.registry.codec_registry.resolve(type_))
        return decoded

    def context(
        self, flow_id: str, step: str, attempt: int = 1, recovery: str | None = None
    ) -> pb.Context:
        context = pb.Context(
            flow_id=flow_id,
            run_id="dex-run-1",
            step_execution_id=f"{step}-1",
            attempt=attempt,
            first_attempt_timestamp=int(time.time()),
        )
        if recovery is not None:
            context.recovery_error.CopyFrom(
                pb.RecoveryErrorInfo(detail=recovery, error_type="RuntimeError")
            )
        return context

    async def wait_for(
        self, step: str, flow_id: str, request: object
    ) -> pb.InvokeWaitForMethodResponse:
        response, _ = await self.wait_for_with_outputs(step, flow_id, request)
        return response

    async def wait_for_with_outputs(
        self, step: str, flow_id: str, request: object
    ) -> tuple[pb.InvokeWaitForMethodResponse, list[pb.InvokeWaitForMethodOutput]]:
        message = pb.InvokeWaitForMethodRequest(
            context=self.context(flow_id, step),
            flow_type=self.flow.get_flow_type(),
            step_type=step,
            step_input=self.encode(request),
        )
        outputs = [o async for o in self.dispatcher.invoke_wait_for(message)]
        return outputs[-1].result, outputs[:-1]

    async def execute(
        self,
        step: str,
        flow_id: str,
        request: object,
        conditions: pb.ConditionResults | None = None,
        *,
        attempt: int = 1,
        recovery: str | None = None,
    ) -> tuple[pb.InvokeExecuteMethodResponse, list[pb.InvokeExecuteMethodOutput]]:
        message = pb.InvokeExecuteMethodRequest(
            context=self.context(flow_id, step, attempt, recovery),
            flow_type=self.flow.get_flow_type(),
            step_type=step,
            step_input=self.encode(request),
        )
        if conditions is not None:
            message.condition_results.CopyFrom(conditions)
        outputs = [o async for o in self.dispatcher.invoke_execute(message)]
        return outputs[-1].result, outputs[:-1]

    async def decide(
        self, flow_id: str, request: DecideRequest, pending: list[ApprovalSignal] | None = None
    ) -> tuple[DecideResult, list[ApprovalSignal]]:
        """Invoke the decide RPC; `pending` lists the call's loaded channel messages (None: the
        caller did not load them). Returns the output and the messages it publishes."""
        message = pb.InvokeWorkerRPCRequest(
            context=self.context(flow_id, "rpc"),
            flow_type=self.flow.get_flow_type(),
            rpc_name=DECIDE_RPC,
            input=self.encode(request),
        )
        if pending is not None:
            name = self.channel(request.call_id)
            message.loaded_channel_map_instances.append(name)
            message.loaded_channel_messages[name].messages.extend(
                pb.ChannelMessage(channel_name=name, value=self.encode(s), message_id=f"m{i}")
                for i, s in enumerate(pending)
            )
        response = await self.dispatcher.invoke_rpc(message)
        published = []
        for m in response.publish_to_channel:
            assert m.channel_name == self.channel(request.call_id)
            published.append(self.decode(m.value, ApprovalSignal))
        return self.decode(response.output, DecideResult), published

    async def rpc(
        self, flow_id: str, name: str, value: object, loaded: dict[str, list[Any]] | None = None
    ) -> pb.InvokeWorkerRPCResponse:
        """Invoke the RPC `name`; `loaded` are the pending messages of the channels the
        server loaded for it, by physical channel name."""
        message = pb.InvokeWorkerRPCRequest(
            context=self.context(flow_id, "rpc"),
            flow_type=self.flow.get_flow_type(),
            rpc_name=name,
            input=self.encode(value),
        )
        for channel_name, values in (loaded or {}).items():
            message.loaded_channel_names.append(channel_name)
            message.loaded_channel_messages[channel_name].messages.extend(
                pb.ChannelMessage(
                    channel_name=channel_name, value=self.encode(v), message_id=f"m{i}"
                )
                for i, v in enumerate(values)
            )
        return await self.dispatcher.invoke_rpc(message)

    @staticmethod
    def channel(call_id: str) -> str:
        return Registry.physical_name(DECISIONS.name, decision_key(call_id))

    def woken_by(self, call_id: str, signal: ApprovalSignal) -> pb.ConditionResults:
        return self.channel_values(self.channel(call_id), [signal])

    def channel_values(self, channel_name: str, values: list[Any]) -> pb.ConditionResults:
        """The condition results of a wait on `channel_name` that consumed `values`."""
        return pb.ConditionResults(
            channel_results=[
                pb.ChannelResult(
                    channel_name=channel_name,
                    condition_status=pb.CONDITION_STATUS_COMPLETED,
                    values=[self.encode(v) for v in values],
                )
            ]
        )


_BRANCH_ENDS = (pb.CLOSE_DECISION_TYPE_UNSPECIFIED, pb.CLOSE_DECISION_TYPE_DEAD_END)


@dataclass
class Pending:
    step: str
    input: pb.Value
    condition: pb.WaitingCondition | None = None  # what its wait_for returned (called once)


@dataclass
class Driver:
    """Plays the server for one Flow: runs each movement's Step (its wait_for, then its
    execute once its channel condition holds), keeps the channels the Steps publish to, the
    stream writes and the close decision. A Step that raises is attempted again up to
    `attempts[step]` times (default one), then moved to `on_failure[step]` with the error as
    the recovery error, as Dex does; otherwise the error propagates."""

    worker: SdkWorker
    flow_id: str
    attempts: dict[str, int] = field(default_factory=dict)
    on_failure: dict[str, str] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    channels: dict[str, list[pb.Value]] = field(default_factory=dict)
    streamed: list[pb.Value] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)
    history: list[Pending] = field(default_factory=list)  # each Step executed, with its input
    output: pb.Value | None = None
    closed: bool = False

    def start(self, step: str, value: object) -> None:
        self.pending.append(Pending(step, self.worker.encode(value)))

    def waiting(self) -> list[str]:
        return [p.step for p in self.pending]

    def publish(self, channel_name: str, value: object) -> None:
        self.channels.setdefault(channel_name, []).append(self.worker.encode(value))

    def stream(self, type_: type[T]) -> list[T]:
        return [self.worker.decode(v, type_) for v in self.streamed]

    async def run(
        self, *, fire_timers: bool = False, only: str | None = None, limit: int = 100
    ) -> None:
        """Run every Step that can run, until none can (waits that nothing satisfies stay
        pending; with `fire_timers` a wait with a timer ends on it). More than `limit` Steps
        fail the test: a Flow that waits again at every timer would never stop."""
        progress, ran = True, 0
        while progress and not self.closed:
            progress = False
            for pending in list(self.pending):
                if only is not None and pending.step != only:
                    continue
                if await self._try(pending, fire_timers):
                    progress, ran = True, ran + 1
                    assert ran <= limit, f"no end after {limit} Steps: {self.waiting()}"
                    break

    def _waits(self, step_type: str) -> bool:
        """Whether the Step overrides wait_for (Dex skips the base one)."""
        steps = {d.step.get_step_type(): d.step for d in self.worker.flow.get_steps()}
        return type(steps[step_type]).wait_for is not Step.wait_for

    async def _try(self, pending: Pending, fire_timers: bool) -> bool:
        if not self._waits(pending.step):
            self.pending.remove(pending)
            await self._execute(pending, None)
            return True
        if pending.condition is None:  # Dex calls wait_for once, when the Step is reached
            waited, outputs = await self.worker.wait_for_with_outputs(
                pending.step, self.flow_id, pending.input
            )
            self._stream(outputs)
            pending.condition = waited.waiting_condition
        condition = pending.condition
        conditions: pb.ConditionResults | None = None
        if condition.channel_conditions or condition.timer_conditions:
            conditions = self._consume(condition)
            if conditions is None and fire_timers and condition.timer_conditions:
                conditions = TIMER_FIRED
            if conditions is None:
                return False
        self.pending.remove(pending)
        await self._execute(pending, conditions)
        return True

    def _consume(self, condition: pb.WaitingCondition) -> pb.ConditionResults | None:
        ready = []
        for wanted in condition.channel_conditions:
            queued = self.channels.get(wanted.channel_name, [])
            if len(queued) >= max(wanted.at_least, 1):
                ready.append(wanted)
        if not ready:
            return None
        any_one = condition.waiting_condition_type == pb.WAITING_CONDITION_TYPE_ANY_COMPLETED
        if not any_one and len(ready) < len(condition.channel_conditions):
            return None
        results = pb.ConditionResults()
        for wanted in ready[:1] if any_one else ready:
            queued = self.channels[wanted.channel_name]
            taken = queued[: wanted.at_most] if wanted.at_most else list(queued)
            del queued[: len(taken)]
            results.channel_results.append(
                pb.ChannelResult(
                    channel_name=wanted.channel_name,
                    condition_status=pb.CONDITION_STATUS_COMPLETED,
                    values=taken,
                )
            )
        return results

    async def _execute(self, pending: Pending, conditions: pb.ConditionResults | None) -> None:
        attempt, most = 1, self.attempts.get(pending.step, 1)
        while True:
            try:
                done, outputs = await self.worker.execute(
                    pending.step, self.flow_id, pending.input, conditions, attempt=attempt
                )
                break
            except Exception as error:
                if attempt < most:
                    attempt += 1
                    continue
                proceed = self.on_failure.get(pending.step)
                if proceed is None:
                    raise
                self.executed.append(f"{pending.step}!")
                done, outputs = await self.worker.execute(
                    proceed, self.flow_id, pending.input, recovery=str(error)
                )
                pending = Pending(proceed, pending.input)
                break
        self.executed.append(pending.step)
        self.history.append(pending)
        self._stream(outputs)
        for message in done.publish_to_channel:
            self.channels.setdefault(message.channel_name, []).append(message.value)
        for move in done.step_decision.next_steps:
            self.pending.append(Pending(move.step_type, move.step_input))
        close = done.step_decision.close_decision
        if close.close_decision_type not in _BRANCH_ENDS:  # the Flow completes or fails
            self.output = close.close_input
            self.closed = True

    def _stream(self, outputs: list[Any]) -> None:
        self.streamed.extend(o.stream_write.value for o in outputs if o.HasField("stream_write"))
