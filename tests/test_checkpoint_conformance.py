"""LangGraph's checkpointer conformance suite (`langgraph-checkpoint-conformance`) against
`EncryptedPostgresSaver` on a worker's login (only `signoff_app`), made the three ways LangGraph's
saver is: on a pool (`encrypted_checkpointer`), on one connection (`from_conn_string`), and on a
connection in pipeline mode (`from_conn_string(pipeline=True)`).

The suite's own runner (`validate`) must report full conformance, and each of its checks runs
as a test of its own. The checks of `delete_for_runs`, which the saver refuses on purpose as
LangGraph's `AsyncPostgresSaver` does (README, "Checkpoints"), are expected to raise
`NotImplementedError`: the runner reports that capability "not implemented" and leaves it out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import (
    checkpointer_test,
    validate,
)
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    Capability,
)
from langgraph.checkpoint.conformance.spec import (
    test_copy_thread,
    test_delete_for_runs,
    test_delete_thread,
    test_get_tuple,
    test_list,
    test_prune,
    test_put,
    test_put_writes,
)

from adapters.langgraph import EncryptedPostgresSaver, encrypted_checkpointer
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .support.processes import TEST_KEK
from .support.worker_login import WorkerLogin, worker_login

Check = Callable[[BaseCheckpointSaver[Any]], Coroutine[Any, Any, None]]
Opener = Callable[[], AbstractAsyncContextManager[EncryptedPostgresSaver]]

CHECKS: dict[Capability, Sequence[Check]] = {
    Capability.PUT: test_put.ALL_PUT_TESTS,
    Capability.PUT_WRITES: test_put_writes.ALL_PUT_WRITES_TESTS,
    Capability.GET_TUPLE: test_get_tuple.ALL_GET_TUPLE_TESTS,
    Capability.LIST: test_list.ALL_LIST_TESTS,
    Capability.DELETE_THREAD: test_delete_thread.ALL_DELETE_THREAD_TESTS,
    Capability.PRUNE: test_prune.ALL_PRUNE_TESTS,
    Capability.COPY_THREAD: test_copy_thread.ALL_COPY_THREAD_TESTS,
    Capability.DELETE_FOR_RUNS: test_delete_for_runs.ALL_DELETE_FOR_RUNS_TESTS,
}

# The deliberate refusals (README, "Checkpoints").
REFUSED = {
    Capability.DELETE_FOR_RUNS: "refused, as by LangGraph's AsyncPostgresSaver: run ids are in "
    "the sealed metadata, so finding a run's rows would decrypt every checkpoint",
}

KINDS = ["pool", "connection", "pipeline"]


def _params() -> list[Any]:
    params = []
    for capability, checks in CHECKS.items():
        for check in checks:
            marks = []
            if capability in REFUSED:
                marks.append(
                    pytest.mark.xfail(
                        raises=NotImplementedError, strict=True, reason=REFUSED[capability]
                    )
                )
            params.append(pytest.param(check, marks=marks, id=check.__name__.removeprefix("test_")))
    return params


@pytest.fixture(scope="module")
async def worker(server_url: str) -> AsyncIterator[WorkerLogin]:
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_conformance") as login:
        yield login


@pytest.fixture(scope="module")
async def worker_ring(worker: WorkerLogin) -> AsyncIterator[KeyRing]:
    async with await Database.connect(worker.url, pool_size=2, settings=worker.settings) as db:
        yield await KeyRing.open(db, create_missing=False)


@pytest.fixture(scope="module", params=KINDS)
def opener(request: pytest.FixtureRequest, worker: WorkerLogin, worker_ring: KeyRing) -> Opener:
    """How a saver is made: on a pool, on one connection, on one in pipeline mode."""
    kind: str = request.param
    if kind == "pool":
        return lambda: encrypted_checkpointer(worker_ring.db, worker_ring, max_size=2)
    return lambda: EncryptedPostgresSaver.from_conn_string(
        worker.url, pipeline=kind == "pipeline", settings=worker.settings
    )


@pytest.fixture(scope="module")
async def saver(opener: Opener) -> AsyncIterator[EncryptedPostgresSaver]:
    async with opener() as made:
        yield made


async def test_the_suites_runner_reports_full_conformance(opener: Opener) -> None:
    @checkpointer_test(name="EncryptedPostgresSaver")
    async def factory() -> AsyncIterator[EncryptedPostgresSaver]:
        async with opener() as made:
            yield made

    report = await validate(factory)
    results = report.results
    assert {name: r.failures for name, r in results.items() if r.failures} == {}
    assert report.conformance_level() == "FULL" and report.passed_all_base()
    detected = {name for name, result in results.items() if result.detected}
    extended = (Capability.COPY_THREAD, Capability.PRUNE)
    assert detected == {c.value for c in (*BASE_CAPABILITIES, *extended)}
    assert all(results[c.value].passed for c in (*BASE_CAPABILITIES, *extended))
    assert sum(r.tests_passed for r in results.values()) == sum(
        len(checks) for capability, checks in CHECKS.items() if capability not in REFUSED
    )


@pytest.mark.parametrize("check", _params())
async def test_conformance_check(saver: EncryptedPostgresSaver, check: Check) -> None:
    await check(saver)
