"""The Welt entrypoint: one request payload in, the events Welt renders out.

A conversation turn (`messages`) starts the agent on a fresh thread, as Welt advises (the Slack
thread is the history). Answers (`interrupt_responses`) become store decisions by the Slack user
(`answers`), then the threads they paused are resumed from the config stored with each approval,
with nothing as the resume value: the middleware reads the decision from the store. Any process
can do this; nothing is kept in memory between requests.

One process resumes a thread at a time: a PostgreSQL advisory lock per thread (on a connection
of its own, so a crash releases it) makes a duplicate delivery that arrives while the first is
resuming a no-op, and one that arrives later finds the thread no longer waiting for those
approvals and resumes nothing. A redelivery after a crash between recording and resuming still
finds the thread waiting, and resumes it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Command, StreamMode

from adapters.langgraph import resume_config
from approvals import Approval, ApprovalStore
from ledger.log import get_logger
from ledger.store.db import open_raw_connection

from . import _sql
from .answers import AnswerOutcome, AnswerStatus, record_answers, slack_reviewer
from .errors import UnsupportedInterrupt
from .messages import decode_messages
from .render import inline_code, signoff_requests
from .stream import renderable_events, tool_names
from .wire import DataEvent, WeltEvent, envelope_of, parse_interrupt_responses

__all__ = ["STREAM_MODES", "WeltAgent", "notices", "welt_events"]

log = get_logger(__name__)

STREAM_MODES: list[StreamMode] = ["messages", "updates"]
Graph = Pregel[Any, Any, Any, Any]


class WeltAgent:
    """A LangGraph agent behind Welt: built with `SignoffMiddleware` (or `signoff_tool_node`)
    and a checkpointer every worker shares (`encrypted_checkpointer`).

    Args:
        graph: the compiled agent.
        store: the approval store its middleware asks. Who answers decides with the groups the
            reviewer directory gives them (`ReviewerDirectory`).
        files_from: the tools whose files are uploaded to the thread (`renderable_events`);
            any other tool's files stay with the model.
    """

    def __init__(
        self, graph: Graph, store: ApprovalStore, *, files_from: Collection[str] = ()
    ) -> None:
        self.graph = graph
        self.store = store
        self.files_from = tool_names(files_from)

    async def reply(
        self,
        payload: Any,
        *,
        user_id: str | None = None,
        config: RunnableConfig | None = None,
    ) -> AsyncIterator[WeltEvent]:
        """The events answering one Welt request.

        Args:
            payload: Welt's request payload (`messages` or `interrupt_responses`).
            user_id: the runtime user id Welt passed (`slack:<team>:<user>`): who answered.
            config: for a conversation turn, the config to run in (default: a fresh thread).

        Raises:
            InvalidWeltPayload: the payload breaks the contract (`ForgedToolTurn` for tool
                blocks in messages); nothing was run or recorded.
            UnknownInterrupt: answers to ids that are no approvals; nothing was recorded.
            MissingReviewer: answers without a user id.
            UnsupportedInterrupt: the run paused on something that is no Signoff approval.
        """
        if envelope_of(payload) == "messages":
            async for event in self.start(payload["messages"], config):
                yield event
            return
        outcomes = await self.answer(payload["interrupt_responses"], user_id=user_id)
        for notice in notices(outcomes):
            yield notice
        async for event in self.resume(outcomes):
            yield event

    async def start(
        self, messages: Any, config: RunnableConfig | None = None
    ) -> AsyncIterator[WeltEvent]:
        """Run a conversation turn: Welt's messages (decoded, tool blocks refused) as the graph
        input, on `config` or a fresh thread."""
        decoded = decode_messages(messages)
        config = config or {"configurable": {"thread_id": f"welt-{uuid.uuid4().hex}"}}
        stream = self.graph.astream({"messages": decoded}, config, stream_mode=STREAM_MODES)
        async for event in renderable_events(stream, self.store, files_from=self.files_from):
            yield event

    async def answer(self, responses: Any, *, user_id: str | None) -> list[AnswerOutcome]:
        """Record Welt's answers (`interrupt_responses`, or the whole payload) as decisions of
        the Slack user `user_id`; resume nothing."""
        answers = parse_interrupt_responses(responses)
        reviewer = slack_reviewer(user_id)
        return await record_answers(self.store, answers, reviewer)

    async def resume(
        self, answered: Iterable[AnswerOutcome | Approval]
    ) -> AsyncIterator[WeltEvent]:
        """Resume each thread the answered approvals paused, if it still waits for them, and
        yield what it then says (a further pause ends with its questions).

        Args:
            answered: what `answer` returned, or approvals (e.g. decided with the CLI, resumed
                by another process).
        """
        approvals = [a.approval if isinstance(a, AnswerOutcome) else a for a in answered]
        for config, approval_ids in _threads(approvals):
            async for event in self._resume_thread(config, approval_ids):
                yield event

    async def _resume_thread(
        self, config: RunnableConfig, approval_ids: set[str]
    ) -> AsyncIterator[WeltEvent]:
        thread_id = str((config.get("configurable") or {})["thread_id"])
        bound = log.bind(thread_id=thread_id, approval_ids=sorted(approval_ids))
        async with _resuming(self.store, thread_id) as ours:
            if not ours:
                bound.info("welt resume skipped: another process is resuming the thread")
                return
            waiting: dict[str, set[str]] = {}
            for pause in (await self.graph.aget_state(config)).interrupts:
                try:
                    requests = signoff_requests(pause.id, pause.value)
                except UnsupportedInterrupt:
                    continue  # not ours to answer: it stays paused
                waiting[pause.id] = {str(r["approval_id"]) for r in requests}
            if not any(ids & approval_ids for ids in waiting.values()):
                bound.info("welt resume skipped: the thread no longer waits for these approvals")
                return
            bound.info("welt resume", interrupts=len(waiting))
            # None: each paused call reads its decision from the store (still pending: asked
            # again). Every Signoff pause of the thread is resumed, as Welt answers a stop whole.
            command: Command[Any] = Command(resume={pause_id: None for pause_id in waiting})
            stream = self.graph.astream(command, config, stream_mode=STREAM_MODES)
            async for event in renderable_events(stream, self.store, files_from=self.files_from):
                yield event


async def welt_events(
    store: ApprovalStore,
    stream: AsyncIterator[Any],
    *,
    files_from: Collection[str] | None = None,
) -> AsyncIterator[WeltEvent]:
    """`renderable_events`, the store first."""
    async for event in renderable_events(stream, store, files_from=files_from):
        yield event


def notices(outcomes: Sequence[AnswerOutcome]) -> list[DataEvent]:
    """A line in the Slack thread for each answer that was not recorded and is not a repeat
    (refused, already decided otherwise, expired)."""
    lines: list[DataEvent] = []
    for o in outcomes:
        tool = inline_code(o.approval.tool)
        if o.status is AnswerStatus.REFUSED:
            text = f"Your answer on {tool} was not recorded: {o.detail}. It is asked again."
        elif o.status is AnswerStatus.ALREADY_DECIDED:
            text = (
                f"{tool} was decided already ({o.approval.status} by "
                f"{', '.join(o.approval.decided_by) or 'signoff'}); that decision stands."
            )
        elif o.status is AnswerStatus.EXPIRED:
            text = f"The approval of {tool} expired before anyone decided; it is denied."
        else:
            continue
        lines.append({"data": text + "\n\n"})
    return lines


def _threads(approvals: Sequence[Approval]) -> list[tuple[RunnableConfig, set[str]]]:
    """The threads to resume (from the configs stored with the approvals), in answer order,
    with the approvals answered in each."""
    threads: dict[str, tuple[RunnableConfig, set[str]]] = {}
    for approval in approvals:
        config = resume_config(approval)
        if not (config.get("configurable") or {}).get("thread_id"):
            log.warning("welt answer has no thread to resume", approval_id=approval.approval_id)
            continue
        key = json.dumps(config, sort_keys=True)
        threads.setdefault(key, (config, set()))[1].add(approval.approval_id)
    return list(threads.values())


@asynccontextmanager
async def _resuming(store: ApprovalStore, thread_id: str) -> AsyncIterator[bool]:
    """Whether this process may resume `thread_id` now; held until the block ends."""
    conn = await open_raw_connection(
        store.db.url, host_seconds=store.db.settings.host_connect_seconds
    )
    try:
        yield bool(await conn.fetchval(_sql.TRY_LOCK_THREAD, f"signoff.resume:{thread_id}"))
    finally:
        await asyncio.shield(conn.close())  # closing releases the lock
