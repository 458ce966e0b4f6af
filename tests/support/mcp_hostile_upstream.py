"""An MCP server that misbehaves, for the gateway's attack tests, in a process of its own.

    python -m tests.support.mcp_hostile_upstream endless-tools

`endless-tools`: every `tools/list` page names one more tool and a next cursor, forever.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

__all__ = ["MODULE"]

MODULE = "tests.support.mcp_hostile_upstream"


async def _endless_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    page = int(params.cursor) if params is not None and params.cursor else 0
    tool = types.Tool(name=f"t{page}", input_schema={"type": "object"})
    return types.ListToolsResult(tools=[tool], next_cursor=str(page + 1))


async def _serve(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("behaviour", choices=["endless-tools"])
    parser.parse_args()
    asyncio.run(_serve(Server("signoff-hostile-upstream", on_list_tools=_endless_tools)))


if __name__ == "__main__":
    main()
