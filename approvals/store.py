"""The approval store: approvals as events in the journal, decided in any process, used once.

Every change appends to the stream `approval:<id>` and writes the `approvals` projection row in
the same statement (`ledger.journal.projection.commit`). Decisions and grants are signed by the
reviewer side (a ring with the reviewer KEK); every other event is MACed (`integrity`).

`ApprovalStore` composes the store's parts, one module per job: `requests` (request, grant),
`decisions` (decide, cancel, expire, consume; the policy is `policy`'s), `confirm` (the
self-confirm tier's decisions, made at the agent), `reading` (get, find,
pending pages, wait, resume tokens), over the state and steps they share (`core`).
"""

from __future__ import annotations

from .confirm import SelfConfirmations
from .core import PageCursor
from .decisions import Decisions
from .reading import Reading
from .records import NOTIFY_CHANNEL
from .requests import Requests

__all__ = ["NOTIFY_CHANNEL", "ApprovalStore", "PageCursor"]


class ApprovalStore(Requests, Decisions, SelfConfirmations, Reading):
    """Approvals shared by every process that uses the same database."""
