"""The gateway's configuration file (TOML): its upstream servers and how Signoff treats each
tool. Every mistake is one line naming the key, raised before anything connects.

```toml
public_url = "https://signoff.example.com"   # the inbox reviewers open (else SIGNOFF_PUBLIC_URL)
namespace = true                             # list tools as "<upstream>__<tool>"
wait_seconds = 20                            # one tools/call waits this long for a reviewer

[defaults]                                   # tools that need approval and name no policy
approval = { any_reviewer = true, expires_in = "24h" }

[upstreams.payments]                         # a command spoken to over stdio ...
command = "python"
args = ["-m", "payments_server"]
[upstreams.tickets]                          # ... or a Streamable HTTP URL
url = "https://tickets.internal/mcp"

[tools.payments__refund]
effect = "single_attempt"                    # read | idempotent_write | single_attempt
approval = { approvers = ["group:finance"], quorum = 2, expires_in = "2h" }
headline = ["amount", "order_id"]
sensitive = ["note"]
irreversible = true
[tools.payments__balance]
approval = false                             # runs without asking
```
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from approvals import ApprovalPolicy, DecisionKind, InvalidApprovalRequest
from ledger.calls.model import Effect
from ledger.errors import ConfigurationError

__all__ = [
    "GatewayConfig",
    "GatewayConfigError",
    "ToolConfig",
    "UpstreamConfig",
    "load_config",
    "parse_config",
]

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_DURATION = re.compile(r"^(\d+)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_POLICY_KEYS = frozenset(
    {"approvers", "any_reviewer", "quorum", "allowed", "allow_self_approval", "expires_in"}
)
DEFAULT_WAIT_SECONDS = 20.0


class GatewayConfigError(ConfigurationError):
    """The gateway's configuration file is missing, unreadable or says something impossible."""


@dataclass(frozen=True)
class UpstreamConfig:
    """One upstream MCP server: a command (stdio) or a URL (Streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolConfig:
    """What the file says of one tool; None: take the upstream's annotations.

    Attributes:
        approval: the policy; False: no approval; None: by annotations, else the default.
    """

    effect: Effect | None = None
    approval: ApprovalPolicy | bool | None = None
    description: str = ""


@dataclass(frozen=True)
class GatewayConfig:
    """The whole file.

    Attributes:
        default_approval: the policy of a tool that needs approval and names none.
        trust_annotations: whether an upstream's `readOnlyHint` / `idempotentHint` /
            `destructiveHint` may lift the default (single attempt, approval needed).
    """

    upstreams: tuple[UpstreamConfig, ...]
    public_url: str
    tools: Mapping[str, ToolConfig] = field(default_factory=dict)
    namespace: bool = False
    wait_seconds: float = DEFAULT_WAIT_SECONDS
    default_approval: ApprovalPolicy = field(
        default_factory=lambda: ApprovalPolicy(any_reviewer=True)
    )
    trust_annotations: bool = True
    hints: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def exposed_name(self, upstream: str, tool: str) -> str:
        """The name clients see for `tool` of `upstream`."""
        return f"{upstream}__{tool}" if self.namespace else tool


def load_config(
    path: str | Path, *, public_url: str | None = None, default_public_url: str | None = None
) -> GatewayConfig:
    """Read and check the file at `path`; `public_url` (a flag) wins over the file's, which
    wins over `default_public_url` (the settings' SIGNOFF_PUBLIC_URL).

    Raises:
        GatewayConfigError: unreadable, not TOML, or a key says something impossible.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        problem = e.strerror or type(e).__name__
        raise GatewayConfigError(
            f"cannot read the gateway config {str(path)!r}: {problem}"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GatewayConfigError(f"the gateway config {str(path)!r} is not TOML: {e}") from None
    return parse_config(data, public_url=public_url, default_public_url=default_public_url)


def parse_config(
    data: Mapping[str, Any],
    *,
    public_url: str | None = None,
    default_public_url: str | None = None,
) -> GatewayConfig:
    """The configuration `data` (parsed TOML) describes. Raises: GatewayConfigError."""
    _only(data, "the config", {"public_url", "namespace", "wait_seconds", "trust_annotations",
                               "defaults", "upstreams", "tools"})  # fmt: skip
    upstreams = _table(data, "upstreams", "the config")
    if not upstreams:
        raise GatewayConfigError("the config names no [upstreams.<name>] server")
    url = public_url or data.get("public_url") or default_public_url
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+\S*$", url):
        raise GatewayConfigError(
            "public_url (the inbox reviewers open, e.g. https://signoff.example.com) is missing "
            "or not an http(s) URL: set it in the config or SIGNOFF_PUBLIC_URL"
        )
    wait = data.get("wait_seconds", DEFAULT_WAIT_SECONDS)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 600:
        raise GatewayConfigError("wait_seconds must be a number of seconds from 0 to 600")
    defaults = _table(data, "defaults", "the config")
    _only(defaults, "[defaults]", {"approval"})
    default_approval = ApprovalPolicy(any_reviewer=True)
    if "approval" in defaults:
        policy = _policy(defaults["approval"], "[defaults] approval", {})
        if not isinstance(policy, ApprovalPolicy):
            raise GatewayConfigError("[defaults] approval must be a table (a policy)")
        default_approval = policy
    tools: dict[str, ToolConfig] = {}
    hints: dict[str, Mapping[str, Any]] = {}
    for name, body in _table(data, "tools", "the config").items():
        where = f"[tools.{name}]"
        if not isinstance(body, Mapping):
            raise GatewayConfigError(f"{where} must be a table")
        tools[name], hints[name] = _tool(body, where)
    return GatewayConfig(
        upstreams=tuple(_upstream(name, body) for name, body in upstreams.items()),
        public_url=url.rstrip("/"),
        tools=tools,
        namespace=_bool(data, "namespace", "the config", False),
        wait_seconds=float(wait),
        default_approval=default_approval,
        trust_annotations=_bool(data, "trust_annotations", "the config", True),
        hints=hints,
    )


def _upstream(name: str, body: Any) -> UpstreamConfig:
    where = f"[upstreams.{name}]"
    if not _NAME.match(name):
        raise GatewayConfigError(f"{where}: a name is 1 to 64 letters, digits, '_', '-' or '.'")
    if not isinstance(body, Mapping):
        raise GatewayConfigError(f"{where} must be a table")
    _only(body, where, {"command", "args", "env", "url", "headers"})
    if ("command" in body) == ("url" in body):
        raise GatewayConfigError(f"{where} needs exactly one of command (stdio) or url (HTTP)")
    if "url" in body:
        url = body["url"]
        if not isinstance(url, str) or not re.match(r"^https?://\S+$", url):
            raise GatewayConfigError(f"{where} url must be an http(s) URL")
        return UpstreamConfig(name, url=url, headers=_strings(body, "headers", where))
    command = body["command"]
    if not isinstance(command, str) or not command:
        raise GatewayConfigError(f"{where} command must be a program name or path")
    args = body.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise GatewayConfigError(f"{where} args must be a list of strings")
    return UpstreamConfig(name, command=command, args=tuple(args), env=_strings(body, "env", where))


def _tool(body: Mapping[str, Any], where: str) -> tuple[ToolConfig, Mapping[str, Any]]:
    _only(body, where, {"effect", "approval", "description", "headline", "sensitive",
                        "irreversible"})  # fmt: skip
    effect = None
    if "effect" in body:
        try:
            effect = Effect(body["effect"])
        except ValueError:
            choices = ", ".join(e.value for e in Effect)
            raise GatewayConfigError(f"{where} effect must be one of {choices}") from None
    description = body.get("description", "")
    if not isinstance(description, str):
        raise GatewayConfigError(f"{where} description must be a string")
    hints: dict[str, Any] = {
        k: _list(body, k, where) for k in ("headline", "sensitive") if k in body
    }
    if "irreversible" in body:
        hints["irreversible"] = _bool(body, "irreversible", where, False)
    approval = _policy(body["approval"], f"{where} approval", hints) if "approval" in body else None
    return ToolConfig(effect, approval, description), hints


def _policy(value: Any, where: str, hints: Mapping[str, Any]) -> ApprovalPolicy | bool:
    """A policy table (no approvers and no any_reviewer: the self-confirm tier), or false."""
    if value is False:
        return False
    if not isinstance(value, Mapping):
        raise GatewayConfigError(f"{where} must be false or a table (a policy)")
    _only(value, where, _POLICY_KEYS)
    try:
        allowed = value.get("allowed")
        return ApprovalPolicy(
            approvers=frozenset(_list(value, "approvers", where)),
            any_reviewer=_bool(value, "any_reviewer", where, False),
            quorum=_int(value, "quorum", where, 1),
            allowed=frozenset(DecisionKind(k) for k in _list(value, "allowed", where))
            if allowed is not None
            else frozenset(DecisionKind),
            allow_self_approval=_bool(value, "allow_self_approval", where, False),
            expires_in=_duration(value.get("expires_in", "24h"), f"{where} expires_in"),
            headline=tuple(hints.get("headline", ())),
            sensitive=frozenset(hints.get("sensitive", ())),
            irreversible=bool(hints.get("irreversible", False)),
        )
    except (InvalidApprovalRequest, ValueError, TypeError) as e:
        raise GatewayConfigError(f"{where}: {e}") from None


def _duration(value: Any, where: str) -> timedelta | None:
    """Seconds, or "<n>s|m|h|d", or "never"."""
    if value == "never":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=value)
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match is None or int(match[1]) == 0:
        raise GatewayConfigError(f'{where} must be seconds, "<n>s|m|h|d" or "never"')
    return timedelta(seconds=int(match[1]) * _UNITS[match[2]])


def _only(data: Mapping[str, Any], where: str, keys: set[str] | frozenset[str]) -> None:
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise GatewayConfigError(f"{where} has an unknown key {unknown[0]!r}")


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise GatewayConfigError(f"{where}: {key} must be a table")
    return value


def _bool(data: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise GatewayConfigError(f"{where} {key} must be true or false")
    return value


def _int(data: Mapping[str, Any], key: str, where: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise GatewayConfigError(f"{where} {key} must be a whole number")
    return value


def _list(data: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GatewayConfigError(f"{where} {key} must be a list of strings")
    return value


def _strings(data: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = data.get(key, {})
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise GatewayConfigError(f"{where} {key} must be a table of strings")
    return dict(value)
