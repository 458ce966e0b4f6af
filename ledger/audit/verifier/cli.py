"""`python -m ledger.audit.verifier`: the offline verifier's command line.

    python -m ledger.audit.verifier digest DIGEST --public-keys KEYS [--witness-key VKEY ...
        --witnesses N]
    python -m ledger.audit.verifier inclusion DIGEST PROOF --public-keys KEYS
    python -m ledger.audit.verifier consistency OLD NEW PROOF --public-keys KEYS
    python -m ledger.audit.verifier tiles DIR --public-keys KEYS [--inclusion PROOF] [--old OLD]

KEYS is the output of `signoff keys export-public`. Exit 0: valid; 1: invalid (the reason is
printed); 2: usage error (bad arguments, unreadable files, malformed KEYS).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from ...canonical import format_time
from ..checkpoint import (
    MalformedNote,
    VerifierKey,
    parse_keys,
)
from .checks import (
    check_consistency,
    check_digest,
    check_inclusion,
    check_tiles,
    check_witnesses,
    consistency_from_tiles,
    inclusion_from_tiles,
    read_tile_directory,
)
from .documents import ConsistencyProof, Digest, InclusionProof, load_public_keys
from .failures import Invalid, MalformedDocument

__all__ = ["main"]

_T = TypeVar("_T")


class _UsageError(Exception):
    pass


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _UsageError(f"cannot read {path}: {e}") from e


def _run(args: argparse.Namespace) -> str:
    """Check what the arguments name; return what was shown valid.

    Raises:
        Invalid: it is not valid.
        _UsageError: a file could not be read, or KEYS is malformed.
    """
    try:
        keys = load_public_keys(_read(args.public_keys))
    except MalformedDocument as e:
        raise _UsageError(f"{args.public_keys}: {e}") from e
    if args.command == "digest":
        witness_keys, required = _witness_options(args)
        digest = _document(Digest.from_json, args.digest)
        check_digest(digest, keys)
        shown = (
            f"valid: digest of {digest.tree_size} events (last position "
            f"{digest.last_position}), root {digest.root.hex()}, signed by {digest.key_id} at "
            f"{format_time(digest.taken_at)}"
        )
        if required:
            try:
                valid = check_witnesses(digest, witness_keys, required)
            except MalformedDocument as e:
                raise MalformedDocument(f"{args.digest}: {e}") from e
            shown += f"; cosigned by {len(valid)} of {required} required witnesses"
        return shown
    if args.command == "inclusion":
        digest = _document(Digest.from_json, args.digest)
        proof = _document(InclusionProof.from_json, args.proof)
        check_inclusion(digest, proof, keys)
        event = proof.event
        return (
            f"valid: the event of stream {event.stream_id!r} version {event.version} "
            f"({event.type}, by {event.actor}{_written_by(event.login)} at "
            f"{event.recorded_at}) is leaf "
            f"{proof.leaf_index} of the {digest.tree_size}-event journal signed by "
            f"{digest.key_id} at {format_time(digest.taken_at)}"
        )
    if args.command == "tiles":
        return _tiles(args, keys)
    old = _document(Digest.from_json, args.old)
    new = _document(Digest.from_json, args.new)
    consistency = _document(ConsistencyProof.from_json, args.proof)
    check_consistency(old, new, consistency, keys)
    return (
        f"valid: the journal of {new.tree_size} events (root {new.root.hex()}) extends the "
        f"journal of {old.tree_size} events (root {old.root.hex()}); both signatures verify"
    )


def _witness_options(args: argparse.Namespace) -> tuple[list[VerifierKey], int]:
    """The witness keys and how many must have cosigned (default: all of them)."""
    try:
        keys = parse_keys(args.witness_key)
    except MalformedNote as e:
        raise _UsageError(f"--witness-key: {e}") from e
    required = len(keys) if args.witnesses is None else args.witnesses
    if required > len(keys):
        raise _UsageError(
            f"--witnesses {required}: only {len(keys)} --witness-key given, so it cannot be met"
        )
    return keys, required


def _tiles(args: argparse.Namespace, keys: Mapping[str, bytes]) -> str:
    directory: Path = args.directory
    digest = _document(Digest.from_json, args.digest or directory / "digest.json")
    tiles = read_tile_directory(directory, digest.tree_size)
    check_tiles(digest, tiles, keys)
    shown = [
        f"valid: {len(tiles)} tiles of {directory} hash to the root {digest.root.hex()} of the "
        f"{digest.tree_size}-event digest signed by {digest.key_id}"
    ]
    for path in args.inclusion:
        proof = _document(InclusionProof.from_json, path)
        check_inclusion(digest, proof, keys)
        inclusion_from_tiles(digest, tiles, proof)
        shown.append(f"valid: {path}: leaf {proof.leaf_index} is in the tiles")
    if args.old is not None:
        old = _document(Digest.from_json, args.old)
        check_digest(old, keys)
        consistency_from_tiles(old, digest, tiles)
        shown.append(f"valid: the tiles extend the {old.tree_size}-event digest {args.old}")
    return "\n".join(shown)


def _document(parse: Callable[[str], _T], path: Path) -> _T:
    try:
        return parse(_read(path))
    except MalformedDocument as e:
        raise MalformedDocument(f"{path}: {e}") from e


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ledger.audit.verifier",
        description="Check Signoff digests and proofs offline, with only the public keys "
        "(`signoff keys export-public`). Exit 0: valid, 1: invalid, 2: usage error.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    digest = commands.add_parser("digest", help="check a digest's signature")
    digest.add_argument("digest", type=Path, metavar="DIGEST")
    digest.add_argument(
        "--witness-key",
        action="append",
        default=[],
        metavar="VKEY",
        help="a trusted witness's vkey (repeatable)",
    )
    digest.add_argument(
        "--witnesses",
        type=_count_argument,
        metavar="N",
        help="how many of the --witness-key witnesses must have cosigned (default: all)",
    )
    inclusion = commands.add_parser("inclusion", help="check an event's inclusion proof")
    inclusion.add_argument("digest", type=Path, metavar="DIGEST")
    inclusion.add_argument("proof", type=Path, metavar="PROOF")
    consistency = commands.add_parser("consistency", help="check that NEW extends OLD")
    consistency.add_argument("old", type=Path, metavar="OLD")
    consistency.add_argument("new", type=Path, metavar="NEW")
    consistency.add_argument("proof", type=Path, metavar="PROOF")
    tiles = commands.add_parser(
        "tiles", help="check an exported tile directory (`signoff ledger tiles export`)"
    )
    tiles.add_argument("directory", type=Path, metavar="DIR")
    tiles.add_argument(
        "--digest", type=Path, metavar="DIGEST", help="the digest to check (DIR/digest.json)"
    )
    tiles.add_argument(
        "--inclusion",
        type=Path,
        action="append",
        default=[],
        metavar="PROOF",
        help="also check this inclusion proof's event against the tiles (repeatable)",
    )
    tiles.add_argument(
        "--old", type=Path, metavar="DIGEST", help="also check the tiles extend this digest"
    )
    for command in (digest, inclusion, consistency, tiles):
        command.add_argument(
            "--public-keys",
            type=Path,
            required=True,
            metavar="KEYS",
            help="the JSON of `signoff keys export-public`",
        )
        command.add_argument("--json", action="store_true", help="print JSON for machines")
    return parser


def _count_argument(text: str) -> int:
    if not text.isdecimal():
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0 or more)")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the verifier; return its exit code."""
    args = _parser().parse_args(argv)
    try:
        shown = _run(args)
    except _UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Invalid as e:
        _say(args, False, f"INVALID: {e}")
        return 1
    _say(args, True, shown)
    return 0


def _say(args: argparse.Namespace, valid: bool, text: str) -> None:
    if args.json:
        print(json.dumps({"valid": valid, "message": text}))
    else:
        print(text)


def _written_by(login: str | None) -> str:
    """The login that wrote an event, as its hash covers it (none before tag 3)."""
    return "" if login is None else f" through login {login!r}"
