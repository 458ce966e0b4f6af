"""The policy decision point: Cedar policy sets that allow, deny or require approval for each
tool call, published as signed, journaled evidence.

```
PolicySets(db, ring).register(tools)           workers: the tools and their argument schemas
PolicySets(db, ring).publish(text, by=admin)   the reviewer side: the next version, validated
PolicyPoint(sets).judge(facts, fallback)       -> Verdict(outcome, approval, reason, stamp)
```

`cedar` maps Cedar's permit/forbid to the three outcomes, `schema` makes the Cedar schema and
a call's context, `checks` is what `ledger verify` checks of the calls and sets.
"""

from .model import (
    ADMIN_GROUP,
    CallFacts,
    InvalidPolicySet,
    Mode,
    Outcome,
    PolicyConflict,
    PolicyError,
    PolicyNotPermitted,
    PolicyStamp,
    Principal,
    UnknownPolicySet,
    Verdict,
)
from .point import DEFAULT_TIMEOUT, PolicyPoint, own_rule
from .schema import RegisteredTool
from .sets import POLICY_SETS, ActiveSet, PolicySets, PolicyUnreadable, PublishedSet

__all__ = [
    "ADMIN_GROUP",
    "DEFAULT_TIMEOUT",
    "POLICY_SETS",
    "ActiveSet",
    "CallFacts",
    "InvalidPolicySet",
    "Mode",
    "Outcome",
    "PolicyConflict",
    "PolicyError",
    "PolicyNotPermitted",
    "PolicyPoint",
    "PolicySets",
    "PolicyStamp",
    "PolicyUnreadable",
    "Principal",
    "PublishedSet",
    "RegisteredTool",
    "UnknownPolicySet",
    "Verdict",
    "own_rule",
]
