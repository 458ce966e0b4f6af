"""Canonical bytes and hashes: the one definition the journal, verify and auditors share.

Two canonical JSON forms:

- `canonical_json`: `json.dumps(value, sort_keys=True, separators=(",", ":"),
  ensure_ascii=False, allow_nan=False)` encoded as UTF-8. Keys are sorted by code point, floats
  use Python's shortest round-trip form (`1e-07`, `1e+21`, `1.0`). What digests of arguments
  and results, MACs, resume tokens and signed statements are computed over: those are checked
  by Signoff itself, with this same code, and already name the key or format they belong to.
- `jcs_json`: RFC 8785, the JSON Canonicalization Scheme, which any auditor can reproduce with a
  JCS library in another language. The data of every event (tag versions 2 and 3). It differs from
  `canonical_json` in two places only: numbers that are floats are written as ECMAScript
  writes them (`1e-7`, `1e+21`, `1`, `-0.0` as `0`, `0.000001`, `123456789012345680000`), and
  object keys are sorted by their UTF-16 code units, not their code points (which differ only
  for keys with characters beyond U+FFFF). Strings escape the same: `"`, `\\`, `\\b \\f \\n \\r \\t`
  and the other controls below U+0020 as lowercase `\\u00xx`; everything else (U+007F,
  U+2028, non-ASCII) is written as is. Integers are written in full, as `canonical_json` writes
  them: RFC 8785 has numbers only as IEEE doubles, and integers within +/-2**53 are written the
  same either way; beyond that (which I-JSON, and so JCS, leaves out) Signoff keeps every digit
  rather than refuse or round them.

The journal stores the exact text in a `json` column (which keeps its input verbatim), so
verification hashes the stored bytes and never encodes again. Both forms accept the same values
(`ledger.limits`): string keys, no NUL or lone surrogate in any string, finite numbers, integers
of at most 4300 digits, at most 64 nested arrays and objects. In `canonical_json` each reads
back as it was given, `1` and `1.0` different texts; in `jcs_json` (as in JSON itself) they are
the same number, and `1.0` reads back as the integer `1` (`jcs_read_back`), so a MAC or
signature carried in event data is computed over the data as it reads back.

An event's canonical bytes are its tag (`EVENT_TAGS`, by the tag version recorded in
`events.tag_version`) followed by its fields, each as a 4-byte big-endian length and its UTF-8
bytes. Tag 3, `signoff.event.v3`, every event written now: seven fields, stream id, version
(decimal), type, actor, recorded-at (`YYYY-MM-DDTHH:MM:SS.ffffffZ`, UTC), the data's canonical
JSON text (RFC 8785) and the login, the database login that wrote the event (`session_user`,
stamped by the database). Tag 2, `signoff.event.v2`, events written before logins were
recorded: the first six fields, no login. Length prefixes make the encoding unambiguous
whatever the fields contain; the tag makes the recorded tag version part of what is hashed, so
an event whose recorded tag version is changed, or that names one no code knows, does not
verify; an event of tag 3 without a login, or of tag 2 with one, has no canonical bytes.

Chain: `hash(event) = SHA-256(hash(previous event of the stream) || canonical bytes)`; the first
event of a stream chains from 32 zero bytes (`GENESIS_HASH`).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from .errors import InvalidEvent, InvalidJson
from .limits import MAX_JSON_DEPTH, containers_ok, json_problem, json_text_ok

__all__ = [
    "EVENT_TAGS",
    "GENESIS_HASH",
    "canonical_json",
    "chain_hash",
    "es_number",
    "event_bytes",
    "event_json",
    "format_time",
    "jcs_json",
    "jcs_read_back",
    "json_digest",
    "sha256_hex",
    "timed_event_bytes",
]

EVENT_TAGS = {2: b"signoff.event.v2", 3: b"signoff.event.v3"}
"""The tag that starts an event's canonical bytes, by tag version: 3 (with the login) for
every event written now, 2 (without) for those written before."""
GENESIS_HASH = bytes(32)
_LENGTH = struct.Struct(">I")
_CONTAINERS = (dict, list, tuple)
_LEAVES = frozenset({str, int, bool, type(None)})  # float is not: it takes the slow path
# A float's place in the slow path's text: the string NUL + <n>, which json.dumps writes as
# `"\u0000<n>"`. Only an escape puts a backslash right after a quote that opens a string, and
# NUL's is `\u0000`. NUL is refused in every string (`ledger.limits`), and a value's own NUL is
# found: as one placeholder too many, or as `\u0000` left in the text (`json_text_ok`).
_PLACEHOLDER = re.compile(r'"\\u0000(\d+)"')


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of `value` (Python's form: digests, MACs, signatures).

    Raises:
        InvalidJson: not a JSON value as `ledger.limits` defines it (sets, bytes, objects,
            non-string keys, NaN or infinity, NUL or lone surrogates, nested too deep).
    """
    # The cheap checks first; the full walk runs only to say what is wrong.
    try:
        text = containers_ok(value) and _dumps(value, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise InvalidJson(json_problem(value) or str(e)) from e
    if not text or not json_text_ok(text):
        raise InvalidJson(json_problem(value) or "not a JSON value")
    return text


def jcs_json(value: Any) -> str:
    """Return the RFC 8785 (JCS) text of `value` (the data of events).

    Raises:
        InvalidJson: as `canonical_json`: what is accepted is the same.
    """
    # As in `canonical_json`, the cheap checks first and the full walk only to say what is
    # wrong: `_plain` checks the containers, the encoder the leaves, `json_text_ok` the text.
    plain = _plain(value)
    text: str | None = None
    try:
        if plain:
            # No floats and no key beyond U+FFFF: Python's sorted text is the JCS text.
            text = _dumps(value, sort_keys=True)
        elif plain is not None:
            text = _jcs_text(value)
    except (TypeError, ValueError) as e:  # InvalidJson (NaN, infinity) is a ValueError
        raise InvalidJson(json_problem(value) or str(e)) from e
    if text is None or not json_text_ok(text):
        raise InvalidJson(json_problem(value) or "not a JSON value")
    return text


def jcs_read_back(value: Any) -> Any:
    """`value` as `json.loads(jcs_json(value))` gives it back: each float that RFC 8785 writes
    without a fraction or an exponent (1.0, -0.0, 1e20: integral, below 1e21) is that integer.

    Whatever is computed over event data (a MAC inside it, a signature over part of it) and
    checked later against the data read back from the journal is computed over this form."""
    if _plain(value) is not False:  # nothing to change, or not JSON (which is refused later)
        return value
    return _read_back(value)


def _read_back(value: Any) -> Any:
    if isinstance(value, float):
        # 1e20 is written 100000000000000000000, 123456789012345678901.0 as ...680000: digits
        # that JSON reads as an integer, which need not be the double's exact value.
        text = es_number(value)
        return value if "." in text or "e" in text else int(text)
    if isinstance(value, dict):
        return {k: _read_back(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_read_back(v) for v in value]
    return value


def event_json(value: Any, tag_version: int) -> str:
    """The canonical JSON of an event's data in the form of `tag_version`."""
    if tag_version in EVENT_TAGS:  # RFC 8785 under every tag
        return jcs_json(value)
    raise InvalidEvent(f"unknown event tag version {tag_version!r}")


def es_number(number: float) -> str:
    """A float as ECMAScript's Number::toString writes it (RFC 8785 section 3.2.2.3): the
    shortest digits that read back as the same double (Python's `repr` finds the same ones),
    plain from 1e-6 up to below 1e21, else `d.ddde+NN` / `d.ddde-NN`; `-0` is `0`.

    Raises:
        InvalidJson: NaN or infinity.
    """
    if number != number or number in (float("inf"), float("-inf")):
        raise InvalidJson(f"{number} is not a JSON number")
    if number == 0:
        return "0"
    text = repr(float(number))
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    # value = 0.<digits> * 10**point
    point = len(whole) + (int(exponent) if exponent else 0)
    significant = digits.lstrip("0")
    point -= len(digits) - len(significant)
    digits = significant.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        body = digits + "0" * (point - k)
    elif 0 < point <= 21:
        body = f"{digits[:point]}.{digits[point:]}"
    elif -6 < point <= 0:
        body = "0." + "0" * -point + digits
    else:
        e = point - 1
        body = digits[0] + (f".{digits[1:]}" if k > 1 else "") + ("e+" if e >= 0 else "e-")
        body += str(abs(e))
    return sign + body


def format_time(moment: datetime) -> str:
    """The canonical text of a time: UTC, microseconds, trailing Z."""
    if moment.tzinfo is None:
        raise InvalidEvent("times in the journal must be timezone-aware")
    if moment.utcoffset():
        moment = moment.astimezone(UTC)
    # isoformat with microseconds is the same text as strftime("%Y-%m-%dT%H:%M:%S.%fZ") for
    # years 1000-9999, at a fraction of the cost (this runs for every event appended and checked).
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def event_bytes(
    stream_id: str,
    version: int,
    type_: str,
    actor: str,
    recorded_at: datetime,
    data_json: str,
    *,
    tag_version: int,
    login: str | None = None,
) -> bytes:
    """The canonical bytes of one event (see the module docstring); `data_json` is the stored
    text, in the form of `tag_version`; `login` the login that wrote it (tag 3), None (tag 2).

    Raises:
        InvalidEvent: an unknown tag version, or a login where the tag has none or none
            where it has one.
    """
    return timed_event_bytes(
        stream_id,
        version,
        type_,
        actor,
        format_time(recorded_at),
        data_json,
        tag_version=tag_version,
        login=login,
    )


def timed_event_bytes(
    stream_id: str,
    version: int,
    type_: str,
    actor: str,
    recorded_at: str,
    data_json: str,
    *,
    tag_version: int,
    login: str | None = None,
) -> bytes:
    """`event_bytes` of an event whose time is given as its canonical text (`format_time`, or
    the database's `to_char` of the same form, which is how the append functions hash it).

    Raises:
        InvalidEvent: as `event_bytes`.
    """
    tag = EVENT_TAGS.get(tag_version)
    if tag is None:
        raise InvalidEvent(f"unknown event tag version {tag_version!r}")
    # Written out, not looped (measured 15% faster): `ledger verify` runs this for every event.
    pack = _LENGTH.pack
    s, v, t = stream_id.encode(), str(version).encode(), type_.encode()
    a, w, d = actor.encode(), recorded_at.encode(), data_json.encode()
    fields = (
        *(tag, pack(len(s)), s, pack(len(v)), v, pack(len(t)), t),
        *(pack(len(a)), a, pack(len(w)), w, pack(len(d)), d),
    )
    if tag_version == 2:
        if login is not None:
            raise InvalidEvent("an event of tag version 2 has no login")
        return b"".join(fields)
    if not isinstance(login, str) or not login:
        raise InvalidEvent(f"an event of tag version {tag_version} names the login that wrote it")
    who = login.encode()
    return b"".join((*fields, pack(len(who)), who))


def chain_hash(previous: bytes, canonical: bytes) -> bytes:
    """The hash of an event given the hash of the one before it in its stream."""
    return hashlib.sha256(previous + canonical).digest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of `value`: how arguments and results are named in
    the journal without being stored there in clear."""
    return sha256_hex(canonical_json(value).encode("utf-8"))


def _dumps(value: Any, *, sort_keys: bool) -> str:
    return json.dumps(
        value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _plain(value: Any) -> bool | None:
    """True when `value` holds no float and no key beyond U+FFFF, so `json.dumps` writes its
    JCS text; False when it does; None when its containers are not JSON (`containers_ok`).
    One walk over the containers, like `containers_ok`, that also looks at the leaves' types;
    it goes on after a float, so False too means the containers are fine (nested at most
    MAX_JSON_DEPTH deep, string keys)."""
    if not isinstance(value, _CONTAINERS):
        return not isinstance(value, float)
    plain = True
    stack = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth >= MAX_JSON_DEPTH:
            return None
        if isinstance(item, dict):
            for key in item:
                if type(key) is not str and not isinstance(key, str):
                    return None
                if not key.isascii() and max(key) > "\uffff":
                    plain = False
            children: Iterable[Any] = item.values()
        else:
            children = item
        for child in children:
            kind = type(child)
            if kind in _LEAVES:
                continue
            if kind is float:
                plain = False
            elif isinstance(child, _CONTAINERS):
                push((child, depth + 1))
            elif isinstance(child, float):
                plain = False
    return plain


def _jcs_text(value: Any) -> str | None:
    """The JCS text of `value`, whose containers `_plain` checked, written the long way: floats
    in ECMAScript's form, keys in UTF-16 order (for any other value, the fast path's result).
    None when a string of the value holds what looks like a placeholder (it holds a NUL, which
    is refused).

    Raises:
        TypeError, ValueError: a leaf is not JSON (as `json.dumps` raises them).
    """
    numbers: list[str] = []
    text = _dumps(_jcs_value(value, numbers), sort_keys=False)
    if not numbers:
        return text
    found = [m.start() for m in _PLACEHOLDER.finditer(text)]
    if len(found) != len(numbers):
        return None
    return _PLACEHOLDER.sub(lambda m: numbers[int(m.group(1))], text)


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be")


def _jcs_value(value: Any, numbers: list[str]) -> Any:
    """`value` with each float replaced by a placeholder for its ECMAScript text (appended to
    `numbers`) and each object's keys in UTF-16 order. `_plain` checked that `value` nests at
    most MAX_JSON_DEPTH deep, so the recursion is bounded."""
    if isinstance(value, float):
        numbers.append(es_number(value))
        return f"\x00{len(numbers) - 1}"
    if isinstance(value, dict):
        return {k: _jcs_value(value[k], numbers) for k in sorted(value, key=_utf16)}
    if isinstance(value, list | tuple):
        return [_jcs_value(v, numbers) for v in value]
    return value
