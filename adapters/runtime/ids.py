"""Call ids derived from a call's arguments, for adapters whose framework gives none (a Send
without an id, an MCP `tools/call`): the same arguments in one run are one call."""

from __future__ import annotations

from typing import Any

from approvals import ApprovalStore
from ledger.calls.service import ToolLedger
from ledger.canonical import canonical_json
from ledger.errors import UnknownCall
from ledger.keys import Purpose

__all__ = ["derived_call_id"]

_ASKED = 10_000  # approvals of one tool in one run looked through for an older id


async def derived_call_id(
    ledger: ToolLedger,
    store: ApprovalStore,
    *,
    run_id: str,
    tool: str,
    args: dict[str, Any],
    tag: bytes,
    prefix: str,
    asks: bool,
) -> str:
    """`<prefix><HMAC of tag and the arguments>`: under the key the ledger recorded the call
    with, or the store asked for its approval with (`asks`: the tool needs approval), if either
    did (a rotation since), else under the active value-MAC key."""
    ring = ledger.ring
    # `current`: within its refresh interval after a rotation, this process would derive
    # another id than one that has seen the new key, and run the call again.
    async with ring.sealing(current=Purpose.VALUE_MAC):
        message = tag + canonical_json(args).encode()
        ids = [
            f"{prefix}{ring.value_mac(message, key_id)[1][:32]}"
            for key_id in ring.live_key_ids(Purpose.VALUE_MAC)
        ]
    older = ids[1:]  # the ids under decrypt-only keys
    for call_id in older:
        try:
            await ledger.get(run_id, call_id)
            return call_id
        except UnknownCall:
            continue
    if older and asks:
        # Asked about, not yet run: keep the id the reviewers were asked about.
        asked = {a.call_id for a in await store.find(run_id=run_id, tool=tool, limit=_ASKED)}
        for call_id in older:
            if call_id in asked:
                return call_id
    return ids[0]
