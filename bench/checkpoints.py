"""Checkpoints per second of one LangGraph graph (20 supersteps, a few KB of state) on LangGraph's
plain `AsyncPostgresSaver`, on the same saver with LangGraph's `EncryptedSerializer`, and on
Signoff's `EncryptedPostgresSaver`, on the same server in the same run (rounds interleaved; each
rate is the median over the rounds, each ratio the median of the rounds' own ratios).

Prints one JSON object as its last line. The database comes from SIGNOFF_DATABASE_URL /
DATABASE_URL, else the embedded server; a scratch database is created and dropped.
`EncryptedSerializer.from_pycryptodome_aes` needs pycryptodome (the `bench` extra); without it
the same serializer runs with an AES-GCM cipher from `cryptography` (the JSON says which).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from typing import Any, TypedDict

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import CipherProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, StateGraph
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from adapters.langgraph import EncryptedPostgresSaver
from bench.common import Rounds, bench_database
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.store import Database

STEPS = 20


class State(TypedDict, total=False):
    step: int
    summary: str  # a primitive: inline in the checkpoint row
    notes: list[str]  # a list: a blob row per new version


def work(state: State) -> State:
    step = state.get("step", 0) + 1
    note = f"step {step}: " + "lorem ipsum dolor sit amet " * 12
    summary = f"after step {step}: " + "x" * 200
    return {"step": step, "summary": summary, "notes": [*state.get("notes", [])[-9:], note]}


def build(saver: BaseCheckpointSaver[Any]) -> Any:
    graph = StateGraph(State)
    graph.add_node("work", work)
    graph.add_edge(START, "work")
    graph.add_conditional_edges("work", lambda s: END if s["step"] >= STEPS else "work")
    return graph.compile(checkpointer=saver)


class AesGcmCipher(CipherProtocol):
    """What `from_pycryptodome_aes` provides, with `cryptography`'s AES-GCM instead."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(12)
        return "aesgcm", nonce + self._aead.encrypt(nonce, plaintext, None)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        return self._aead.decrypt(ciphertext[:12], ciphertext[12:], None)


def langgraph_serializer() -> tuple[EncryptedSerializer, str]:
    key = os.urandom(32)
    try:
        return EncryptedSerializer.from_pycryptodome_aes(key=key), "pycryptodome AES-EAX"
    except ImportError:
        return EncryptedSerializer(AesGcmCipher(key)), "cryptography AES-GCM (no pycryptodome)"


async def rate(graph: Any, per_run: int, seconds: float) -> tuple[int, float]:
    """(checkpoints, elapsed seconds) of running `graph` on new threads for `seconds`."""
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        await graph.ainvoke({"notes": []}, {"configurable": {"thread_id": uuid.uuid4().hex}})
        runs += 1
    return runs * per_run, time.perf_counter() - start


async def main(seconds: float, rounds: int) -> dict[str, Any]:
    async with (
        bench_database() as url,
        await Database.connect(url, pool_size=2) as db,
        AsyncConnectionPool(
            url,
            min_size=2,
            max_size=2,
            open=False,
            connection_class=AsyncConnection[DictRow],
            kwargs={"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0},
        ) as pool,
    ):
        ring = await KeyRing.open(db, LocalKek(os.urandom(32)))
        serde, cipher = langgraph_serializer()
        savers: dict[str, BaseCheckpointSaver[Any]] = {
            "baseline": AsyncPostgresSaver(pool),
            "langgraph_encrypted": AsyncPostgresSaver(pool, serde=serde),
            "ours": EncryptedPostgresSaver(pool, ring),
        }
        await AsyncPostgresSaver(pool).setup()
        graphs = {name: build(saver) for name, saver in savers.items()}
        probe: Any = {"configurable": {"thread_id": "probe"}}
        await graphs["baseline"].ainvoke({"notes": []}, probe)
        per_run = len([c async for c in savers["baseline"].alist(probe)])
        state_bytes = len(json.dumps((await graphs["baseline"].aget_state(probe)).values))
        for graph in graphs.values():  # warm up every path
            await rate(graph, per_run, 0.5)
        measured = Rounds()
        for _ in range(rounds):  # interleaved, so drift in the server hits all alike
            now: dict[str, float] = {}
            for name, graph in graphs.items():
                count, elapsed = await rate(graph, per_run, seconds)
                now[name] = count / elapsed
                measured.note(name, now[name])
            measured.compare("ratio", now["ours"], now["baseline"])
            measured.compare(
                "langgraph_encrypted_ratio", now["langgraph_encrypted"], now["baseline"]
            )
            measured.compare("ours_vs_langgraph_encrypted", now["ours"], now["langgraph_encrypted"])
    result: dict[str, Any] = {name: measured.figure(name) for name in graphs}
    for name in ("ratio", "langgraph_encrypted_ratio", "ours_vs_langgraph_encrypted"):
        result[name] = measured.ratio(name, 3)
    result.update(
        checkpoints_per_run=per_run,
        state_bytes=state_bytes,
        rounds=rounds,
        langgraph_encrypted_cipher=cipher,
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each measurement")
    parser.add_argument("--rounds", type=int, default=6, help="measurements per saver")
    args = parser.parse_args()
    configure_logging("WARNING")
    figures = asyncio.run(main(args.seconds, args.rounds))
    print(json.dumps({"benchmark": "checkpoints", "unit": "checkpoints/s", **figures}))
