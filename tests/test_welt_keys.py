"""Welt payloads whose objects have keys that are not strings (only a Python caller can make
them: JSON keys are strings) are refused with the adapter's typed error, at every level."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from typing import Any

import pytest

from adapters.welt import (
    InvalidWeltPayload,
    decode_messages,
    envelope_of,
    parse_interrupt_responses,
)

ODD_KEYS: list[Any] = [1, 2.5, None, True, (1, "a"), b"messages", frozenset({"x"})]


def _with_odd_keys(value: Any, rng: random.Random) -> Any:
    """`value` with one odd key added to each object in it, some of them chosen at random."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {k: _with_odd_keys(v, rng) for k, v in value.items()}
        if rng.random() < 0.5:
            out[rng.choice(ODD_KEYS)] = "x"
        return out
    if isinstance(value, list):
        return [_with_odd_keys(v, rng) for v in value]
    return value


MESSAGES = {
    "messages": [
        {
            "role": "user",
            "content": [
                {"text": "hello"},
                {"document": {"format": "pdf", "source": {"bytes": "aGk="}, "name": "a"}},
            ],
        }
    ]
}
ANSWERS = {"interrupt_responses": {"apr-1": {"value": "approve", "source": "option"}}}
PARSERS: list[Callable[[Any], object]] = [envelope_of, decode_messages, parse_interrupt_responses]


@pytest.mark.parametrize("parse", PARSERS)
def test_the_envelope_with_a_key_that_is_no_string_is_refused_by_name(
    parse: Callable[[Any], object],
) -> None:
    for odd in ODD_KEYS:
        for payload in ({**MESSAGES, odd: 1}, {**ANSWERS, odd: 1}, {odd: 1, "messages": []}):
            with pytest.raises(InvalidWeltPayload):
                parse(payload)


@pytest.mark.parametrize("parse", PARSERS)
def test_odd_keys_anywhere_in_a_payload_raise_only_the_typed_error(
    parse: Callable[[Any], object],
) -> None:
    rng = random.Random(33)
    for _ in range(500):
        payload = _with_odd_keys(rng.choice([MESSAGES, ANSWERS]), rng)
        with contextlib.suppress(InvalidWeltPayload):
            parse(payload)
