"""`EncryptedPostgresSaver` in place of LangGraph's `AsyncPostgresSaver`: made the same ways
(`from_conn_string`, `pipe=`), used from sync code (`graph.invoke`), giving the same
`DeltaChannel` histories, and copying threads re-sealed, all on a worker's login (only
`signoff_app`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import Checkpoint, DeltaChannelHistory, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.types import Command
from psycopg.rows import dict_row

from adapters.langgraph import EncryptedPostgresSaver, UnsupportedCheckpoint, key_usage
from ledger.errors import KekMissing, SchemaOutOfDate
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings

from .support.checkpoint_workers import review_graph
from .support.processes import TEST_KEK
from .support.worker_login import WorkerLogin, worker_login
from .test_checkpointer import delta_graph


@pytest.fixture(scope="module")
async def worker(server_url: str) -> AsyncIterator[WorkerLogin]:
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_dropin") as login:
        yield login


def thread(thread_id: str | None = None) -> Any:
    return {"configurable": {"thread_id": thread_id or f"t-{uuid4().hex[:8]}"}}


def tid(config: Any) -> str:
    return str(config["configurable"]["thread_id"])


async def _interrupt_and_resume(saver: EncryptedPostgresSaver) -> Any:
    graph, config = review_graph(saver), thread()
    out = await graph.ainvoke({"messages": [HumanMessage(content="refund?")]}, config)
    assert out["__interrupt__"][0].value["question"] == "approve the refund?"
    done = await graph.ainvoke(Command(resume="yes"), config)
    assert done["note"] == "reviewed: yes"
    return config


@pytest.mark.parametrize("pipeline", [False, True], ids=["connection", "pipeline"])
async def test_from_conn_string_opens_langgraphs_saver_on_a_worker_login(
    worker: WorkerLogin, pipeline: bool
) -> None:
    async with EncryptedPostgresSaver.from_conn_string(
        worker.url, pipeline=pipeline, settings=worker.settings
    ) as saver:
        assert isinstance(saver.conn, psycopg.AsyncConnection)
        assert (saver.pipe is not None) is pipeline
        await saver.setup()  # as code written for LangGraph's saver calls it: no DDL here
        config = await _interrupt_and_resume(saver)
        history = [s async for s in review_graph(saver).aget_state_history(config)]
        assert [s.next for s in history[:2]] == [(), ("review",)]
        usage = await key_usage(saver)
        assert usage.plaintext() == 0 and sum(usage.rows["checkpoints"].values()) >= 4

    # LangGraph's own setup() needs CREATE on the schema, which a worker has not: the check
    # above could fail.
    async with AsyncPostgresSaver.from_conn_string(worker.url) as plain:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await plain.setup()


async def test_from_conn_string_takes_the_kek_from_the_settings_only(worker: WorkerLogin) -> None:
    no_kek = Settings(database_url=worker.url)
    with pytest.raises(KekMissing):
        async with EncryptedPostgresSaver.from_conn_string(worker.url, settings=no_kek):
            pass

    # A ring of the caller's own is used as given (no database of the saver's own).
    async with await Database.connect(worker.url, pool_size=2, settings=worker.settings) as db:
        ring = await KeyRing.open(db, create_missing=False)
        async with EncryptedPostgresSaver.from_conn_string(worker.url, ring=ring) as saver:
            assert saver.ring is ring
            await _interrupt_and_resume(saver)


async def test_setup_refuses_missing_checkpoint_tables(fresh_database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database_url, autocommit=True) as c:
        await c.execute("DROP TABLE checkpoint_migrations")
    settings = Settings(database_url=fresh_database_url, kek=LocalKek(TEST_KEK))
    with pytest.raises(SchemaOutOfDate, match="checkpoint tables at None"):
        async with EncryptedPostgresSaver.from_conn_string(fresh_database_url, settings=settings):
            pass


async def test_a_pipe_of_the_callers_connection_is_used_like_langgraphs(
    worker: WorkerLogin,
) -> None:
    async with (
        await Database.connect(worker.url, pool_size=2, settings=worker.settings) as db,
        await psycopg.AsyncConnection.connect(
            worker.url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as conn,
    ):
        ring = await KeyRing.open(db, create_missing=False)
        async with conn.pipeline() as pipe:
            saver = EncryptedPostgresSaver(conn, ring, pipe=pipe)
            assert saver.pipe is pipe
            config = await _interrupt_and_resume(saver)
            # Everything reached the database: another connection reads it.
            async with EncryptedPostgresSaver.from_conn_string(worker.url, ring=ring) as other:
                latest = await other.aget_tuple(config)
                assert latest is not None
                assert latest.checkpoint["channel_values"]["note"] == "reviewed: yes"


def test_graph_invoke_runs_synchronously_without_an_event_loop(worker: WorkerLogin) -> None:
    with pytest.raises(RuntimeError, match="no running event loop"):
        asyncio.get_running_loop()  # plain sync code, as `graph.invoke` users write it
    with EncryptedPostgresSaver.from_conn_string_sync(
        worker.url, settings=worker.settings
    ) as saver:
        assert saver.loop is not None and threading.current_thread() is threading.main_thread()
        graph, config = review_graph(saver), thread()
        out = graph.invoke({"messages": [HumanMessage(content="refund?")]}, config)
        assert out["__interrupt__"][0].value["question"] == "approve the refund?"
        state = graph.get_state(config)
        assert state.next == ("review",) and state.values["note"] == "draft ready"
        done = graph.invoke(Command(resume="approved"), config)
        assert done["note"] == "reviewed: approved" and len(done["messages"]) == 3
        assert len(list(graph.get_state_history(config))) == 4
        assert saver.get_tuple(config) is not None

        # DeltaChannel state rebuilds through the sync bridge of the history walk.
        deltas, delta_config = delta_graph(saver), thread()
        for _ in range(3):
            deltas.invoke({"items": []}, delta_config)
        assert deltas.get_state(delta_config).values["items"] == ["item 0", "item 1", "item 2"]

        saver.delete_thread(tid(config))
        assert saver.get_tuple(config) is None
    assert not saver.loop.is_running()  # the loop's thread is gone with the block


async def test_sync_calls_from_other_threads_reach_a_saver_made_on_a_running_loop(
    worker: WorkerLogin,
) -> None:
    async with EncryptedPostgresSaver.from_conn_string(
        worker.url, settings=worker.settings
    ) as saver:
        graph, config = review_graph(saver), thread()
        first = {"messages": [HumanMessage(content="refund?")]}
        out = await asyncio.to_thread(graph.invoke, first, config)
        assert out["__interrupt__"]
        done = await asyncio.to_thread(graph.invoke, Command(resume="ok"), config)
        assert done["note"] == "reviewed: ok"
        # On the saver's own loop a sync call would block it: refused, as LangGraph's is.
        with pytest.raises(asyncio.InvalidStateError):
            saver.get_tuple(config)


# -- DeltaChannel history: the results of LangGraph's Postgres fast path ------------------------

CHANNEL = "items"


async def _chain(saver: AsyncPostgresSaver, seed: Any) -> Any:
    """Four checkpoints with a write each; `seed` stored at the second, none after it (the
    chain of langgraph-checkpoint-postgres's own seed tests)."""
    thread_id, parent = str(uuid4()), None
    for step in range(4):
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        checkpoint: Checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        new_versions: dict[str, Any] = {}
        if step == 1:
            checkpoint["channel_values"][CHANNEL] = seed
            new_versions[CHANNEL] = "v1"
        checkpoint["channel_versions"][CHANNEL] = "v1" if step == 1 else f"v{step}"
        metadata: Any = {"source": "loop", "step": step, "parents": {}}
        parent = await saver.aput(config, checkpoint, metadata, new_versions)
        await saver.aput_writes(parent, [(CHANNEL, f"w{step}")], str(uuid4()))
    return parent


async def _history(saver: AsyncPostgresSaver, seed: Any) -> DeltaChannelHistory:
    head = await _chain(saver, seed)
    history = await saver.aget_delta_channel_history(config=head, channels=[CHANNEL])
    return history[CHANNEL]


def _shown(entry: DeltaChannelHistory) -> tuple[Any, list[Any]]:
    return entry.get("seed", "<no seed>"), [write[2] for write in entry["writes"]]


@pytest.mark.parametrize(
    "seed",
    [None, 42, "x", 3.5, True, [10, 20], _DeltaSnapshot([10, 20]), _DeltaSnapshot(True)],
    ids=repr,
)
async def test_delta_histories_are_langgraphs_and_a_stored_none_is_no_seed(
    worker: WorkerLogin, seed: Any
) -> None:
    async with EncryptedPostgresSaver.from_conn_string(
        worker.url, settings=worker.settings
    ) as saver:
        plain = AsyncPostgresSaver(saver.conn)  # LangGraph's fast path, on rows in clear
        expected = _shown(await _history(plain, seed))
        assert _shown(await _history(saver, seed)) == expected
    if seed is None:  # a JSON null is no stored value: the walk goes back to the root
        assert expected == ("<no seed>", ["w0", "w1", "w2"])
    else:
        assert expected == (seed, ["w1", "w2"])


async def test_copy_thread_reseals_a_thread_that_then_runs_on_by_itself(
    worker: WorkerLogin,
) -> None:
    async with EncryptedPostgresSaver.from_conn_string(
        worker.url, settings=worker.settings
    ) as saver:
        graph, source, copy = review_graph(saver), thread(), thread()
        await graph.ainvoke({"messages": [HumanMessage(content="refund?")]}, source)
        await saver.acopy_thread(tid(source), tid(copy))
        copied = await graph.aget_state(copy)
        assert copied.next == ("review",) and copied.interrupts  # the pending write came along
        assert copied.values == (await graph.aget_state(source)).values

        # The copy resumes on its own; the source is still waiting.
        done = await graph.ainvoke(Command(resume="from the copy"), copy)
        assert done["note"] == "reviewed: from the copy"
        assert (await graph.aget_state(source)).next == ("review",)
        history = [s.config async for s in graph.aget_state_history(source)]
        assert len(history) == 3

        # DeltaChannel state rebuilds on the copy; the sync bridge copies from another thread.
        deltas, delta_source, delta_copy = delta_graph(saver), thread(), thread()
        for _ in range(3):
            await deltas.ainvoke({"items": []}, delta_source)
        await asyncio.to_thread(saver.copy_thread, tid(delta_source), tid(delta_copy))
        values = (await deltas.aget_state(delta_copy)).values
        assert values["items"] == ["item 0", "item 1", "item 2"]

        # A thread with plaintext rows is refused whole: nothing of it is copied.
        plain, plain_source, plain_copy = AsyncPostgresSaver(saver.conn), thread(), thread()
        await review_graph(plain).ainvoke({"messages": []}, plain_source)
        with pytest.raises(UnsupportedCheckpoint, match="is not encrypted"):
            await saver.acopy_thread(tid(plain_source), tid(plain_copy))
        assert await saver.aget_tuple(plain_copy) is None
