"""What the offline verifier finds wrong: one base, `Invalid`, and one subclass per failure,
each carrying its fields (the ids, sizes and hashes that disagree). Standard library only."""

from __future__ import annotations

__all__ = [
    "AuditPathMismatch",
    "CheckpointMismatch",
    "DigestInvalid",
    "EventAltered",
    "HistoryRewritten",
    "Invalid",
    "MalformedDocument",
    "NotConsistent",
    "ProofMismatch",
    "RootMismatch",
    "SignatureInvalid",
    "TileAltered",
    "TileUnreadable",
    "TooFewWitnesses",
    "UnknownSigningKey",
]


class Invalid(Exception):
    """A digest or proof does not verify; the message says what failed."""


class MalformedDocument(Invalid, ValueError):
    """A document is not of the expected shape (missing field, bad hex, wrong kind)."""


class UnknownSigningKey(Invalid):
    """The digest names a key that is not among the public keys."""

    def __init__(self, key_id: str, known: tuple[str, ...]) -> None:
        super().__init__(
            f"the digest is signed by key {key_id}, which is not among the "
            f"public keys ({', '.join(known) or 'none'})"
        )
        self.key_id = key_id
        self.known = known


class SignatureInvalid(Invalid):
    """A signature does not verify under the key it names: the document was altered, or another
    key signed it. `signed` says what: the digest, or its checkpoint under `origin`."""

    def __init__(self, key_id: str, signed: str, origin: str | None = None) -> None:
        if origin is None:
            message = (
                f"the digest's signature does not verify under key {key_id}: the digest "
                "was altered or not signed by that key"
            )
        else:
            message = (
                f"the checkpoint carries no valid signature of key {key_id} under the "
                f"name {origin!r}: it was altered or not signed by that key"
            )
        super().__init__(message)
        self.key_id = key_id
        self.signed = signed
        self.origin = origin


class CheckpointMismatch(Invalid):
    """The digest's checkpoint names another tree than the digest."""

    def __init__(self, checkpoint: tuple[int, bytes], digest: tuple[int, bytes]) -> None:
        super().__init__(
            f"the checkpoint is of {checkpoint[0]} events with root {checkpoint[1].hex()}, "
            f"the digest of {digest[0]} with root {digest[1].hex()}"
        )
        self.checkpoint = checkpoint
        self.digest = digest


class TooFewWitnesses(Invalid):
    """Fewer trusted witnesses cosigned the checkpoint than required."""

    def __init__(self, valid: tuple[str, ...], required: int) -> None:
        super().__init__(
            f"{len(valid)} valid witness cosignature(s) of {required} required "
            f"(valid: {', '.join(valid) or 'none'})"
        )
        self.valid = valid
        self.required = required


class ProofMismatch(Invalid):
    """A proof is for another tree than the digest it is checked against."""

    def __init__(self, message: str, proof: tuple[int, bytes], digest: tuple[int, bytes]) -> None:
        super().__init__(message)
        self.proof = proof
        self.digest = digest


class EventAltered(Invalid):
    """An exported event's fields do not hash to its recorded hash."""

    def __init__(
        self, position: int, stream_id: str, version: int, recorded: bytes, recomputed: bytes
    ) -> None:
        super().__init__(
            f"event at position {position} (stream {stream_id!r} version {version}): its "
            f"fields hash to {recomputed.hex()}, not to its recorded hash {recorded.hex()}: "
            "the event was altered"
        )
        self.position = position
        self.stream_id = stream_id
        self.version = version
        self.recorded = recorded
        self.recomputed = recomputed


class AuditPathMismatch(Invalid):
    """An audit path does not lead from a leaf to the root (or is not the tiles' path)."""

    def __init__(self, leaf_index: int, message: str) -> None:
        super().__init__(message)
        self.leaf_index = leaf_index


class DigestInvalid(Invalid):
    """One digest of a pair (`which`: old or new) does not verify; `cause` says why."""

    def __init__(self, which: str, cause: Invalid) -> None:
        super().__init__(f"{which} digest: {cause}")
        self.which = which
        self.cause = cause


class NotConsistent(Invalid):
    """The older digest covers more events than the newer one."""

    def __init__(self, old_size: int, new_size: int, message: str) -> None:
        super().__init__(message)
        self.old_size = old_size
        self.new_size = new_size


class HistoryRewritten(Invalid):
    """The newer tree does not extend the older one."""

    def __init__(self, old_size: int, new_size: int, message: str) -> None:
        super().__init__(message)
        self.old_size = old_size
        self.new_size = new_size


class RootMismatch(Invalid):
    """Hashes recompute to another root than the one expected."""

    def __init__(self, expected: bytes, calculated: bytes, message: str) -> None:
        super().__init__(message)
        self.expected = expected
        self.calculated = calculated


class TileUnreadable(Invalid):
    """A tile the tree needs is missing, unreadable or not of its width."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class TileAltered(Invalid):
    """A full tile's root is not its entry one level up."""

    def __init__(self, path: str, above: str, entry: int) -> None:
        super().__init__(
            f"tile {path}: its root is not entry {entry} of tile {above}: the tiles were altered"
        )
        self.path = path
        self.above = above
        self.entry = entry
