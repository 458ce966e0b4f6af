"""A witness: cosigns the journal's checkpoints only after checking they extend what it cosigned.

A witness has its own Ed25519 key (a key file it made, never the key ring's) and its own state:
the last checkpoint it cosigned, in a file. Before cosigning a new checkpoint it checks, as
c2sp.org/tlog-witness asks of `add-checkpoint`:

1. the log's signature on the checkpoint, with the log's vkey it was given (lines of unknown keys
   are ignored; a line of a known key that fails to verify refuses the checkpoint);
2. that the checkpoint's origin is the one its state tracks;
3. that the tree does not shrink, and that the same size comes with the same root;
4. a consistency proof (RFC 6962, `ledger.audit.merkle.verify_consistency`, as the verifier's
   `check_consistency` does) from the last cosigned tree to the new one.

Then it appends its cosignature/v1 line and stores the new checkpoint: the state file is
replaced atomically (temporary file, fsync, rename, fsync of the folder) under an exclusive lock,
so two cosigning processes never roll it back. A refusal leaves the state as it was.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DigestError
from .checkpoint import (
    ED25519,
    Checkpoint,
    MalformedNote,
    SignedNote,
    SignerKey,
    VerifierKey,
    cosign,
    signed_by,
)
from .merkle import EMPTY_ROOT, HASH_SIZE, verify_consistency
from .verifier import ConsistencyProof

__all__ = [
    "Cosigned",
    "WitnessError",
    "WitnessRefused",
    "WitnessState",
    "cosign_checkpoint",
    "create_key",
    "load_key",
    "load_state",
    "locked",
    "save_state",
    "signed_checkpoint",
]

_STATE_MARKER = "signoff_witness_state"


class WitnessError(DigestError):
    """A witness's key or state file is missing, unreadable or malformed."""


class WitnessRefused(DigestError):
    """The witness will not cosign this checkpoint; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WitnessState:
    """The last checkpoint the witness cosigned (its note with every signature it had)."""

    origin: str
    tree_size: int
    root: bytes
    checkpoint: str

    def to_json(self) -> str:
        doc = {
            _STATE_MARKER: 1,
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root": self.root.hex(),
            "checkpoint": self.checkpoint,
        }
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> WitnessState:
        """Raises: ValueError: not a witness state document."""
        doc: Any = json.loads(text)
        if not isinstance(doc, dict) or doc.get(_STATE_MARKER) != 1:
            raise ValueError(f"not a witness state (no `{_STATE_MARKER}: 1`)")
        origin, size, root, note = (
            doc.get(k) for k in ("origin", "tree_size", "root", "checkpoint")
        )
        if not (isinstance(origin, str) and isinstance(note, str) and isinstance(root, str)):
            raise ValueError("origin, root and checkpoint must be strings")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError("tree_size must be a count")
        raw = bytes.fromhex(root)
        if len(raw) != HASH_SIZE:
            raise ValueError(f"root is not a {HASH_SIZE}-byte hash")
        return cls(origin, size, raw, note)


@dataclass(frozen=True, slots=True)
class Cosigned:
    """A cosigned checkpoint: the note with the witness's line, and the state to store."""

    note: str
    state: WitnessState
    previous_size: int


# -- files ---------------------------------------------------------------------------------------


def create_key(path: Path, name: str) -> SignerKey:
    """Make a new witness key named `name` in a new file at `path` (mode 0600), in the signer
    key form of golang.org/x/mod's sumdb/note with type 0x04 (cosignature/v1).

    Raises:
        WitnessError: the file exists or cannot be written, or `name` is not a key name.
    """
    try:
        key = SignerKey.generate(name)
    except MalformedNote as e:
        raise WitnessError(f"--name: {e}") from e
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as e:
        raise WitnessError(f"{path} exists: a witness keeps its key; choose another file") from e
    except OSError as e:
        raise WitnessError(f"cannot create {path}: {e.strerror}") from e
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key.skey + "\n")
        out.flush()
        os.fsync(out.fileno())
    return key


def load_key(path: Path) -> SignerKey:
    """Raises: WitnessError: unreadable, or not a signer key."""
    try:
        return SignerKey.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise WitnessError(f"cannot read the witness key {path}: {e}") from e
    except MalformedNote as e:
        raise WitnessError(f"{path}: {e}") from e


def load_state(path: Path) -> WitnessState | None:
    """The state in `path`; None when there is no such file (the witness never cosigned).

    Raises:
        WitnessError: unreadable or malformed.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise WitnessError(f"cannot read the witness state {path}: {e}") from e
    try:
        return WitnessState.from_json(text)
    except ValueError as e:
        raise WitnessError(f"{path}: {e}") from e


def save_state(path: Path, state: WitnessState) -> None:
    """Replace `path` with `state` atomically: a crash leaves the old file or the new one.

    Raises:
        WitnessError: the folder is not writable.
    """
    folder = path.parent
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(state.to_json())
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        directory = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)
    except OSError as e:
        raise WitnessError(f"cannot write the witness state {path}: {e}") from e


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s state (a `.lock` file beside it) for a
    check-then-update, so concurrent cosigners never roll the state back.

    Raises:
        WitnessError: the lock file cannot be opened.
    """
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise WitnessError(f"cannot open {lock}: {e.strerror}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# -- the checks ----------------------------------------------------------------------------------


def signed_checkpoint(
    note_text: str, log_keys: Sequence[VerifierKey]
) -> tuple[SignedNote, Checkpoint]:
    """The checkpoint of `note_text`, once the log's signature on it verifies (check 1).

    Raises:
        WitnessRefused: not a checkpoint note, or not signed by one of `log_keys`.
    """
    try:
        note = SignedNote.parse(note_text)
        checkpoint = Checkpoint.parse(note.text)
    except MalformedNote as e:
        raise WitnessRefused(f"not a checkpoint: {e}") from e
    _check_log_signature(note, checkpoint, log_keys)
    return note, checkpoint


def cosign_checkpoint(
    key: SignerKey,
    state: WitnessState | None,
    note_text: str,
    log_keys: Sequence[VerifierKey],
    proof: ConsistencyProof | None,
    timestamp: int,
) -> Cosigned:
    """Check `note_text` against the log's keys, the state and the proof; cosign it.

    `proof` is the consistency proof from the state's tree size to the checkpoint's; none is
    needed when the state is empty or of the same size.

    Raises:
        WitnessRefused: a check failed; nothing was signed.
    """
    note, checkpoint = signed_checkpoint(note_text, log_keys)
    old_size, old_root = (0, EMPTY_ROOT) if state is None else (state.tree_size, state.root)
    if state is not None and state.origin != checkpoint.origin:
        raise WitnessRefused(
            f"the checkpoint is of log {checkpoint.origin!r}, this state tracks {state.origin!r}"
        )
    if checkpoint.tree_size == 0 and checkpoint.root != EMPTY_ROOT:
        raise WitnessRefused("an empty tree's root must be the hash of nothing")
    if checkpoint.tree_size < old_size:
        raise WitnessRefused(
            f"the checkpoint's tree of {checkpoint.tree_size} is smaller than the "
            f"{old_size} already cosigned: the log rolled back"
        )
    if checkpoint.tree_size == old_size:
        if checkpoint.root != old_root:
            raise WitnessRefused(
                f"the checkpoint's root differs from the one cosigned at the same size "
                f"{old_size}: the log forked"
            )
    elif old_size > 0:
        _check_proof(proof, old_size, old_root, checkpoint)
    line = cosign(note, key, timestamp)
    cosigned = note.adding(line).render()
    new_state = WitnessState(checkpoint.origin, checkpoint.tree_size, checkpoint.root, cosigned)
    return Cosigned(cosigned, new_state, old_size)


def _check_log_signature(
    note: SignedNote, checkpoint: Checkpoint, log_keys: Sequence[VerifierKey]
) -> None:
    known = [k for k in log_keys if k.kind == ED25519 and k.name == checkpoint.origin]
    if not known:
        raise WitnessRefused(f"no log key is given for the origin {checkpoint.origin!r}")
    claimed = [k for k in known if any(s.key_id == k.key_id for s in note.signatures)]
    if not claimed:
        raise WitnessRefused(
            f"the checkpoint carries no signature of a key of {checkpoint.origin!r}"
        )
    for k in claimed:  # signed-note: a known key's bad signature rejects the note
        if not signed_by(note, k):
            raise WitnessRefused(
                f"the log signature of {k.name}+{k.key_id.hex()} does not verify: the checkpoint "
                "was altered or forged"
            )


def _check_proof(
    proof: ConsistencyProof | None, old_size: int, old_root: bytes, checkpoint: Checkpoint
) -> None:
    if proof is None:
        raise WitnessRefused(
            f"a consistency proof from {old_size} to {checkpoint.tree_size} events is needed"
        )
    if (proof.old_size, proof.old_root) != (old_size, old_root):
        raise WitnessRefused(
            f"the proof starts from the tree of {proof.old_size} with root "
            f"{proof.old_root.hex()}, not the cosigned {old_size} with root {old_root.hex()}"
        )
    if (proof.new_size, proof.new_root) != (checkpoint.tree_size, checkpoint.root):
        raise WitnessRefused(
            f"the proof leads to the tree of {proof.new_size}, not the checkpoint's "
            f"{checkpoint.tree_size} with its root"
        )
    if not verify_consistency(
        old_size, checkpoint.tree_size, old_root, checkpoint.root, proof.proof
    ):
        raise WitnessRefused(
            f"the checkpoint's tree of {checkpoint.tree_size} does not extend the cosigned "
            f"{old_size}: the consistency proof fails (history rewritten, or the proof altered)"
        )
