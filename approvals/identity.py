"""Reviewer ids and group names: one normal form, and what is refused.

Two spellings of one person must be one reviewer (a quorum counts people, and self-approval
compares the requester with the reviewer), so every id that enters Signoff as a reviewer, an
approver of a policy, a requester compared with a reviewer, or a directory entry goes through
`reviewer_id`: NFKC (fullwidth and compatibility forms become their plain letters), then
trimmed. What is left must be visible, unambiguous text: no whitespace, no control or format
characters (zero-width joiners, bidi overrides), no separators (U+2028, U+2029), no lone
surrogates, at most `MAX_REVIEWER_ID` characters.
"""

from __future__ import annotations

import unicodedata

from .errors import InvalidReviewerId

__all__ = ["GROUP_PREFIX", "MAX_REVIEWER_ID", "approver", "group_name", "reviewer_id", "same_id"]

MAX_REVIEWER_ID = 128
"""Longest reviewer id or group name (characters): it names a stream (`reviewer:<id>`)."""
GROUP_PREFIX = "group:"

# Unicode categories refused inside an id: controls, format characters, unassigned and
# private-use code points, lone surrogates, and the separators (space, line, paragraph).
_REFUSED = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Cn": "an unassigned code point",
    "Co": "a private-use character",
    "Cs": "a lone surrogate",
    "Zs": "whitespace",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def _normal(value: str) -> str:
    """NFKC, then trimmed. A lone surrogate survives NFKC and is refused after."""
    return unicodedata.normalize("NFKC", value).strip()


def same_id(a: str, b: str) -> bool:
    """Whether two ids name one reviewer once normalised (for a requester's name, which is
    recorded as given: it is compared, never refused)."""
    return _normal(a) == _normal(b)


def _checked(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidReviewerId(value, f"must be a string, not {type(value).__name__}")
    normal = _normal(value)
    if not normal:
        raise InvalidReviewerId(value, f"is empty: a {what} needs a visible name")
    if len(normal) > MAX_REVIEWER_ID:
        raise InvalidReviewerId(value, f"is longer than {MAX_REVIEWER_ID} characters")
    for i, char in enumerate(normal):
        category = unicodedata.category(char)
        if category in ("Zl", "Zp"):
            kind: str | None = _REFUSED[category]
        else:  # a tab is whitespace to the reader, though a control to Unicode
            kind = "whitespace" if char.isspace() else _REFUSED.get(category)
        if kind is not None:
            raise InvalidReviewerId(value, f"holds {kind} (U+{ord(char):04X} at {i})")
    return normal


def reviewer_id(value: object) -> str:
    """The normal form of a reviewer id.

    Raises:
        InvalidReviewerId: not a string; empty, too long, or holding whitespace, control or
            format characters or separators once normalised; or a `group:` name (a reviewer
            is a person, not a group).
    """
    normal = _checked(value, "reviewer")
    if normal.startswith(GROUP_PREFIX):
        raise InvalidReviewerId(value, "names a group: a reviewer is a person, not a group")
    return normal


def group_name(value: object) -> str:
    """The normal form of a group name (without `group:`), by the rules of `reviewer_id`.

    Raises:
        InvalidReviewerId: as `reviewer_id`.
    """
    normal = _checked(value, "group")
    return normal.removeprefix(GROUP_PREFIX) if normal.startswith(GROUP_PREFIX) else normal


def approver(value: object) -> str:
    """A policy's approver in normal form: a reviewer id, or `group:<name>`.

    Raises:
        InvalidReviewerId: as `reviewer_id`.
    """
    if isinstance(value, str) and _normal(value).startswith(GROUP_PREFIX):
        return GROUP_PREFIX + _checked(_normal(value).removeprefix(GROUP_PREFIX), "group")
    return reviewer_id(value)
