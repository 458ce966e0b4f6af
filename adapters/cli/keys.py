"""`signoff keys ...`: the data keys and the KEK that wraps them."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

from ledger.keys import KeyInfo, KeyRing, LocalKek, Purpose
from ledger.keys.kek import new_kek_text
from ledger.keys.public import published_keys

from . import kek_file
from .arguments import identifier
from .context import open_database
from .output import add_json_flag, emit, safe, wants_json, write_document

_ROTATE_EXAMPLES = """\
examples:
  signoff keys rotate checkpoint        new checkpoints under a new key; old ones still open
  signoff checkpoints reencrypt         then move the old rows to it
  signoff keys retire ck-0123456789abcdef     and retire the old key once nothing uses it
"""
_NEW_KEK_EXAMPLES = """\
examples:
  signoff keys new-kek --out ~/.config/signoff/kek
  export SIGNOFF_KEK_FILE=~/.config/signoff/kek
  export SIGNOFF_KEK="$(signoff keys new-kek)"       (or into a secret manager, from stdout)
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = groups.add_parser("keys", help="data keys (wrapped by the KEK) and rotation")
    commands = keys.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    init = commands.add_parser(
        "init",
        help="create an active key for every purpose lacking one (the decision signing key "
        "only with the reviewer-side KEK)",
    )
    add_json_flag(init)
    init.set_defaults(run=lambda a: asyncio.run(_init(a)))

    listing = commands.add_parser("list", help="list the keys and their states")
    add_json_flag(listing)
    listing.set_defaults(run=lambda a: asyncio.run(_list(a)))

    rotate = commands.add_parser(
        "rotate", help="new active key; the old one stays decrypt-only", epilog=_ROTATE_EXAMPLES
    )
    rotate.add_argument(
        "purpose", choices=[p.value for p in Purpose], help="which key: %(choices)s"
    )
    add_json_flag(rotate)
    rotate.set_defaults(run=lambda a: asyncio.run(_rotate(a)))

    retire = commands.add_parser(
        "retire",
        help="retire a decrypt-only key: it signs, MACs and seals nothing again; what it "
        "sealed no longer opens, what it MACed or signed still verifies",
    )
    retire.add_argument("key_id", type=identifier, help="the key's id (`keys list`)")
    add_json_flag(retire)
    retire.set_defaults(run=lambda a: asyncio.run(_retire(a)))

    rewrap = commands.add_parser("rewrap", help="rewrap every data key under a new KEK")
    rewrap.add_argument(
        "--new-kek-file",
        type=Path,
        required=True,
        help="the new KEK's file, base64 of 32 bytes (`keys new-kek --out`)",
    )
    add_json_flag(rewrap)
    rewrap.set_defaults(run=lambda a: asyncio.run(_rewrap(a)))

    export = commands.add_parser(
        "export-public", help="the digest-signing public keys, as the journal recorded them"
    )
    export.add_argument("--out", type=Path, help="write to this file instead of stdout")
    add_json_flag(export)
    export.set_defaults(run=lambda a: asyncio.run(_export_public(a)))

    new_kek = commands.add_parser(
        "new-kek",
        help="make a new key-encryption key (KEK)",
        description="Make a new KEK: 32 random bytes, base64. With --out it goes to a new file "
        "(mode 0600; new folders 0700; an existing file is never overwritten) and the command "
        "says how to point Signoff at it; without --out the key is printed on stdout, for a "
        "secret manager or SIGNOFF_KEK. Back it up: without it nothing encrypted can be read.",
        epilog=_NEW_KEK_EXAMPLES,
    )
    new_kek.add_argument("--out", type=Path, metavar="FILE", help="write the KEK to this new file")
    add_json_flag(new_kek)
    new_kek.set_defaults(run=_new_kek)


def _row(info: KeyInfo) -> dict[str, Any]:
    return {
        "key_id": info.key_id,
        "purpose": info.purpose.value,
        "state": info.state.value,
        "kek_id": info.kek_id,
        "created_at": info.created_at.isoformat(),
        "rotated_at": info.rotated_at.isoformat() if info.rotated_at else None,
        "retired_at": info.retired_at.isoformat() if info.retired_at else None,
        "sealed": info.sealed,
    }


async def _init(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await KeyRing.open(db, create_missing=False)
        created = await ring.init()
    text = f"created {', '.join(created)}" if created else "every purpose has an active key"
    if not ring.can_sign_decisions and not any(
        k.purpose is Purpose.DECISION_SIGNING for k in ring.all_keys()
    ):
        text += (
            "; no decision signing key: run `keys init` again with SIGNOFF_REVIEWER_KEK_FILE "
            "(the reviewer side's KEK) to make it"
        )
    emit(args, text, {"created": created})
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await KeyRing.open(db, create_missing=False)
    rows = [_row(k) for k in ring.all_keys()]
    lines = [f"{'KEY':<22} {'PURPOSE':<15} {'STATE':<13} {'KEK':<21} CREATED"]
    lines += [
        f"{safe(r['key_id']):<22} {r['purpose']:<15} {r['state']:<13} {safe(r['kek_id']):<21} "
        f"{r['created_at']}"
        for r in rows
    ]
    emit(args, "\n".join(lines), {"keys": rows})
    return 0


async def _rotate(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await KeyRing.open(db)
        key_id = await ring.rotate(Purpose(args.purpose))
    text = (
        f"{args.purpose}: {key_id} is active; running processes switch to it within "
        f"{ring.refresh_seconds:g} s and keep reading data under the old key"
    )
    emit(args, text, {"purpose": args.purpose, "key_id": key_id})
    return 0


async def _retire(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await KeyRing.open(db)
        await ring.retire(args.key_id)
    emit(args, f"{safe(args.key_id)} retired", {"key_id": args.key_id, "state": "retired"})
    return 0


async def _rewrap(args: argparse.Namespace) -> int:
    new_kek = LocalKek.from_file(args.new_kek_file)
    async with open_database(args) as db:
        ring = await KeyRing.open(db, create_missing=False)
        count = await ring.rewrap(new_kek)
    text = (
        f"rewrapped {count} data keys under {new_kek.kek_id}; "
        f"configure SIGNOFF_KEK_FILE={safe(args.new_kek_file)} from now on"
    )
    emit(args, text, {"rewrapped": count, "kek_id": new_kek.kek_id})
    return 0


async def _export_public(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await KeyRing.open(db)
        published = await published_keys(ring, Purpose.DIGEST_SIGNING)  # as journaled
    keys = [
        {
            "key_id": info.key_id,
            "algorithm": "Ed25519",
            "state": info.state.value,
            "public_key": base64.b64encode(public).decode(),
        }
        for info, public in published
    ]
    data = {"signoff_public_keys": 1, "keys": keys}
    document = json.dumps(data, indent=2) + "\n"
    if args.out is None:  # the key document is JSON already: the same with --json
        sys.stdout.write(document)
        return 0
    write_document(args.out, document)
    text = f"{len(keys)} public signing key(s) written to {safe(args.out)}"
    emit(args, text, {"out": str(args.out), "keys": len(keys)})
    return 0


def _new_kek(args: argparse.Namespace) -> int:
    if args.out is None:
        key = new_kek_text()
        if sys.stdout.isatty() and not wants_json(args):
            print(
                "warning: the KEK below is now in your terminal's scrollback; prefer --out FILE",
                file=sys.stderr,
            )
        kek = LocalKek.from_base64(key, "the new KEK")
        emit(args, key, {"kek_id": kek.kek_id, "kek": key})
        return 0
    path = kek_file.write_new(args.out)
    kek = LocalKek.from_file(path)
    text = (
        f"wrote KEK {kek.kek_id} to {safe(path)} (mode 0600). Back it up: without it nothing "
        "encrypted can be read. Point Signoff at it:\n"
        f"  export SIGNOFF_KEK_FILE={safe(kek_file.shell_quoted(path))}"
    )
    data = {"kek_id": kek.kek_id, "path": str(path), "env": {"SIGNOFF_KEK_FILE": str(path)}}
    emit(args, text, data)
    return 0
