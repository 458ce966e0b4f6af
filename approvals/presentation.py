"""What a policy tells reviewers about a tool's arguments: pure checks, no I/O.

A policy may name headline fields (shown first and large), sensitive fields (shown only after
one more click) and carry the JSON Schema of the tool's arguments, against which an edit is
checked before anything is recorded (`edit_problem`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from ledger.canonical import canonical_json
from ledger.limits import name_problem

from .errors import InvalidApprovalRequest

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_SCHEMA_BYTES",
    "args_schema",
    "check_edit",
    "edit_problem",
    "field_names",
    "without_sensitive",
]

MAX_SCHEMA_BYTES = 32 * 1024
"""Largest argument schema (canonical JSON) a policy may carry: it is stored with every
request."""
_EXACT_FLOAT = 2.0**53  # beyond this a float and the integer jsonb prints for it differ


def field_names(names: Iterable[str], what: str) -> tuple[str, ...]:
    """`names` as a tuple of distinct argument field names, in their order.

    Raises:
        InvalidApprovalRequest: one string instead of a collection, or a name that is not one.
    """
    if isinstance(names, str):
        raise InvalidApprovalRequest(f"{what} must be a collection of field names, not a string")
    found: dict[str, None] = {}
    for name in names:
        if (problem := name_problem(name)) is not None:
            raise InvalidApprovalRequest(f"a {what} field {problem}")
        found[name] = None
    return tuple(found)


def args_schema(schema: Mapping[str, Any], *, read_back: bool = False) -> dict[str, Any]:
    """`schema` as a plain dict, once it is a JSON Schema that can be stored with a request.

    With `read_back` (a policy read from the database), only the cheap checks: judging a
    large schema against the metaschema takes a quarter of a second, which every row of every
    page would pay; it was judged when it was asked for, and `edit_problem` judges it again
    before it checks an edit.

    Raises:
        InvalidApprovalRequest: not a JSON object, larger than `MAX_SCHEMA_BYTES`, holding a
            float jsonb would store as another number, or not a valid JSON Schema.
    """
    if not isinstance(schema, Mapping):
        raise InvalidApprovalRequest(f"args_schema must be a JSON object, not {type(schema)}")
    data = dict(schema)
    try:
        text = canonical_json(data)
    except ValueError as e:
        raise InvalidApprovalRequest(f"args_schema is not JSON: {e}") from e
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise InvalidApprovalRequest(f"args_schema is more than {MAX_SCHEMA_BYTES} bytes of JSON")
    if _has_inexact_float(data):
        raise InvalidApprovalRequest("args_schema holds a float too large to store exactly")
    if not read_back and (problem := _judged(text)) is not None:
        raise InvalidApprovalRequest(f"args_schema {problem}")
    return data


def _schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why `schema` cannot check edits, or None."""
    return _judged(canonical_json(dict(schema)))


@lru_cache(maxsize=256)  # a tool's schema is judged once, not on each check of an edit
def _judged(text: str) -> str | None:
    from jsonschema import Draft202012Validator, SchemaError  # only where a schema is given

    schema = json.loads(text)

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        return f"is not a JSON Schema: {e.message}"
    if _holds_pattern_properties(schema):
        return "has patternProperties: Signoff does not run a schema's regular expressions"
    return None


def edit_problem(schema: Mapping[str, Any] | None, args: Mapping[str, Any]) -> str | None:
    """What is wrong with edited arguments under the tool's argument schema (the first
    problem, with its place), or None when they conform or there is no schema."""
    if schema is None:
        return None
    if (problem := _schema_problem(schema)) is not None:  # a policy read back is not judged
        return f"the tool's schema {problem}"
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    # An empty registry: a `$ref` resolves within the schema or not at all. jsonschema's
    # default would fetch any other URL (http, file) from this process, with no timeout.
    validator = _edit_checker()(schema, registry=Registry())
    try:
        error = next(iter(validator.iter_errors(dict(args))), None)
    except Unresolvable as e:
        return f"the tool's schema refers to {e.ref[:200]!r}, which is not in it"
    if error is None:
        return None
    place = "/".join(str(p) for p in error.absolute_path) or "the arguments"
    return f"{place}: {error.message}"


def check_edit(schema: Mapping[str, Any] | None, args: Mapping[str, Any], tool: str) -> None:
    """Refuse edited arguments that do not conform to the tool's argument schema.

    Raises:
        InvalidApprovalRequest: they do not (`edit_problem` says where and why).
    """
    if (problem := edit_problem(schema, args)) is not None:
        raise InvalidApprovalRequest(f"the edited arguments do not fit {tool}: {problem}")


@cache
def _edit_checker() -> type[Validator]:
    """JSON Schema 2020-12 without `pattern`: a schema's regular expressions are never run
    here (`^(a+)+$` would hold this process for as long as it backtracks); the tool checks
    them when it runs. `args_schema` refuses `patternProperties`, the other keyword that
    runs one."""
    from jsonschema import Draft202012Validator, validators  # only where a schema is given

    checker: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator, {"pattern": _pattern_not_run}
    )
    return checker


def _pattern_not_run(
    validator: Validator, pattern: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    return iter(())


def _holds_pattern_properties(value: Any) -> bool:
    if isinstance(value, dict):
        if isinstance(value.get("patternProperties"), dict):
            return True
        value = list(value.values())
    return isinstance(value, list) and any(_holds_pattern_properties(v) for v in value)


def without_sensitive(
    sensitive: Iterable[str], args: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """`args` without the fields a policy marks sensitive, and the names of those left out
    (sorted; only fields the arguments hold)."""
    hidden = sorted(set(sensitive) & args.keys())
    return {k: v for k, v in args.items() if k not in hidden}, hidden


def _has_inexact_float(value: Any) -> bool:
    if isinstance(value, float):
        return abs(value) >= _EXACT_FLOAT
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, list) and any(_has_inexact_float(v) for v in value)
