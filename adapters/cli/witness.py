"""`signoff ledger witness init | vkey | cosign` and `signoff ledger vkey`: checkpoints and the
witnesses that cosign them (`ledger.audit.witness`).

A witness runs with its own key file and state file, anywhere: it needs no KEK and no database,
unless it asks the database (any login that reads the journal, an auditor's) for the
consistency proof.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from ledger.audit.checkpoint import MalformedNote, VerifierKey, parse_keys
from ledger.audit.digest import (
    ConsistencyProof,
    Digest,
    DigestError,
    DigestMismatch,
    prove_consistency,
    recorded_signing_keys,
)
from ledger.audit.verifier import MalformedDocument, load_public_keys
from ledger.audit.witness import (
    WitnessRefused,
    WitnessState,
    cosign_checkpoint,
    create_key,
    load_key,
    load_state,
    locked,
    save_state,
    signed_checkpoint,
)
from ledger.keys import KeyRing

from .context import open_database, settings_of
from .output import add_json_flag, emit, read_document, safe, write_document

__all__ = ["register", "register_vkey"]

_WITNESS_EXAMPLES = """\
examples:
  signoff ledger witness init --key witness.key --name witness.example.com/w1
  signoff ledger witness cosign --key witness.key --state witness.state \\
      --log-key "$(cat log.vkey)" --digest digest.json --proof proof.json --out cosigned.json
  signoff ledger witness cosign --key witness.key --state witness.state \\
      --log-key "$(cat log.vkey)" --digest digest.json --from-database --out cosigned.json
"""
_EPOCH = datetime.fromtimestamp(0, UTC)


def register_vkey(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    vkey = commands.add_parser(
        "vkey",
        help="the log's verifier keys (C2SP vkey) of its checkpoints, one a line: what a "
        "witness is given with --log-key",
    )
    vkey.add_argument(
        "--public-keys",
        type=Path,
        metavar="KEYS",
        help="from these keys (`keys export-public`), without the database or the KEK",
    )
    add_json_flag(vkey)
    vkey.set_defaults(run=lambda a: asyncio.run(_vkey(a)))


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    witness = commands.add_parser(
        "witness",
        help="a witness of the journal's checkpoints: its own key and state, cosigning only "
        "checkpoints that extend what it cosigned",
        epilog=_WITNESS_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = witness.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="what the witness does"
    )

    init = actions.add_parser("init", help="make a witness key file; print its vkey")
    init.add_argument("--key", type=Path, required=True, metavar="FILE", help="a new file")
    init.add_argument(
        "--name", required=True, metavar="NAME", help="the witness's name (witness.example/w1)"
    )
    add_json_flag(init)
    init.set_defaults(run=_init)

    vkey = actions.add_parser("vkey", help="print the vkey of a witness key file")
    vkey.add_argument(
        "--key", type=Path, required=True, metavar="FILE", help="the witness key file"
    )
    add_json_flag(vkey)
    vkey.set_defaults(run=_witness_vkey)

    cosign = actions.add_parser(
        "cosign",
        help="check a checkpoint (log signature, no rollback, consistency proof) and cosign "
        "it; exit 1 and say why when refused (the state then stays as it was)",
    )
    cosign.add_argument("--key", type=Path, required=True, metavar="FILE", help="witness key")
    cosign.add_argument(
        "--state",
        type=Path,
        required=True,
        metavar="FILE",
        help="the last cosigned checkpoint; created on the first cosignature",
    )
    cosign.add_argument(
        "--log-key",
        action="append",
        required=True,
        metavar="VKEY",
        help="the log's vkey (`signoff ledger vkey`); repeatable across key rotations",
    )
    source = cosign.add_mutually_exclusive_group(required=True)
    source.add_argument("--digest", type=Path, metavar="FILE", help="a digest with a checkpoint")
    source.add_argument("--checkpoint", type=Path, metavar="FILE", help="a checkpoint note (text)")
    proof = cosign.add_mutually_exclusive_group()
    proof.add_argument(
        "--proof",
        type=Path,
        metavar="FILE",
        help="the consistency proof from the last cosigned checkpoint (`ledger consistency`)",
    )
    proof.add_argument(
        "--from-database",
        action="store_true",
        help="ask the database for the consistency proof (an auditor's login is enough)",
    )
    cosign.add_argument(
        "--out", type=Path, metavar="FILE", help="write the cosigned document here, not stdout"
    )
    add_json_flag(cosign)
    cosign.set_defaults(run=lambda a: asyncio.run(_cosign(a)))


async def _vkey(args: argparse.Namespace) -> int:
    origin = settings_of(args).log_origin
    if origin is None:
        raise DigestError(
            "no log origin: set SIGNOFF_LOG_ORIGIN (see the docs: audit, digests and proofs, "
            '"Checkpoints and witnesses")'
        )
    if args.public_keys is not None:
        try:
            keys = load_public_keys(read_document(args.public_keys))
        except MalformedDocument as e:
            raise DigestError(f"{args.public_keys}: {e}") from e
    else:
        async with open_database(args) as db:
            keys = await recorded_signing_keys(await KeyRing.open(db, create_missing=False))
    vkeys = {key_id: VerifierKey(origin, 0x01, public).vkey for key_id, public in keys.items()}
    emit(args, "\n".join(vkeys.values()), {"origin": origin, "vkeys": vkeys})
    return 0


def _init(args: argparse.Namespace) -> int:
    key = create_key(args.key, args.name)
    vkey = key.verifier.vkey
    emit(args, vkey, {"name": key.name, "vkey": vkey, "key": str(args.key)})
    return 0


def _witness_vkey(args: argparse.Namespace) -> int:
    key = load_key(args.key)
    emit(args, key.verifier.vkey, {"name": key.name, "vkey": key.verifier.vkey})
    return 0


async def _cosign(args: argparse.Namespace) -> int:
    key = load_key(args.key)
    try:
        log_keys = parse_keys(args.log_key)
    except MalformedNote as e:
        raise DigestError(f"--log-key: {e}") from e
    digest = _read_digest(args.digest) if args.digest is not None else None
    if digest is not None and digest.checkpoint is None:
        raise DigestError(
            f"{args.digest} carries no checkpoint: the log takes them once SIGNOFF_LOG_ORIGIN "
            "is set"
        )
    note_text = digest.checkpoint if digest is not None else read_document(args.checkpoint)
    assert note_text is not None
    proof = _read_proof(args.proof) if args.proof is not None else None
    try:
        with locked(args.state):  # check and update as one step against other cosigners
            state = load_state(args.state)
            if args.from_database and state is not None:
                proof = await _proof_from_database(args, state, note_text, log_keys)
            cosigned = cosign_checkpoint(key, state, note_text, log_keys, proof, int(time.time()))
            save_state(args.state, cosigned.state)
    except WitnessRefused as e:
        print(f"refused: {safe(e.reason)}", file=sys.stderr)
        return 1
    new = cosigned.state
    document = (
        cosigned.note
        if digest is None
        else dataclasses.replace(digest, checkpoint=cosigned.note).to_json()
    )
    text = (
        f"cosigned {safe(new.origin)} at {new.tree_size} events (root {new.root.hex()}), "
        f"extending the {cosigned.previous_size} cosigned before, as {safe(key.name)}"
    )
    data = {
        "origin": new.origin,
        "tree_size": new.tree_size,
        "root": new.root.hex(),
        "previous_size": cosigned.previous_size,
        "witness": key.name,
    }
    if args.out is None:
        print(document, end="")
        print(safe(text), file=sys.stderr)
        return 0
    write_document(args.out, document)
    emit(args, f"{text}: written to {safe(args.out)}", {**data, "out": str(args.out)})
    return 0


async def _proof_from_database(
    args: argparse.Namespace, state: WitnessState, note_text: str, log_keys: list[VerifierKey]
) -> ConsistencyProof | None:
    """The proof from the state's tree to the checkpoint's, as the database computes it (an
    untrusted helper: the witness checks it against the roots it holds), asked only once the
    log's signature verifies."""
    _, checkpoint = signed_checkpoint(note_text, log_keys)
    if checkpoint.tree_size <= state.tree_size:
        return None  # nothing to prove; the size checks decide
    # prove_consistency reads only the trees' sizes and roots of the digests it is given.
    old = Digest(state.tree_size, state.root, 0, _EPOCH, "", b"")
    new = Digest(checkpoint.tree_size, checkpoint.root, 0, _EPOCH, "", b"")
    try:
        async with open_database(args) as db:
            return await prove_consistency(db, old, new)
    except DigestMismatch as e:
        raise WitnessRefused(f"the database has no consistency proof: {e.problem}") from e


def _read_digest(path: Path) -> Digest:
    try:
        return Digest.from_json(read_document(path))
    except MalformedDocument as e:
        raise DigestError(f"{path}: {e}") from e


def _read_proof(path: Path) -> ConsistencyProof:
    try:
        return ConsistencyProof.from_json(read_document(path))
    except MalformedDocument as e:
        raise DigestError(f"{path}: {e}") from e
