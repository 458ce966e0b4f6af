"""Encrypted LangGraph checkpoints: nothing readable at rest, rows bound to their place, plaintext
refused unless migrating, rotation across processes, and runs that move between processes."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from adapters.langgraph import (
    CheckpointSealer,
    EncryptedPostgresSaver,
    PlaintextCheckpoint,
    encrypted_checkpointer,
    key_usage,
    reencrypt_checkpoints,
)
from adapters.langgraph import _envelope as env
from ledger.errors import DecryptionFailed, KekMismatch
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database

from .support.checkpoint_workers import review_graph
from .support.pg_tools import client_tool
from .support.processes import finish, run_cli, start_worker

CANARY = "CANARY-4111-1111-1111-1111"
Opened = tuple[Database, KeyRing, EncryptedPostgresSaver]


def new_kek() -> LocalKek:
    return LocalKek(os.urandom(32))


def b64(key: bytes) -> str:
    """A KEK as SIGNOFF_KEK holds it, for other processes."""
    return base64.b64encode(key).decode()


@asynccontextmanager
async def opened(
    url: str, kek: LocalKek, *, allow_plaintext: bool = False
) -> AsyncIterator[Opened]:
    async with await Database.connect(url, pool_size=2) as db:
        ring = await KeyRing.open(db, kek)
        async with encrypted_checkpointer(db, ring, allow_plaintext=allow_plaintext) as saver:
            yield db, ring, saver


async def execute(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(query, params or None)
        return await cur.fetchall() if cur.description else []


async def pg_dump(url: str) -> str:
    program = await client_tool(url, "pg_dump")
    process = await asyncio.create_subprocess_exec(
        program, url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def until(check: Callable[[], Awaitable[bool]], within: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def config(thread_id: str, **configurable: Any) -> Any:
    return {"configurable": {"thread_id": thread_id, **configurable}}


class CanaryState(TypedDict, total=False):
    note: str
    messages: Annotated[list[AnyMessage], add_messages]


def _remember(state: CanaryState) -> CanaryState:
    return {"note": f"card {CANARY}", "messages": [AIMessage(content=f"on file: {CANARY}")]}


def _confirm(state: CanaryState) -> CanaryState:
    return {"note": str(interrupt({"confirm": CANARY}))}


def canary_graph(saver: AsyncPostgresSaver) -> Any:
    graph = StateGraph(CanaryState)
    graph.add_node("remember", _remember)
    graph.add_node("confirm", _confirm)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "confirm")
    graph.add_edge("confirm", END)
    return graph.compile(checkpointer=saver)


def _append(state: list[str] | None, writes: Sequence[list[str]]) -> list[str]:
    return (state or []) + [x for batch in writes for x in batch]


class DeltaState(TypedDict, total=False):
    items: Annotated[list[str], DeltaChannel(_append, snapshot_frequency=2)]


def _add_item(state: DeltaState) -> DeltaState:
    return {"items": [f"item {len(state.get('items') or [])}"]}


def delta_graph(saver: AsyncPostgresSaver) -> Any:
    graph = StateGraph(DeltaState)
    graph.add_node("add", _add_item)
    graph.add_edge(START, "add")
    graph.add_edge("add", END)
    return graph.compile(checkpointer=saver)


async def test_no_secret_reaches_the_database_but_the_plain_saver_leaks_it(
    fresh_database_url: str,
) -> None:
    url = fresh_database_url
    secret = config("t-enc", user_id=CANARY) | {"metadata": {"ticket": CANARY}}
    async with opened(url, new_kek()) as (_, _, saver):
        graph = canary_graph(saver)
        out = await graph.ainvoke({"messages": [HumanMessage(content=f"card {CANARY}")]}, secret)
        assert out["__interrupt__"][0].value == {"confirm": CANARY}
        state = await graph.aget_state(secret)
        assert state.values["note"] == f"card {CANARY}" and state.next == ("confirm",)
        assert state.metadata["user_id"] == CANARY
        assert state.interrupts[0].value == {"confirm": CANARY}  # a pending write, decrypted

        dump = await pg_dump(url)
        assert "checkpoint_writes" in dump and "ckpt-" in dump  # the rows are in the dump
        assert CANARY not in dump
        assert CANARY.encode().hex() not in dump.lower()  # bytea columns dump as hex

        # The same run on LangGraph's plain saver leaves the canary readable: the check can fail.
        plain = AsyncPostgresSaver(saver.conn)
        plain_config = config("t-plain", user_id=CANARY) | {"metadata": {"ticket": CANARY}}
        await canary_graph(plain).ainvoke({"messages": [HumanMessage(content="hi")]}, plain_config)
        dump = await pg_dump(url)
        assert CANARY in dump
        assert CANARY.encode().hex() in dump.lower()


async def test_values_are_serialized_off_the_event_loop_and_sealed_on_it(
    fresh_database_url: str,
) -> None:
    """A large state is serialized in a worker thread, as LangGraph's saver does; sealing runs
    on the loop (in the thread, each call of the cipher and the nonce that let go of the GIL
    waited for the loop to hand it back)."""
    loop_thread = threading.get_ident()
    serialized: set[int] = set()
    sealed: set[int] = set()

    class Recording(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            serialized.add(threading.get_ident())
            return super().dumps_typed(obj)

    async with opened(fresh_database_url, new_kek()) as (_, ring, plain):
        saver = EncryptedPostgresSaver(plain.conn, ring, serde=Recording())
        seal = saver.sealer.seal

        def recording_seal(serde_type: str, data: bytes, parts: tuple[str, ...]) -> Any:
            sealed.add(threading.get_ident())
            return seal(serde_type, data, parts)

        saver.sealer.seal = recording_seal  # type: ignore[method-assign]
        graph = canary_graph(saver)
        await graph.ainvoke({"messages": [HumanMessage(content="hi")]}, config("t-threads"))
        assert (await graph.aget_state(config("t-threads"))).values["note"] == f"card {CANARY}"
    assert serialized and loop_thread not in serialized
    assert sealed == {loop_thread}


async def test_rows_moved_to_another_place_do_not_open(fresh_database_url: str) -> None:
    url = fresh_database_url
    async with opened(url, new_kek()) as (_, _, saver):
        await review_graph(saver).ainvoke({"messages": [HumanMessage(content="hi")]}, config("a"))
        original = await saver.aget_tuple(config("a"))
        assert original is not None and original.pending_writes

        # Copying through the saver re-encrypts for the new place and works.
        copy: Any = {"configurable": {"thread_id": "c", "checkpoint_ns": ""}}
        checkpoint = original.checkpoint
        await saver.aput(copy, checkpoint, original.metadata, checkpoint["channel_versions"])
        copied = await saver.aget_tuple(config("c"))
        assert copied is not None
        assert copied.checkpoint["channel_values"] == checkpoint["channel_values"]

        # Copying rows in SQL does not: a pending write...
        await execute(
            url,
            "INSERT INTO checkpoint_writes SELECT 'c', checkpoint_ns, checkpoint_id, task_id, idx,"
            " channel, type, blob, task_path FROM checkpoint_writes WHERE thread_id = 'a'",
        )
        with pytest.raises(DecryptionFailed, match="pending write \\(thread 'c'"):
            await saver.aget_tuple(config("c"))
        await execute(url, "DELETE FROM checkpoint_writes WHERE thread_id = 'c'")

        # ...a channel value...
        await execute(
            url,
            "UPDATE checkpoint_blobs c SET type = a.type, blob = a.blob FROM checkpoint_blobs a"
            " WHERE a.thread_id = 'a' AND c.thread_id = 'c' AND a.channel = 'messages'"
            " AND c.channel = 'messages' AND a.version = c.version",
        )
        with pytest.raises(
            DecryptionFailed,
            match="checkpoint blob \\(thread 'c', namespace '', channel 'messages'",
        ):
            await saver.aget_tuple(config("c"))

        # ...a whole checkpoint row...
        await execute(
            url,
            "INSERT INTO checkpoints SELECT 'd', checkpoint_ns, checkpoint_id,"
            " parent_checkpoint_id, type, checkpoint, metadata FROM checkpoints"
            " WHERE thread_id = 'a'",
        )
        with pytest.raises(DecryptionFailed, match=r"checkpoint '.+' \(thread 'd'"):
            await saver.aget_tuple(config("d"))

        # ...and an older version of a value in place of the newest one, in the same thread.
        versions = await execute(
            url,
            "SELECT version, type, blob FROM checkpoint_blobs"
            " WHERE thread_id = 'a' AND channel = 'messages' ORDER BY version",
        )
        assert len(versions) >= 2
        await execute(
            url,
            "UPDATE checkpoint_blobs SET type = %s, blob = %s"
            " WHERE thread_id = 'a' AND channel = 'messages' AND version = %s",
            versions[0][1],
            versions[0][2],
            versions[-1][0],
        )
        with pytest.raises(DecryptionFailed, match="channel 'messages', version"):
            await saver.aget_tuple(config("a"))

        # Editing the clear copy of the versions (to point at that older blob) is caught too.
        await execute(
            url,
            "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint,"
            " '{channel_versions,messages}', to_jsonb(%s::text)) WHERE thread_id = 'a'",
            versions[0][0],
        )
        with pytest.raises(DecryptionFailed, match="clear field 'channel_versions' was edited"):
            await saver.aget_tuple(config("a"))


async def test_plaintext_rows_are_refused_unless_migrating_on_purpose(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, kek_key = fresh_database_url, os.urandom(32)
    kek = LocalKek(kek_key)
    async with opened(url, kek) as (_, ring, saver):
        plain = AsyncPostgresSaver(saver.conn)
        await review_graph(plain).ainvoke({"messages": [HumanMessage(content="x")]}, config("old"))
        for _ in range(3):
            await delta_graph(plain).ainvoke({"items": []}, config("old-delta"))
        legacy = await plain.aget_tuple(config("old"))
        legacy_delta = (await delta_graph(plain).aget_state(config("old-delta"))).values
        assert legacy is not None and legacy_delta == {"items": ["item 0", "item 1", "item 2"]}

        with pytest.raises(PlaintextCheckpoint, match=r"checkpoint '.+' \(thread 'old'"):
            await saver.aget_tuple(config("old"))

        # A downgraded value: a plaintext blob with a plausible type in an encrypted thread.
        await review_graph(saver).ainvoke({"messages": [HumanMessage(content="y")]}, config("new"))
        forged = saver.serde.dumps_typed([HumanMessage(content="forged")])
        await execute(
            url,
            "UPDATE checkpoint_blobs SET type = %s, blob = %s"
            " WHERE thread_id = 'new' AND channel = 'messages'",
            *forged,
        )
        with pytest.raises(PlaintextCheckpoint, match=r"blob \(thread 'new'.+type 'msgpack'"):
            await saver.aget_tuple(config("new"))

        # The migration path reads them...
        lenient = EncryptedPostgresSaver(saver.conn, ring, allow_plaintext=True)
        read = await lenient.aget_tuple(config("old"))
        assert (
            read is not None
            and read.checkpoint["channel_values"] == legacy.checkpoint["channel_values"]
            and read.pending_writes == legacy.pending_writes
        )
        assert (await delta_graph(lenient).aget_state(config("old-delta"))).values == legacy_delta

        # ...leaves them alone unless asked...
        plaintext_rows = (await key_usage(saver)).plaintext()
        report = await reencrypt_checkpoints(saver)
        assert report.left == 0 and report.after.plaintext() == plaintext_rows > 0

        # ...and converts them when asked (here through the command).
        monkeypatch.setenv("SIGNOFF_KEK", b64(kek_key))
        cli = await run_cli(
            "checkpoints", "reencrypt", "--include-plaintext", "--json", database_url=url
        )
        assert cli.code == 0, cli.stderr
        result = json.loads(cli.stdout)
        assert result["plaintext"] == 0 and result["failures"] == [] and result["left"] == 0
        assert sum(t["converted"] for t in result["tables"].values()) == plaintext_rows

        converted = await saver.aget_tuple(config("old"))
        assert converted is not None
        assert converted.checkpoint["channel_values"] == legacy.checkpoint["channel_values"]
        assert converted.pending_writes == legacy.pending_writes
        assert (await delta_graph(saver).aget_state(config("old-delta"))).values == legacy_delta
        # The migrated threads go on under encryption.
        done = await review_graph(saver).ainvoke(Command(resume="fine"), config("old"))
        assert done["note"] == "reviewed: fine"
        more = await delta_graph(saver).ainvoke({"items": []}, config("old-delta"))
        assert more["items"][-1] == "item 3"
        assert (await key_usage(saver)).plaintext() == 0


async def test_langgraph_operations_work_on_sealed_rows(fresh_database_url: str) -> None:
    async with opened(fresh_database_url, new_kek()) as (_, _, saver):
        graph = review_graph(saver)
        for thread_id, user in (("h1", "ann"), ("h2", "bob")):
            run = config(thread_id, user_id=user)
            await graph.ainvoke({"messages": [HumanMessage(content="hi")]}, run)
            await graph.ainvoke(Command(resume="ok"), run)
        history = [s async for s in graph.aget_state_history(config("h1"))]
        assert [dict(s.metadata or {})["source"] for s in history] == [
            "loop",
            "loop",
            "loop",
            "input",
        ]
        loops = [s async for s in graph.aget_state_history(config("h1"), filter={"source": "loop"})]
        assert len(loops) == 3
        # A sealed key (user_id) and a clear one (step) together, across threads, with a limit.
        ann = [t async for t in saver.alist(None, filter={"user_id": "ann", "step": 1})]
        assert [t.config["configurable"]["thread_id"] for t in ann] == ["h1"]
        two = [t async for t in saver.alist(None, filter={"user_id": "bob"}, limit=2)]
        assert len(two) == 2 and {dict(t.metadata)["user_id"] for t in two} == {"bob"}

        await saver.aprune(["h1"], strategy="keep_latest")
        kept = [t async for t in saver.alist(config("h1"))]
        assert len(kept) == 1 and kept[0].checkpoint["channel_values"]["note"] == "reviewed: ok"
        await saver.adelete_thread("h2")
        assert await saver.aget_tuple(config("h2")) is None

        # DeltaChannel threads rebuild their history through the sealed rows.
        for _ in range(5):
            await delta_graph(saver).ainvoke({"items": []}, config("d"))
        state = await delta_graph(saver).aget_state(config("d"))
        assert state.values["items"] == [f"item {i}" for i in range(5)]
        keys = "SELECT DISTINCT jsonb_object_keys({}) FROM checkpoints"
        in_clear = await execute(fresh_database_url, keys.format("checkpoint"))
        assert {k for (k,) in in_clear} == {
            *env.CLEAR_CHECKPOINT_KEYS,
            "channel_values",
            env.ENVELOPE,
        }
        in_clear = await execute(fresh_database_url, keys.format("metadata"))
        assert {k for (k,) in in_clear} <= {*env.CLEAR_METADATA_KEYS, env.ENVELOPE}


async def test_an_interrupted_run_resumes_in_another_process(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key = fresh_database_url, os.urandom(32)
    kek = LocalKek(key)
    monkeypatch.setenv("SIGNOFF_KEK", b64(key))
    async with opened(url, kek) as (_, _, saver):
        started = json.loads(await finish(await start_worker("review", url, "refund-7")))
        assert started["interrupt"] == {"question": "approve the refund?", "pid": started["pid"]}
        resumed = json.loads(
            await finish(await start_worker("review", url, "refund-7", "approved by dana"))
        )
        assert resumed["pid"] != started["pid"]
        assert resumed == {
            "pid": resumed["pid"],
            "note": "reviewed: approved by dana",
            "messages": 3,
        }
        state = await review_graph(saver).aget_state(config("refund-7"))
        assert state.next == () and state.values["note"] == "reviewed: approved by dana"


async def test_a_rotation_reaches_a_running_writer_and_reencrypt_moves_every_row(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, key = fresh_database_url, os.urandom(32)
    kek = LocalKek(key)
    monkeypatch.setenv("SIGNOFF_KEK", b64(key))
    monkeypatch.delenv("SIGNOFF_KEK_FILE", raising=False)
    monkeypatch.setenv("SIGNOFF_KEY_REFRESH_SECONDS", "0.5")
    async with opened(url, kek) as (_, ring, saver):
        old = ring.active_key_id(Purpose.CHECKPOINT)

        async def rows_under(key_id: str) -> int:
            usage = await key_usage(saver)
            return sum(keys.get(key_id, 0) for keys in usage.rows.values())

        stop = tmp_path / "stop"
        writer = await start_worker("checkpoint-loop", url, str(stop))
        try:
            await until(lambda: _at_least(rows_under(old), 20))
            first = [t async for t in saver.alist(config("loop-0"))][-1]

            rotated = await run_cli("keys", "rotate", "checkpoint", "--json", database_url=url)
            assert rotated.code == 0, rotated.stderr
            new = json.loads(rotated.stdout)["key_id"]
            await until(lambda: _at_least(rows_under(new), 20))
            # Rows under the old key still open...
            assert await saver.aget_tuple(first.config) is not None
            # ...and move to the new one while the writer keeps writing.
            report = await reencrypt_checkpoints(saver, batch_size=7)
            assert report.key_id == new and report.failures == [] and report.left == 0
            assert sum(t.converted for t in report.tables.values()) > 0
        finally:
            await asyncio.to_thread(stop.touch)
            written = json.loads(await finish(writer))
        assert written["key_ids"] == [old, new] and written["runs"] > 0

        cli = await run_cli("checkpoints", "reencrypt", "--json", database_url=url)
        assert cli.code == 0, cli.stderr
        assert json.loads(cli.stdout)["left"] == 0
        assert await rows_under(old) == 0
        retired = await run_cli("keys", "retire", old, database_url=url)
        assert retired.code == 0, retired.stderr
        await ring.refresh()

        # Everything still opens, and the retired key never encrypts again.
        listed = [t async for t in saver.alist(None)]
        assert len(listed) == sum((await key_usage(saver)).rows["checkpoints"].values())
        await review_graph(saver).ainvoke({"messages": [HumanMessage(content="x")]}, config("z"))
        assert await rows_under(old) == 0
        status = await run_cli("checkpoints", "status", "--json", database_url=url)
        assert status.code == 0, status.stderr
        assert json.loads(status.stdout)["old_key_rows"] == 0


async def _at_least(count: Awaitable[int], minimum: int) -> bool:
    return await count >= minimum


class _ConcurrentWriter(CheckpointSealer):
    """Opens values like the real sealer, but lets a worker rewrite the row being re-encrypted
    between the read and the update (the race the conditional UPDATE must win)."""

    def __init__(self, saver: EncryptedPostgresSaver, rewrite: Callable[[], Awaitable[None]]):
        super().__init__(saver.ring, saver.serde)
        self.rewrite: Callable[[], Awaitable[None]] | None = rewrite

    async def open(
        self, key_id: str, serde_type: str, sealed: bytes | None, parts: env.Parts
    ) -> bytes:
        if parts[0] == "checkpoint" and self.rewrite is not None:
            rewrite, self.rewrite = self.rewrite, None
            await rewrite()
        return await super().open(key_id, serde_type, sealed, parts)


async def test_reencrypt_never_overwrites_a_row_rewritten_meanwhile(
    fresh_database_url: str,
) -> None:
    url = fresh_database_url
    async with opened(url, new_kek()) as (_, ring, saver):
        await review_graph(saver).ainvoke({"messages": [HumanMessage(content="x")]}, config("w"))
        latest = await saver.aget_tuple(config("w"))
        assert latest is not None
        await ring.rotate(Purpose.CHECKPOINT)
        query = (
            "SELECT checkpoint::text FROM checkpoints WHERE thread_id = 'w' AND checkpoint_id = %s"
        )
        rewritten: list[str] = []

        checkpoint_id = latest.config["configurable"]["checkpoint_id"]

        async def rewrite() -> None:  # a worker saves the same checkpoint again, re-sealed
            assert latest is not None and latest.parent_config is not None
            await saver.aput(latest.parent_config, latest.checkpoint, latest.metadata, {})
            rewritten.append((await execute(url, query, checkpoint_id))[0][0])

        saver.sealer = _ConcurrentWriter(saver, rewrite)
        report = await reencrypt_checkpoints(saver)
        assert rewritten and report.tables["checkpoints"].skipped >= 1
        assert report.left == 0 and report.failures == []
        # The stale update did not land: the row is still what the worker wrote, and opens.
        assert (await execute(url, query, checkpoint_id))[0][0] == rewritten[0]
        assert await saver.aget_tuple(latest.config) is not None


async def _table_digests(url: str) -> list[tuple[Any, ...]]:
    return await execute(
        url,
        "SELECT (SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM checkpoints t),"
        " (SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM checkpoint_blobs t),"
        " (SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM checkpoint_writes t),"
        " (SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM data_keys t),"
        " (SELECT count(*) FROM events)",
    )


async def test_a_wrong_or_missing_kek_names_the_kek_needed_and_changes_nothing(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, right = fresh_database_url, new_kek()
    async with opened(url, right) as (_, ring, saver):
        await review_graph(saver).ainvoke({"messages": [HumanMessage(content="x")]}, config("k"))
        await ring.rotate(Purpose.CHECKPOINT)  # so a re-encryption would have work to do
    before = await _table_digests(url)

    wrong_key = os.urandom(32)
    wrong = LocalKek(wrong_key)
    async with await Database.connect(url) as db:
        with pytest.raises(KekMismatch, match=right.kek_id):
            await KeyRing.open(db, wrong)

    monkeypatch.delenv("SIGNOFF_KEK", raising=False)
    monkeypatch.delenv("SIGNOFF_KEK_FILE", raising=False)
    missing = await run_cli("checkpoints", "reencrypt", database_url=url)
    assert missing.code == 2 and f"wrapped by KEK {right.kek_id}" in missing.stderr

    monkeypatch.setenv("SIGNOFF_KEK", b64(wrong_key))
    mismatched = await run_cli("checkpoints", "reencrypt", database_url=url)
    assert mismatched.code == 2
    assert f"wrapped by KEK {right.kek_id}" in mismatched.stderr
    assert f"configured KEK is {wrong.kek_id}" in mismatched.stderr
    worker = await start_worker("review", url, "k2")
    _, stderr = await asyncio.wait_for(worker.communicate(), 120)
    assert worker.returncode != 0 and right.kek_id in stderr.decode()

    assert await _table_digests(url) == before
