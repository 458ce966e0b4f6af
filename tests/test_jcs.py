"""RFC 8785 (JCS) event data: the encoder against the RFC's test data, ECMAScript's number
test file, an independent reimplementation and the published event vectors.

`reference_jcs` and `reference_event_bytes` below are a second, minimal implementation written
from RFC 8785 and the README's description of event bytes, sharing no code with
`ledger.canonical`: numbers by searching the shortest `%.{p}e` text that reads back, strings
escaped character by character, keys sorted by lists of UTF-16 code units.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ledger.canonical import (
    EVENT_TAGS,
    _jcs_text,
    canonical_json,
    chain_hash,
    es_number,
    event_bytes,
    event_json,
    jcs_json,
    jcs_read_back,
)
from ledger.errors import InvalidEvent, InvalidJson
from ledger.limits import MAX_JSON_DEPTH

VECTORS = Path(__file__).parent / "vectors"
RFC = VECTORS / "rfc8785"
CASES = sorted(p.stem for p in (RFC / "input").glob("*.json"))


# -- the independent implementation ------------------------------------------------------------


def reference_number(x: float) -> str:
    """ECMAScript Number::toString, from its definition: the fewest significant digits that
    read back as `x` (at that precision the correctly rounded ones are the closest)."""
    if x == 0:
        return "0"
    if x < 0:
        return "-" + reference_number(-x)
    for precision in range(1, 18):
        text = f"{x:.{precision - 1}e}"
        if float(text) == x:
            break
    mantissa, exponent = text.split("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    n = int(exponent) + 1  # x = 0.digits * 10**n
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    exp = n - 1
    return (
        (digits[0] + ("." + digits[1:] if k > 1 else ""))
        + "e"
        + ("+" if exp > 0 else "-")
        + (str(abs(exp)))
    )


_SHORT = {
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}


def reference_string(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if code in _SHORT:
            out.append(_SHORT[code])
        elif code < 0x20:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def utf16_units(text: str) -> list[int]:
    units: list[int] = []
    for ch in text:
        code = ord(ch)
        if code < 0x10000:
            units.append(code)
        else:
            code -= 0x10000
            units += [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
    return units


def reference_jcs(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)  # within +/-2**53 the same as ECMAScript's text
    if isinstance(value, float):
        return reference_number(value)
    if isinstance(value, str):
        return reference_string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(reference_jcs(v) for v in value) + "]"
    keys = sorted(value, key=utf16_units)
    return "{" + ",".join(f"{reference_string(k)}:{reference_jcs(value[k])}" for k in keys) + "}"


def reference_event_bytes(tag: str, fields: list[str]) -> bytes:
    out = tag.encode()
    for text in fields:
        raw = text.encode("utf-8")
        out += len(raw).to_bytes(4, "big") + raw
    return out


# -- RFC 8785's test data ----------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_rfc_test_data_canonicalizes_to_its_output(case: str) -> None:
    value = json.loads((RFC / "input" / f"{case}.json").read_text(encoding="utf-8"))
    expected = (RFC / "output" / f"{case}.json").read_bytes()
    assert jcs_json(value).encode("utf-8") == expected
    assert reference_jcs(value).encode("utf-8") == expected


def test_the_rfc_test_data_is_all_there() -> None:
    assert CASES == ["arrays", "french", "structures", "unicode", "values", "weird"]


def es6_doubles(doc: dict[str, Any]) -> Iterator[tuple[int, float]]:
    """The doubles of es6testfile100m.txt, in order (see tests/vectors/rfc8785/README.md)."""
    as_double = struct.Struct("<d")
    for bits in doc["static"]:
        yield int(bits, 16), struct.unpack(">d", bytes.fromhex(bits))[0]
    start = int(doc["serial_start"], 16)
    for i in range(doc["serial_count"]):
        yield start + i, struct.unpack(">d", (start + i).to_bytes(8, "big"))[0]
    block = bytes(32)
    while True:
        block = hashlib.sha256(block).digest()
        for offset in range(0, 32, 8):
            chunk = block[offset : offset + 8]
            x = as_double.unpack(chunk)[0]
            if x != 0 and math.isfinite(x):
                yield int.from_bytes(chunk, "little"), x


def test_numbers_match_the_first_100000_lines_of_the_es6_test_file() -> None:
    doc = json.loads((RFC / "es6numbers.json").read_text())
    want = {r["lines"]: r["sha256"] for r in doc["sha256"] if r["lines"] <= 100_000}
    assert sorted(want) == [1000, 10_000, 100_000]
    digest, checked = hashlib.sha256(), 0
    for n, (bits, x) in enumerate(es6_doubles(doc), start=1):
        digest.update(f"{bits:x},{es_number(x)}\n".encode())
        if n in want:
            assert digest.hexdigest() == want[n], f"the first {n} lines differ"
            checked += 1
        if n == max(want):
            break
    assert checked == len(want)


def test_the_es6_samples_and_the_reference_agree() -> None:
    doc = json.loads((RFC / "es6numbers.json").read_text())
    for bits, text in doc["samples"]:
        x = struct.unpack(">d", int(bits, 16).to_bytes(8, "big"))[0]
        assert es_number(x) == reference_number(x) == text
    for n, (_, x) in enumerate(es6_doubles(doc)):
        assert es_number(x) == reference_number(x)
        if n == 5000:
            break


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (1e-6, "0.000001"),
        (-0.0, "0"),
        (1.0, "1"),
        (123456789012345680000.0, "123456789012345680000"),
        (5e-324, "5e-324"),
        (-1.7976931348623157e308, "-1.7976931348623157e+308"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_floats_are_written_as_ecmascript_writes_them(number: float, text: str) -> None:
    assert es_number(number) == text
    assert jcs_json([number]) == f"[{text}]"


# -- strings and keys --------------------------------------------------------------------------


def test_every_character_is_escaped_as_jcs_says() -> None:
    """Python's `json.dumps(ensure_ascii=False)` escapes exactly what RFC 8785 escapes, the same
    way: the fast path relies on it (U+007F, U+2028 and U+2029 are written as they are)."""
    characters = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(characters), 4096):
        chunk = characters[i : i + 4096]
        text = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
        assert text == "[" + ",".join(reference_string(c) for c in chunk) + "]"
    assert jcs_json({"s": "\x7f\u2028\u2029\x1f"}) == '{"s":"\x7f\u2028\u2029\\u001f"}'


def test_keys_beyond_the_bmp_sort_by_utf16_code_units() -> None:
    value = {"\ufb33": 1, "\U0001f602": 2, "\uffff": 3, "\U00010000": 4, "a": 5}
    assert jcs_json(value) == '{"a":5,"\U00010000":4,"\U0001f602":2,"\ufb33":1,"\uffff":3}'
    assert canonical_json(value).index("\ufb33") < canonical_json(value).index("\U0001f602")


# -- property tests: fast path, slow path, reference -------------------------------------------

_KEY_CHARS = 'aAz_0 é€\ufb33\uffff\U0001f602\U00010000\n"\\\x01\x7f\u2028'


def random_key(rng: random.Random) -> str:
    return "".join(rng.choice(_KEY_CHARS) for _ in range(rng.randint(0, 4)))


def random_float(rng: random.Random) -> float:
    choice = rng.random()
    if choice < 0.3:
        while True:
            x: float = struct.unpack("<d", rng.randbytes(8))[0]
            if math.isfinite(x):
                return x
    if choice < 0.6:
        return rng.choice([1.0, -0.0, 0.0, 1e21, 1e20, 1e-6, 1e-7, 2.5, -1e300, 5e-324])
    return rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-30, 30)


def random_value(rng: random.Random, depth: int, floats: bool, wide_keys: bool) -> Any:
    kind = rng.randrange(8 if depth < 5 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(2**53), 2**53)
    if kind == 2 and floats:
        return random_float(rng)
    if kind in (2, 3, 4):
        return random_key(rng) * rng.randint(0, 3)
    if kind == 5:
        return rng.randint(-(10**30), 10**30)
    if kind == 6:
        return [random_value(rng, depth + 1, floats, wide_keys) for _ in range(rng.randint(0, 4))]
    keys = [random_key(rng) for _ in range(rng.randint(0, 5))]
    if not wide_keys:
        keys = [k for k in keys if all(ord(c) <= 0xFFFF for c in k)]
    return {k: random_value(rng, depth + 1, floats, wide_keys) for k in keys}


def test_the_fast_path_is_the_slow_path_where_it_is_taken() -> None:
    rng = random.Random(8785)
    for _ in range(3000):
        value = random_value(rng, 0, floats=False, wide_keys=False)
        assert jcs_json(value) == _jcs_text(value) == canonical_json(value)


def test_random_values_encode_as_the_reference_does() -> None:
    rng = random.Random(20261201)
    slow = 0
    for _ in range(3000):
        value = random_value(rng, 0, floats=True, wide_keys=True)
        text = jcs_json(value)
        assert text == reference_jcs(value) == _jcs_text(value)
        back = json.loads(text)
        # Read back, the value is the same number for number; encoding it again changes nothing.
        assert canonical_json(back) == canonical_json(jcs_read_back(value))
        assert jcs_json(back) == text
        slow += text != canonical_json(value)
    assert slow > 200  # the floats and wide keys did take the slow path


# -- what is accepted --------------------------------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = 1.5
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        {"x": float("nan")},
        {"x": [1.5, float("inf")]},
        {"x": 1.5, "y": "a\x00b"},
        {"x": 1.5, "y": "\x000"},  # what the slow path writes in a float's place
        {"x": [1.5, 2.5], "y": ["\x001", "\x000"]},
        {"x": 1.5, "\x00": 1},
        {"x": "\ud800", "\U0001f602": 1},
        {1: 1.5},
        {"x": {1, 2}},
        {"x": 1.5, "y": b"bytes"},
        {"x": 1.5, "y": 10**4300},
        nested(MAX_JSON_DEPTH + 1),
        {"\U0001f602": nested(MAX_JSON_DEPTH)},
    ],
)
def test_what_canonical_json_refuses_jcs_refuses(value: Any) -> None:
    with pytest.raises(InvalidJson):
        canonical_json(value)
    with pytest.raises(InvalidJson):
        jcs_json(value)


def test_what_canonical_json_accepts_jcs_accepts() -> None:
    big = 10**4299
    for value in ({"n": big, "f": 1.5}, {"n": -(2**64)}, nested(MAX_JSON_DEPTH), ("a", 1.0)):
        canonical_json(value)
        jcs_json(value)
    assert jcs_json({"n": 2**64, "f": 0.5}) == '{"f":0.5,"n":18446744073709551616}'
    assert jcs_json({"n": big}) == '{"n":' + str(big) + "}"


def test_an_unknown_tag_version_is_refused() -> None:
    """Tag versions 2 and 3 exist: 1 is as unknown as 4."""
    assert list(EVENT_TAGS) == [2, 3]
    for version in (1, 4):
        with pytest.raises(InvalidEvent, match=f"tag version {version}"):
            event_json({}, version)
    with pytest.raises(InvalidEvent, match="tag version 1"):
        event_bytes(
            "s", 1, "t", "a", datetime_of("2026-12-01T12:00:00.000000Z"), "{}", tag_version=1
        )
    with pytest.raises(InvalidEvent, match="tag version 0"):
        event_bytes(
            "s", 1, "t", "a", datetime_of("2026-12-01T12:00:00.000000Z"), "{}", tag_version=0
        )


def test_tag_3_has_a_login_and_tag_2_none() -> None:
    """The login is part of tag 3's bytes: without one (or an empty one) there are none, and
    tag 2, written before logins were recorded, has no place for one."""
    at = datetime_of("2026-12-01T12:00:00.000000Z")
    for login in (None, ""):
        with pytest.raises(InvalidEvent, match="names the login"):
            event_bytes("s", 1, "t", "a", at, "{}", tag_version=3, login=login)
    with pytest.raises(InvalidEvent, match="tag version 2 has no login"):
        event_bytes("s", 1, "t", "a", at, "{}", tag_version=2, login="signoff_app")
    v2 = event_bytes("s", 1, "t", "a", at, "{}", tag_version=2)
    v3 = event_bytes("s", 1, "t", "a", at, "{}", tag_version=3, login="w")
    assert v3 == v2.replace(b"signoff.event.v2", b"signoff.event.v3") + b"\x00\x00\x00\x01w"
    other = event_bytes("s", 1, "t", "a", at, "{}", tag_version=3, login="x")
    assert other != v3


# -- the published event vectors ---------------------------------------------------------------


def load_event_vectors() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((VECTORS / "events.json").read_text(encoding="utf-8"))
    return doc


def test_the_event_vectors_check_with_the_independent_implementation() -> None:
    doc = load_event_vectors()
    assert doc["signoff_event_vectors"] == 1
    assert [s["tag_version"] for s in doc["streams"]] == [2, 3]
    checked = 0
    for stream in doc["streams"]:
        tag = doc["tags"][str(stream["tag_version"])]
        assert tag == f"signoff.event.v{stream['tag_version']}"
        previous = doc["genesis_hash"]
        for event in stream["events"]:
            assert reference_jcs(json.loads(event["input"])) == event["data"]
            fields = [
                stream["stream_id"],
                str(event["version"]),
                event["type"],
                event["actor"],
                event["recorded_at"],
                event["data"],
            ]
            if stream["tag_version"] == 3:  # tag 3 adds the login; tag 2 has none
                fields.append(event["login"])
            else:
                assert "login" not in event
            raw = reference_event_bytes(tag, fields)
            assert raw.hex() == event["canonical_bytes"]
            assert event["prev_hash"] == previous
            previous = hashlib.sha256(bytes.fromhex(previous) + raw).hexdigest()
            assert previous == event["hash"]
            checked += 1
    assert checked >= 4


def test_the_event_vectors_cover_floats_wide_keys_and_escapes() -> None:
    doc = load_event_vectors()
    v2, v3 = doc["streams"]
    assert [e["data"] for e in v3["events"]] == [e["data"] for e in v2["events"]]
    # Where RFC 8785 and Python's sorted JSON differ: floats, then keys beyond the BMP.
    differ = [canonical_json(json.loads(e["input"])) != e["data"] for e in v2["events"]]
    assert differ == [True, True, False, False]
    assert "\\u001f" in v2["events"][2]["data"] and "\u2028" in v2["events"][2]["data"]


def test_ledger_canonical_computes_the_event_vectors() -> None:
    doc = load_event_vectors()
    for stream in doc["streams"]:
        version = stream["tag_version"]
        assert EVENT_TAGS[version].decode() == doc["tags"][str(version)]
        for event in stream["events"]:
            data = event_json(json.loads(event["input"]), version)
            assert data == event["data"]
            raw = event_bytes(
                stream["stream_id"],
                event["version"],
                event["type"],
                event["actor"],
                datetime_of(event["recorded_at"]),
                data,
                tag_version=version,
                login=event.get("login"),
            )
            assert raw.hex() == event["canonical_bytes"]
            assert chain_hash(bytes.fromhex(event["prev_hash"]), raw).hex() == event["hash"]


def datetime_of(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def test_read_back_is_what_json_reads_from_the_jcs_text() -> None:
    value = {"a": [1.0, -0.0, 1e20, 1e21, 0.5, 123456789012345678901.0], "b": (2.0,), "c": "1.0"}
    back = jcs_read_back(value)
    assert back == {"a": [1, 0, 10**20, 1e21, 0.5, 123456789012345680000], "b": [2], "c": "1.0"}
    assert [type(x) for x in back["a"]] == [int, int, int, float, float, int]
    assert canonical_json(back) == canonical_json(json.loads(jcs_json(value)))
    plain = {"n": 1, "s": "x"}
    assert jcs_read_back(plain) is plain  # nothing to change: the value itself
