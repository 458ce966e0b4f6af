"""The Cedar schema policies are validated against, made from the registered tools, and the
Cedar values of one call's context.

Entities: `Agent` (the principal, a member of its `Group`s) and `Run` (the resource). Actions:
one per tool, `Action::"<tool>"`, in its effect's group (`Action::"effect:read"`,
`Action::"effect:idempotent_write"`, `Action::"effect:single_attempt"`). Context:

- `input`: the call's arguments, typed by the tool's JSON Schema: `string`, `integer` (Long),
  `number` (`decimal`, at most 4 decimal places), `boolean`, arrays of one such type (Set) and
  objects of them (Record); properties of any other shape are left out of `input`;
- `now`: `hour`, `minute`, `weekday` (1 Monday .. 7 Sunday) and `date` (`YYYY-MM-DD`) in the
  set's time zone;
- `history`: for every registered tool, `calls` and `sums` (of its numeric top-level
  arguments) over the whole run, and the same as `hour` (since the top of the UTC hour) and
  `day` (since UTC midnight).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from ledger.calls.history import RunHistory, ToolTally
from ledger.calls.model import Effect

__all__ = [
    "EFFECT_GROUP",
    "RegisteredTool",
    "Unrepresentable",
    "cedar_schema",
    "context_of",
    "numeric_arguments",
]

EFFECT_GROUP = "effect:"
_MAX_LONG = 2**63 - 1
_DECIMAL_PLACES = 4
_DECIMAL_MAX = Decimal("922337203685477.5807")


class Unrepresentable(ValueError):
    """A value Cedar cannot hold as its tool's schema types it."""


@dataclass(frozen=True)
class RegisteredTool:
    """A tool as workers registered it: its effect and its arguments' JSON Schema."""

    name: str
    effect: Effect
    args_schema: Mapping[str, Any]


def _cedar_type(schema: Any) -> dict[str, Any] | None:
    """The Cedar type of a JSON Schema, or None when Cedar has no plain equivalent."""
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if kind == "string":
        return {"type": "String"}
    if kind == "integer":
        return {"type": "Long"}
    if kind == "number":
        return {"type": "Extension", "name": "decimal"}
    if kind == "boolean":
        return {"type": "Boolean"}
    if kind == "array":
        element = _cedar_type(schema.get("items"))
        return None if element is None else {"type": "Set", "element": element}
    if kind == "object":
        return {"type": "Record", "attributes": _attributes(schema)}
    return None


def _attributes(schema: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    attributes: dict[str, Any] = {}
    for name, sub in properties.items():
        typed = _cedar_type(sub)
        if typed is not None:
            attributes[name] = typed | {"required": name in needed}
    return attributes


def numeric_arguments(args_schema: Mapping[str, Any]) -> dict[str, str]:
    """The numeric top-level arguments of a tool (whose sums history keeps): name -> the JSON
    Schema type (`integer` or `number`)."""
    properties = args_schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    found = {}
    for name, sub in properties.items():
        if isinstance(sub, Mapping) and sub.get("type") in ("integer", "number"):
            found[name] = sub["type"]
    return found


def _tally_type(numeric: Mapping[str, str]) -> dict[str, Any]:
    sums = {
        name: {"type": "Long"} if kind == "integer" else {"type": "Extension", "name": "decimal"}
        for name, kind in numeric.items()
    }
    return {
        "type": "Record",
        "attributes": {
            "calls": {"type": "Long"},
            "sums": {"type": "Record", "attributes": sums},
        },
    }


def cedar_schema(
    tools: Mapping[str, RegisteredTool], history_of: Collection[str] | None = None
) -> dict[str, Any]:
    """The Cedar JSON schema of the registered `tools` (see the module's docstring), its
    `history` of the tools in `history_of` only (None: of all): the schema calls are judged
    under leaves out the history no policy reads, which Cedar would check and copy in vain."""
    history: dict[str, Any] = {}
    for name, tool in sorted(tools.items()):
        if history_of is not None and name not in history_of:
            continue
        tally = _tally_type(numeric_arguments(tool.args_schema))
        history[name] = {
            "type": "Record",
            "attributes": {
                "calls": tally["attributes"]["calls"],
                "sums": tally["attributes"]["sums"],
                "hour": tally,
                "day": tally,
            },
        }
    now = {
        "type": "Record",
        "attributes": {
            "hour": {"type": "Long"},
            "minute": {"type": "Long"},
            "weekday": {"type": "Long"},
            "date": {"type": "String"},
        },
    }
    actions: dict[str, Any] = {f"{EFFECT_GROUP}{effect}": {} for effect in Effect}
    for name, tool in sorted(tools.items()):
        actions[name] = {
            "memberOf": [{"id": f"{EFFECT_GROUP}{tool.effect}"}],
            "appliesTo": {
                "principalTypes": ["Agent"],
                "resourceTypes": ["Run"],
                "context": {
                    "type": "Record",
                    "attributes": {
                        "input": {"type": "Record", "attributes": _attributes(tool.args_schema)},
                        "now": {"type": "Now"},
                        "history": {"type": "History"},
                    },
                },
            },
        }
    return {
        "": {
            "commonTypes": {"Now": now, "History": {"type": "Record", "attributes": history}},
            "entityTypes": {"Agent": {"memberOfTypes": ["Group"]}, "Group": {}, "Run": {}},
            "actions": actions,
        }
    }


def _decimal(value: Decimal | int | float, what: str) -> dict[str, Any]:
    number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    exponent = number.as_tuple().exponent
    if not number.is_finite() or not isinstance(exponent, int) or abs(number) > _DECIMAL_MAX:
        raise Unrepresentable(f"{what} is out of the range of Cedar's decimal")
    if exponent < -_DECIMAL_PLACES:
        raise Unrepresentable(f"{what} has more than {_DECIMAL_PLACES} decimal places")
    text = format(number.quantize(Decimal(1).scaleb(-max(1, -exponent))), "f")
    return {"__extn": {"fn": "decimal", "arg": text}}


def _value(value: Any, schema: Any, what: str) -> Any:
    """`value` as the Cedar value its JSON Schema types (`Unrepresentable` if it is not that)."""
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > _MAX_LONG:
            raise Unrepresentable(f"{what} is out of the range of Cedar's Long")
        return value
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return _decimal(value, what)
    if kind == "array" and isinstance(value, list):
        return [_value(v, schema.get("items"), f"{what}[]") for v in value]
    if kind == "object" and isinstance(value, Mapping):
        return _record(value, schema, what)
    raise Unrepresentable(f"{what} is not the {kind} its tool's schema says")


def _record(value: Mapping[str, Any], schema: Mapping[str, Any], what: str) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    record = {}
    for name, sub in properties.items():
        if _cedar_type(sub) is None or value.get(name) is None:
            continue  # not visible to policies, or absent (an optional attribute)
        record[name] = _value(value[name], sub, f"{what}.{name}")
    return record


def _tally(tally: ToolTally | None, numeric: Mapping[str, str]) -> dict[str, Any]:
    sums: dict[str, Any] = {}
    for name, kind in numeric.items():
        total = (tally.sums.get(name) if tally is not None else None) or Decimal(0)
        if not total.is_finite() or abs(total) > (_MAX_LONG if kind == "integer" else _DECIMAL_MAX):
            raise Unrepresentable(f"the sum of {name} is out of the range of Cedar's {kind}")
        if kind == "integer":
            sums[name] = int(total)  # an integer argument's sum counts whole units
        else:
            sums[name] = _decimal(total.quantize(Decimal("0.0001")), f"the sum of {name}")
    return {"calls": tally.calls if tally is not None else 0, "sums": sums}


def context_of(
    tools: Mapping[str, RegisteredTool],
    tool: RegisteredTool,
    args: Mapping[str, Any],
    history: RunHistory,
    now: datetime,
) -> dict[str, Any]:
    """The context of a call of `tool` with `args` (`now` in the set's time zone), with the
    history of `tools` (those whose history the set reads).

    Raises:
        Unrepresentable: an argument is not what the tool's schema says, or Cedar cannot hold
            it.
    """
    summary: dict[str, Any] = {}
    for name, each in tools.items():
        numeric = numeric_arguments(each.args_schema)
        whole = _tally(history.run.get(name), numeric)
        summary[name] = whole | {
            "hour": _tally(history.hour.get(name), numeric),
            "day": _tally(history.day.get(name), numeric),
        }
    return {
        "input": _record(args, tool.args_schema, "argument"),
        "now": {
            "hour": now.hour,
            "minute": now.minute,
            "weekday": now.isoweekday(),
            "date": now.date().isoformat(),
        },
        "history": summary,
    }
