"""`signoff serve` replicas as real processes, configured from the environment as an operator
would, and waited on as an orchestrator waits: until `/readyz` answers 200."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx

from .processes import ROOT
from .until import until

__all__ = ["Replicas", "serve_replicas"]


@dataclass
class Replicas:
    urls: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    """What each process wrote on stderr, once the block has ended."""


async def _ready(client: httpx.AsyncClient, url: str, process: asyncio.subprocess.Process) -> bool:
    if process.returncode is not None:
        raise AssertionError(f"the replica at {url} exited {process.returncode}")
    try:
        return (await client.get(f"{url}/readyz")).status_code == 200
    except httpx.TransportError:  # not answering yet
        return False


@asynccontextmanager
async def serve_replicas(
    env: dict[str, str], count: int = 2, within: float = 60
) -> AsyncIterator[Replicas]:
    """Start `count` `signoff serve` processes with the environment `env`, yield once each
    one's `/readyz` answers 200 (their `--json` line only tells where they listen); stop them
    (SIGTERM) when the block ends."""
    command = (sys.executable, "-m", "adapters.cli", "serve", "--port", "0", "--json")
    pipe = asyncio.subprocess.PIPE
    processes = [
        await asyncio.create_subprocess_exec(*command, cwd=ROOT, env=env, stdout=pipe, stderr=pipe)
        for _ in range(count)
    ]
    replicas = Replicas()
    try:
        for process in processes:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), within)
            assert line, "the service exited before it listened"
            replicas.urls.append(json.loads(line)["url"])
        async with httpx.AsyncClient(timeout=within) as client:
            for url, process in zip(replicas.urls, processes, strict=True):
                await until(
                    lambda: _ready(client, url, process),  # noqa: B023 -- awaited here
                    within,
                    f"{url}/readyz answers 200",
                )
        yield replicas
    finally:
        for process in processes:
            if process.returncode is None:
                process.terminate()
        replicas.said = [(await process.communicate())[1].decode() for process in processes]
