"""The reviewers a test database lists: a policy that names no approvers (`ApprovalPolicy()`,
`any_reviewer=True`) admits only reviewers the directory lists, as a deployment lists its own."""

from __future__ import annotations

from approvals import ReviewerDirectory
from ledger.store import Database
from ledger.store.settings import Settings

__all__ = ["SUITE_REVIEWERS", "list_reviewers"]

SUITE_REVIEWERS = ("alice", "bob")
"""The reviewer ids most tests decide as; the session database lists them."""


async def list_reviewers(url: str, *reviewers: str) -> None:
    """Put `reviewers` (default: `SUITE_REVIEWERS`) in the directory of `url`'s database, as
    its owner (an administrator's job), with no groups."""
    # Settings of its own: the directory needs no KEK, and a test may hold a broken one in the
    # environment while a session fixture is made.
    async with await Database.connect(url, settings=Settings(database_url=url)) as db:
        directory = ReviewerDirectory(db)
        for reviewer in reviewers or SUITE_REVIEWERS:
            await directory.add(reviewer, by="admin")
