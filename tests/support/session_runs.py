"""Agent sessions on the SDK's dispatcher, for the session tests: the database harness (store,
ledger, encrypted checkpointer, the agents of `tests.support.agents`), a session Flow around one of
those agents, and a `Run` that drives it through `tests.support.dex_dispatch.Driver`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from dex import BlobCache, BlobCacheConfig, open_blob_cache
from langchain_core.messages import AIMessage

from adapters.dex.sessions import (
    USER_MESSAGES,
    AgentSession,
    AgentSessionFlow,
    SessionEvent,
    SessionEventType,
    SessionResult,
    SessionStart,
    UserMessage,
)
from adapters.langgraph import ToolSpec
from approvals import ApprovalStatus, ApprovalStore
from ledger.keys import LocalKek

from .agents import (
    SCRIPTS,
    Effects,
    Harness,
    Kind,
    ScriptedModel,
    build_agent,
    build_tools,
    create_effects_table,
    open_harness,
)
from .dex_dispatch import Driver, SdkWorker
from .processes import TEST_KEK

__all__ = [
    "RECHECK",
    "Run",
    "agent_session",
    "blob_cache",
    "new_session",
    "pending_approvals",
    "session_harness",
    "start",
]

RECHECK = timedelta(seconds=30)


@asynccontextmanager
async def session_harness(database_url: str) -> AsyncIterator[Harness]:
    """The harness of `tests.support.agents` on `database_url`, with a 1 s lease and the effects
    table."""
    async with open_harness(database_url, LocalKek(TEST_KEK), lease_seconds=1.0) as opened:
        await create_effects_table(opened.db)
        yield opened


@contextmanager
def blob_cache(folder: Path) -> Iterator[BlobCache]:
    cache = open_blob_cache(BlobCacheConfig(str(folder / "dex-cache"), 1 << 20))
    try:
        yield cache
    finally:
        cache.close()


def new_session() -> str:
    return f"session-{uuid.uuid4().hex[:10]}"


@dataclass
class Run:
    """One session on the SDK's dispatcher."""

    flow: AgentSessionFlow
    worker: SdkWorker
    driver: Driver
    model: ScriptedModel

    @property
    def session_id(self) -> str:
        return self.driver.flow_id

    def events(self, kind: SessionEventType | None = None) -> list[SessionEvent]:
        found = self.driver.stream(SessionEvent)
        return [e for e in found if kind is None or e.type is kind]

    def say(self, text: str = "", *, close: bool = False) -> None:
        self.driver.publish(USER_MESSAGES.name, UserMessage(uuid.uuid4().hex, text, close))

    def output(self) -> SessionResult:
        assert self.driver.output is not None, f"still waiting: {self.driver.waiting()}"
        return self.worker.decode(self.driver.output, SessionResult)


def start(
    flow: AgentSessionFlow, cache: BlobCache, model: ScriptedModel, text: str = "Please help"
) -> Run:
    worker = SdkWorker(flow, cache)
    driver = Driver(worker, new_session(), attempts={"RunModel": 3})
    driver.on_failure["RunModel"] = "FailTurn"
    driver.start("StartAgentSession", SessionStart(text, requested_by="carol"))
    return Run(flow, worker, driver, model)


def agent_session(
    harness: Harness,
    kind: Kind,
    script: list[AIMessage] | str,
    *,
    effects: Effects | None = None,
    specs: tuple[ToolSpec, ...] | None = None,
) -> tuple[AgentSessionFlow, ScriptedModel]:
    model = ScriptedModel(script=SCRIPTS[script] if isinstance(script, str) else script)
    tools = build_tools(effects or Effects(harness.db))
    signoff = harness.signoff(specs)
    graph = build_agent(kind, model, tools, signoff, harness.saver)
    flow = AgentSessionFlow(AgentSession(graph, harness.saver, signoff), recheck_every=RECHECK)
    return flow, model


async def pending_approvals(store: ApprovalStore, session_id: str) -> dict[str, str]:
    found = await store.find(run_id=session_id, status=ApprovalStatus.PENDING)
    return {a.call_id: a.approval_id for a in found}
