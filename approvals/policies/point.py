"""The policy decision point: allow, deny or require approval for one call, from the active
policy set, the call's tool and canonical arguments, who asks and the run's history.

No set published, or a set of mode off: the tool's own rule decides (`fallback`: its approval
policy, or None to run it), and nothing is recorded. Mode enforce: the set decides. Mode
log_only: the tool's own rule decides and the set's outcome is recorded beside it.

Fail closed: a set that cannot be read, a request Cedar cannot build (arguments that are not
what the tool's schema says), an evaluation error and a timeout all deny the call, with the
reason recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ledger.calls.history import RunHistory, run_history
from ledger.errors import DatabaseUnavailable
from ledger.log import get_logger
from ledger.store.notify import Listener

from ..errors import InvalidApprovalRequest
from ..model import ApprovalPolicy
from .cedar import Decided, evaluate
from .model import CallFacts, Mode, Outcome, PolicyStamp, Verdict
from .schema import EFFECT_GROUP, RegisteredTool, Unrepresentable, context_of
from .sets import CHANNEL, STREAM_PREFIX, ActiveSet, PolicySets, PolicyUnreadable

__all__ = ["DEFAULT_TIMEOUT", "PolicyPoint", "own_rule"]

DEFAULT_TIMEOUT = 2.0
"""Seconds a judgment may take (reading the set and the run's history included)."""

log = get_logger(__name__)


def own_rule(fallback: ApprovalPolicy | None) -> Verdict:
    """The verdict of a tool's own rule: approval under `fallback`, else run."""
    if fallback is None:
        return Verdict(Outcome.ALLOW, reason="the tool's own rule: no approval")
    return Verdict(Outcome.APPROVAL, fallback, "the tool's own rule: approval")


class PolicyPoint:
    """Judges calls for one process. The active version is read once per call unless this
    process's listener surely heard of no newer one since it last read it (a set published
    elsewhere takes effect here once its notification arrives, within moments)."""

    def __init__(
        self,
        sets: PolicySets,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """`clock`: the time policies see as `context.now` (in the set's time zone)."""
        self.sets = sets
        self.timeout = timeout
        self.clock = clock
        self._listener = Listener.shared(sets.db, CHANNEL)
        # The active version, the listener's mark before it was read, and how many sets its
        # PolicySets had published then.
        self._head: tuple[int, tuple[int, int] | None, int] | None = None
        self._registered: dict[str, RegisteredTool] = {}

    async def close(self) -> None:
        await self._listener.close()

    async def register(self, tool: RegisteredTool) -> None:
        """Register `tool` (its effect and arguments' schema) once per process and shape: the
        schema the next published set is validated against."""
        if self._registered.get(tool.name) == tool:
            return
        await self.sets.register([tool])
        self._registered[tool.name] = tool

    async def judge(self, facts: CallFacts, fallback: ApprovalPolicy | None) -> Verdict:
        """The verdict on `facts`; `fallback` is the tool's own approval policy (None: the tool
        runs without asking), which decides when no set does.

        Raises:
            DatabaseUnavailable: the database cannot be reached (nothing could be recorded).
            CancelledError: the task was cancelled (nothing is recorded).
        """
        mine = own_rule(fallback)
        active: ActiveSet | None = None
        try:
            async with asyncio.timeout(self.timeout):
                version = await self._active_version()
                if version == 0:
                    return mine
                active = await self.sets.load(version)
                if active.published.mode is Mode.OFF:
                    return mine
                history = await self._history(active, facts)
                decided = self._decide(active, facts, history)
        except TimeoutError:
            decided = Decided(
                Outcome.DENY, (), f"the policy was not evaluated within {self.timeout:g} s"
            )
            history = None
        except PolicyUnreadable as e:
            decided = Decided(Outcome.DENY, (), str(e))
            history = None
        except DatabaseUnavailable:
            raise  # nothing could be recorded: the caller's to retry
        except Exception as e:  # anything else judging met: denied, never run unjudged
            log.warning(
                "policy evaluation failed; call denied",
                run_id=facts.run_id,
                call_id=facts.call_id,
                tool=facts.tool,
                error_type=type(e).__name__,
            )
            why = f"the policy could not be evaluated ({type(e).__name__}: {e})"
            decided = Decided(Outcome.DENY, (), why)
            history = None
        published = active.published if active is not None else None
        stamp = PolicyStamp(
            version=published.version if published is not None else 0,
            set_hash=published.set_hash if published is not None else "",
            mode=published.mode if published is not None else Mode.ENFORCE,
            outcome=decided.outcome,
            policies=decided.policies,
            reason=decided.reason,
        )
        if stamp.mode is Mode.LOG_ONLY:
            return Verdict(mine.outcome, mine.approval, mine.reason, stamp)
        approval = None
        if decided.approval_rule is not None:
            try:
                approval = decided.approval_rule.approval_policy(fallback)
            except InvalidApprovalRequest as e:
                why = f"policy {decided.approval_rule.id} gives no valid approval policy: {e}"
                stamp = PolicyStamp(
                    stamp.version, stamp.set_hash, stamp.mode, Outcome.DENY, stamp.policies, why
                )
                return Verdict(Outcome.DENY, None, why, stamp)
        if decided.outcome is Outcome.DENY:
            log.info(
                "call denied by policy",
                run_id=facts.run_id,
                call_id=facts.call_id,
                tool=facts.tool,
                policy_version=stamp.version,
                policies=list(stamp.policies),
            )
        seen = history.seen if history is not None else None
        return Verdict(decided.outcome, approval, decided.reason, stamp, seen)

    async def _active_version(self) -> int:
        here = self.sets.published_here
        if self._head is not None:
            version, mark, published = self._head
            quiet = self._listener.quiet_since(f"{STREAM_PREFIX}{version + 1}", mark)
            if quiet and published == here:
                return version
        if not self._listener.connected:
            await self._listener.start()
        mark = self._listener.mark()  # before the read: a publish after it is heard
        version = await self.sets.head()
        self._head = (version, mark, here)
        return version

    async def _history(self, active: ActiveSet, facts: CallFacts) -> RunHistory | None:
        """The run's history when a policy of the set that may apply to the call reads it
        (None: none does)."""
        if active.rules is None or not active.rules.reads_history:
            return None
        tool = active.tools.get(facts.tool)
        if tool is None or not active.rules.reads_history_of(
            tool.name, f"{EFFECT_GROUP}{tool.effect}"
        ):
            return None  # no policy that reads it applies to this tool: nothing counted
        async with self.sets.db.connection() as conn:
            return await run_history(conn, facts.run_id)

    def _decide(self, active: ActiveSet, facts: CallFacts, history: RunHistory | None) -> Decided:
        rules, actions = active.rules, active.actions
        assert rules is not None and actions is not None  # mode off is decided before
        tool = active.tools.get(facts.tool)
        if tool is None:
            return Decided(
                Outcome.DENY,
                (),
                f"tool {facts.tool!r} was not registered when policy set version "
                f"{active.published.version} was published",
            )
        if facts.effect is not tool.effect:
            return Decided(
                Outcome.DENY,
                (),
                f"tool {facts.tool!r} runs here as {facts.effect} but was registered as "
                f"{tool.effect} when policy set version {active.published.version} was "
                "published: register it again and publish",
            )
        now = self.clock().astimezone(active.zone)
        # No policy that reads the history applies to this tool: Cedar is given none of it.
        read = active.history_tools if history is not None else {}
        try:
            context = context_of(read, tool, facts.args, history or RunHistory(), now)
        except Unrepresentable as e:
            return Decided(Outcome.DENY, (), f"the call cannot be judged: {e}")
        request = {
            "principal": {"type": "Agent", "id": facts.principal.id},
            "action": {"type": "Action", "id": facts.tool},
            "resource": {"type": "Run", "id": facts.run_id},
            "context": context,
        }
        groups = sorted(facts.principal.groups)
        entities: list[dict[str, Any]] = [
            {
                "uid": {"type": "Agent", "id": facts.principal.id},
                "attrs": {},
                "parents": [{"type": "Group", "id": g} for g in groups],
            },
            *({"uid": {"type": "Group", "id": g}, "attrs": {}, "parents": []} for g in groups),
            {"uid": {"type": "Run", "id": facts.run_id}, "attrs": {}, "parents": []},
        ]
        return evaluate(rules, request, actions.with_added_json_str(json.dumps(entities)))
