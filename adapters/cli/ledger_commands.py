"""`signoff ledger ...`: verify the journal, sign digests of it and prove events and digests."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from approvals.checks import verify_all
from ledger.audit.checkpoint import MalformedNote, VerifierKey, parse_keys
from ledger.audit.digest import (
    Digest,
    DigestCheck,
    DigestError,
    DigestMismatch,
    prove_consistency,
    prove_inclusion,
    recorded_signing_keys,
    take_digest,
    verify_digest,
)
from ledger.audit.integrity import LedgerReport, StreamCheckReport
from ledger.audit.tree import export_tiles, integrate
from ledger.audit.verifier import (
    Invalid,
    MalformedDocument,
    check_witnesses,
    load_public_keys,
)
from ledger.journal.reader import newest_position
from ledger.keys import KeyRing
from ledger.store import Database

from . import calls, witness
from .arguments import add_read_option, position, positive_int
from .context import lag_of, open_database, open_reading_database, settings_of
from .output import add_json_flag, emit, read_document, safe
from .progress import Progress, progress_bar, shows_progress

_VERIFY_EXAMPLES = """\
examples:
  signoff ledger verify                                  chains, order, projections (exit 1 if not)
  signoff ledger verify --digest digest.json             and the database still matches it
  signoff ledger verify --digest digest.json --public-keys keys.json     without the KEK
  signoff ledger verify --digest cosigned.json --witness-key "$W1" --witness-key "$W2" \
      --witnesses 2                                      and two witnesses cosigned it
  signoff ledger verify --since-digest old.json       resume: only what came after old.json
  signoff ledger verify --digest new.json --since-digest old.json   and new.json from there
  signoff ledger verify --digest new.json --full                     every event again
"""
# The public keys then come from the very database the digest checks: recorded in its journal
# and checked against data_keys and the private keys, but pinned copies are what an auditor trusts.
_TRUSTING_THE_DATABASE = (
    "warning: no --public-keys: the signing keys come from this database (its journal's records, "
    "checked against data_keys); pin them with `signoff keys export-public` and pass "
    "--public-keys FILE"
)
_STANDBY_BEHIND = (
    "read from a standby that was behind the primary: it may not have replayed the digest's "
    "events yet; check against the primary, or once the standby has caught up"
)
_DIGEST_EXAMPLES = """\
examples:
  signoff ledger digest --out digest-$(date +%F).json    keep it outside the database
  signoff ledger digest | tee digest.json
  signoff ledger digest --out digest.json --checkpoint checkpoint.txt    and its C2SP checkpoint
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ledger = groups.add_parser("ledger", help="the journal and the tool-call ledger")
    commands = ledger.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    verify = commands.add_parser(
        "verify",
        help="check the hash chains, the global order, every projection against a rebuild and "
        "the stream checks; exit 1 and name the first problem if any",
        epilog=_VERIFY_EXAMPLES,
    )
    verify.add_argument(
        "--digest", type=Path, metavar="FILE", help="also check the database still matches it"
    )
    verify.add_argument(
        "--public-keys",
        type=Path,
        metavar="KEYS",
        help="check the digest's signature with these keys (`keys export-public`) instead of "
        "the key ring, which needs the KEK",
    )
    verify.add_argument(
        "--witness-key",
        action="append",
        default=[],
        metavar="VKEY",
        help="a trusted witness's vkey (`ledger witness init` printed it); repeatable",
    )
    verify.add_argument(
        "--witnesses",
        type=positive_int,
        metavar="N",
        help="how many --witness-key witnesses must have cosigned the digest's checkpoint "
        "(default: all of them)",
    )
    verify.add_argument(
        "--since-digest",
        type=Path,
        metavar="FILE",
        help="an earlier digest you verified: resume from it, reading only the events after it "
        "and the streams they touch (the stored tree must hold its signed root); with --digest, "
        "check that digest from there on too",
    )
    verify.add_argument(
        "--full",
        action="store_true",
        help="check every event, as without --since-digest (which it ignores)",
    )
    add_json_flag(verify)
    add_read_option(verify)
    verify.set_defaults(run=_verify)

    integrate = commands.add_parser(
        "integrate",
        help="add the journal's new events to the stored Merkle tree (digests do it too)",
    )
    integrate.add_argument(
        "--wait",
        action="store_true",
        help="wait for another integrator instead of leaving the work to it",
    )
    add_json_flag(integrate)
    integrate.set_defaults(run=lambda a: asyncio.run(_integrate(a)))

    tiles = commands.add_parser("tiles", help="the stored Merkle tree as C2SP tlog-tiles")
    tile_commands = tiles.add_subparsers(
        dest="tiles_command", required=True, metavar="COMMAND", help="what to do"
    )
    export = tile_commands.add_parser(
        "export",
        help="write the tiles (tile/<L>/<N>, partial .p/<W>) and the signed digest.json to DIR",
    )
    export.add_argument(
        "directory", type=Path, metavar="DIR", help="where to write (made when missing)"
    )
    export.add_argument(
        "--digest",
        type=Path,
        metavar="FILE",
        help="export the tree of this digest (default: take a new one, which needs the KEK)",
    )
    add_json_flag(export)
    export.set_defaults(run=lambda a: asyncio.run(_export_tiles(a)))

    digest = commands.add_parser(
        "digest", help="sign the Merkle root of the journal so far", epilog=_DIGEST_EXAMPLES
    )
    digest.add_argument("--out", type=Path, metavar="FILE", help="write here, not to stdout")
    digest.add_argument(
        "--checkpoint",
        type=Path,
        metavar="FILE",
        help="also write its C2SP checkpoint (signed note) here; needs SIGNOFF_LOG_ORIGIN",
    )
    add_json_flag(digest)
    digest.set_defaults(run=lambda a: asyncio.run(_digest(a)))

    prove = commands.add_parser("prove", help="inclusion proof of one event in a digest")
    prove.add_argument(
        "position", type=position, metavar="POSITION", help="the event's journal position"
    )
    prove.add_argument(
        "--digest", type=Path, metavar="FILE", required=True, help="the digest (`ledger digest`)"
    )
    prove.add_argument("--out", type=Path, metavar="FILE", help="write here, not to stdout")
    add_json_flag(prove)
    add_read_option(prove)
    prove.set_defaults(run=lambda a: asyncio.run(_prove(a)))

    consistency = commands.add_parser(
        "consistency", help="proof that the NEW digest's journal extends the OLD one's"
    )
    consistency.add_argument("old", type=Path, metavar="OLD", help="the earlier digest file")
    consistency.add_argument("new", type=Path, metavar="NEW", help="the later digest file")
    consistency.add_argument("--out", type=Path, metavar="FILE", help="write here, not to stdout")
    add_json_flag(consistency)
    add_read_option(consistency)
    consistency.set_defaults(run=lambda a: asyncio.run(_consistency(a)))

    witness.register_vkey(commands)
    witness.register(commands)
    calls.register(commands)


def _verify(args: argparse.Namespace) -> int:
    witnessed = _check_witnesses(args)  # offline: its usage errors before the database
    report, check = asyncio.run(_verify_ledger(args))
    problems = report.problems
    chains, order = report.chains, report.order
    if not problems:
        text = "\n".join(_intact(report))
    else:
        text = "\n".join(
            [f"ledger TAMPERED: {len(problems)} problem(s); first: {safe(problems[0])}"]
            + [f"  - {safe(_brief(p))}" for p in problems]
            + (
                [
                    f"resumed from the earlier digest (tree size {r.tree_size}, last position "
                    f"{r.last_position}): read {r.new_events} new events in {r.streams} streams"
                ]
                if (r := report.resumed) is not None
                else []
            )
        )
    data: dict[str, Any] = {
        "ok": report.ok,
        "events": chains.events,
        "streams": chains.streams,
        "bad": [asdict(b) for b in chains.bad],
        "order": {
            "events": order.events,
            "horizon": order.horizon,
            "in_flight": order.in_flight,
            "bad": [asdict(b) for b in order.bad],
        },
        "projections": [asdict(p) for p in report.projections],
        "stream_checks": [asdict(c) for c in report.stream_checks],
        "tree": None if report.tree is None else asdict(report.tree),
        "resumed": None if report.resumed is None else asdict(report.resumed),
        "problems": problems,
    }
    if (lag := lag_of(args)) is not None:
        data["standby"] = lag.to_dict()
    if check is not None:
        digest = check.digest
        if check.ok:
            text += (
                f"\ndigest matches: the first {digest.tree_size} events hash to its root "
                f"{digest.root.hex()}, signed by {digest.key_id}"
            )
        else:
            text += "\ndigest DOES NOT MATCH: " + "; ".join(map(safe, check.problems))
            if _behind(args):
                text += f"\n  {_STANDBY_BEHIND}"
        data["ok"] = report.ok and check.ok
        data["digest"] = {
            "ok": check.ok,
            "tree_size": digest.tree_size,
            "root": digest.root.hex(),
            "key_id": digest.key_id,
            "problems": list(check.problems),
        }
    if witnessed is not None:
        ok, line, valid, required = witnessed
        text += f"\n{'witnesses: ' if ok else 'witnesses INSUFFICIENT: '}{safe(line)}"
        data["ok"] = data["ok"] and ok
        data["witnesses"] = {"ok": ok, "valid": valid, "required": required, "message": line}
    emit(args, text, data)
    return 0 if data["ok"] else 1


def _intact(report: LedgerReport) -> list[str]:
    """What an intact ledger's check covered, one line each."""
    chains, order, resumed = report.chains, report.order, report.resumed
    if resumed is None:
        lines = [
            f"ledger intact: {chains.events} events in {chains.streams} streams",
            f"  hash chains: {chains.events} events recomputed",
        ]
    else:
        lines = [
            f"ledger intact since the earlier digest (tree size {resumed.tree_size}, last "
            f"position {resumed.last_position}): read {resumed.new_events} new events in "
            f"{resumed.streams} streams",
            f"  hash chains: the {resumed.streams} streams the new events touch, read whole "
            f"({resumed.stream_events} events), {resumed.anchored} of them anchored to the "
            "earlier digest's root by an inclusion proof",
        ]
    touched = "" if resumed is None else " (the touched streams' rows)"
    lines += [
        f"  global order: {order.events} events, each under the transaction that wrote "
        f"it ({order.in_flight} above the horizon)",
        f"  projections rebuilt from their streams{touched}: "
        + ", ".join(f"{p.table} ({p.rows} rows)" for p in report.projections),
        "  stream checks: "
        + (", ".join(_stream_check(c) for c in report.stream_checks) or "none registered"),
    ]
    if report.tree is not None:
        what = (
            "tiles recomputed from the events" if resumed is None else "tiles the new events fill"
        )
        lines.append(
            f"  stored Merkle tree: {report.tree.tree_size} leaves, {report.tree.tiles} {what}"
        )
    if resumed is not None:
        lines.append("  streams untouched since the earlier digest: not read (use --full)")
    return lines


def _check_witnesses(args: argparse.Namespace) -> tuple[bool, str, list[str], int] | None:
    """With --witness-key: whether enough of them cosigned the digest's checkpoint, a line
    saying so, the valid witnesses' names and how many were required."""
    if not args.witness_key and args.witnesses is None:
        return None
    if not args.digest:
        raise DigestError("--witness-key checks a digest's cosignatures: give --digest FILE too")
    try:
        keys: list[VerifierKey] = parse_keys(args.witness_key)
    except MalformedNote as e:
        raise DigestError(f"--witness-key: {e}") from e
    required = len(keys) if args.witnesses is None else args.witnesses
    if required > len(keys):
        raise DigestError(
            f"--witnesses {required}: only {len(keys)} --witness-key given, so it cannot be met"
        )
    digest = _read_digest(args.digest)
    try:
        valid = check_witnesses(digest, keys, required)
    except MalformedDocument as e:
        return False, f"{args.digest}: {e}", [], required
    except Invalid as e:
        return False, str(e), [], required
    names = [k.name for k in valid]
    line = (
        f"{len(valid)} valid cosignature(s) of {required} required ({', '.join(names) or 'none'})"
    )
    return True, line, names, required


def _brief(problem: str, limit: int = 200) -> str:
    """One problem on one short line (a projection's difference prints whole records)."""
    line = " ".join(problem.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


async def _verify_ledger(args: argparse.Namespace) -> tuple[LedgerReport, DigestCheck | None]:
    if args.public_keys and not (args.digest or args.since_digest):
        raise DigestError(
            "--public-keys checks a digest's signature: give --digest or --since-digest FILE too"
        )
    if args.full and not (args.digest or args.since_digest):
        raise DigestError("--full says how to check a digest: give --digest or --since-digest")
    digest = _read_digest(args.digest) if args.digest else None
    since = _read_digest(args.since_digest) if args.since_digest and not args.full else None
    keys = _read_keys(args.public_keys) if args.public_keys else None
    refused: list[str] = []  # signing keys the database's records do not vouch for: findings
    async with open_reading_database(args) as db:
        if (digest is not None or since is not None) and keys is None:
            # the KEK's errors before the long part
            ring = await KeyRing.open(db, create_missing=False)
            keys = await recorded_signing_keys(ring, refused=refused)
            print(_TRUSTING_THE_DATABASE, file=sys.stderr)
        total = await _journal_size(args, db)
        if since is not None and total is not None:
            total = max(total - since.last_position, 0)
        with progress_bar(args, "verifying chains", total=total) as advance:
            report = await verify_all(db, since=since, public_keys=keys, progress=advance)
        if digest is None or keys is None:
            return report, None
        total = digest.tree_size - (since.tree_size if since is not None else 0)
        with progress_bar(args, "checking digest", total=total) as advance:
            check = await verify_digest(db, digest, keys, since=since, progress=advance)
        refusals = tuple(f"refused: {r}" for r in refused)
        return report, replace(check, problems=(*refusals, *check.problems))


async def _journal_size(args: argparse.Namespace, db: Database) -> int | None:
    """About how many events the journal holds, for a bar's total (only when one is shown)."""
    if not shows_progress(args):
        return None
    async with db.connection() as conn:
        return await newest_position(conn)


async def _digest(args: argparse.Namespace) -> int:
    if args.checkpoint is not None and settings_of(args).log_origin is None:
        raise DigestError(
            "--checkpoint: the log has no origin; set SIGNOFF_LOG_ORIGIN (its checkpoints' "
            "origin line and key name, e.g. example.com/signoff/prod)"
        )
    async with open_database(args) as db:
        ring = await KeyRing.open(db)
        advance: Progress
        with progress_bar(args, "hashing", total=await _journal_size(args, db)) as advance:
            try:
                digest = await take_digest(db, ring, progress=advance)
            except DigestMismatch as e:  # nothing signed
                return _mismatch(e)
    if args.checkpoint is not None and digest.checkpoint is not None:
        _write(args.checkpoint, digest.checkpoint)
    if args.out is None:
        print(digest.to_json(), end="")
        return 0
    _write(args.out, digest.to_json())
    text = (
        f"digest of {digest.tree_size} events (last position {digest.last_position}), root "
        f"{digest.root.hex()}, signed by {digest.key_id}: written to {safe(args.out)}"
    )
    emit(args, text, {**digest.to_dict(), "out": str(args.out)})
    return 0


async def _integrate(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        try:
            done = await integrate(db, wait=args.wait)
        except DigestMismatch as e:
            return _mismatch(e)
    if done.skipped:
        text = f"another integrator is at work; the stored tree holds {done.tree_size} leaves"
    else:
        text = f"integrated {done.integrated} events: the stored tree holds {done.tree_size} leaves"
    emit(
        args,
        text,
        {"integrated": done.integrated, "tree_size": done.tree_size, "skipped": done.skipped},
    )
    return 0


async def _export_tiles(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    async with open_database(args) as db:
        if args.digest is not None:
            digest = _read_digest(args.digest)
        else:
            try:
                digest = await take_digest(db, await KeyRing.open(db))
            except DigestMismatch as e:
                return _mismatch(e)

        def write(path: str, hashes: bytes) -> None:
            target = directory / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(hashes)

        try:
            async with (
                db.connection() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                count = await export_tiles(conn, digest.tree_size, write)
            _write(directory / "digest.json", digest.to_json())
        except OSError as e:
            raise DigestError(f"cannot write to {directory}: {e}") from e
        except DigestMismatch as e:
            return _mismatch(e)
    text = (
        f"{count} tiles of the {digest.tree_size}-event tree and digest.json written to "
        f"{safe(directory)}"
    )
    emit(args, text, {"tiles": count, "tree_size": digest.tree_size, "out": str(directory)})
    return 0


async def _prove(args: argparse.Namespace) -> int:
    digest = _read_digest(args.digest)
    try:
        async with open_reading_database(args) as db:
            proof = await prove_inclusion(db, args.position, digest)
    except DigestMismatch as e:
        return _mismatch(e, args)
    text = (
        f"event at position {args.position} is leaf {proof.leaf_index} of the "
        f"{digest.tree_size} events in {safe(args.digest)}: proof written to {safe(args.out)}"
    )
    return _deliver(args, proof.to_json(), text, {"leaf_index": proof.leaf_index})


async def _consistency(args: argparse.Namespace) -> int:
    old, new = _read_digest(args.old), _read_digest(args.new)
    try:
        async with open_reading_database(args) as db:
            proof = await prove_consistency(db, old, new)
    except DigestMismatch as e:
        return _mismatch(e, args)
    text = (
        f"the {new.tree_size} events of {safe(args.new)} extend the {old.tree_size} of "
        f"{safe(args.old)}: proof ({len(proof.proof)} hashes) written to {safe(args.out)}"
    )
    data = {"old_size": old.tree_size, "new_size": new.tree_size}
    return _deliver(args, proof.to_json(), text, data)


def _deliver(args: argparse.Namespace, document: str, text: str, data: dict[str, Any]) -> int:
    """A proof to stdout, or to `--out` with a line (or JSON) saying so."""
    if args.out is None:
        print(document, end="")
        return 0
    _write(args.out, document)
    if (lag := lag_of(args)) is not None:
        data = {**data, "standby": lag.to_dict()}
    emit(args, text, {**data, "out": str(args.out)})
    return 0


def _mismatch(error: DigestMismatch, args: argparse.Namespace | None = None) -> int:
    """A database that no longer matches a digest is a finding, not a usage error: exit 1.
    Read from a standby that was behind, it may only not have replayed the digest's events."""
    if args is not None and _behind(args):
        print(f"NOT PROVEN: {safe(error)}; {_STANDBY_BEHIND}", file=sys.stderr)
    else:
        print(f"TAMPERED: {safe(error)}", file=sys.stderr)
    return 1


def _behind(args: argparse.Namespace) -> bool:
    """Whether the command read a standby that had not caught up with the primary."""
    lag = lag_of(args)
    return lag is not None and not lag.caught_up


def _read_digest(path: Path) -> Digest:
    try:
        return Digest.from_json(read_document(path))
    except MalformedDocument as e:
        raise DigestError(f"{path}: {e}") from e


def _read_keys(path: Path) -> dict[str, bytes]:
    try:
        return load_public_keys(read_document(path))
    except MalformedDocument as e:
        raise DigestError(f"{path}: {e}") from e


def _write(path: Path, document: str) -> None:
    try:
        path.write_text(document, encoding="utf-8")
    except OSError as e:
        raise DigestError(f"cannot write {path}: {e}") from e


def _stream_check(check: StreamCheckReport) -> str:
    if check.skipped is not None:
        return f"{check.name} skipped (no KEK configured: they check MACs)"
    return f"{check.name} ({check.streams} streams)"
