"""Check Signoff's signed digests and proofs with nothing but the public keys: no database.

One module per job: `documents` (the formats and their parsing, specified in
`docs/pages/audit/formats.md`), `checks` (what is verified), `failures` (what can be wrong,
each with its fields, all `Invalid`), and the command line `cli` (`python -m
ledger.audit.verifier`).

An auditor needs to trust only this package, `ledger/canonical.py`, `ledger/audit/merkle.py`,
`ledger/audit/checkpoint.py` and `ledger/audit/tiles.py`: the standard library and
`cryptography` otherwise.
"""

from .checks import (
    check_consistency,
    check_digest,
    check_inclusion,
    check_tiles,
    check_witnesses,
    consistency_from_tiles,
    digest_checkpoint,
    inclusion_from_tiles,
    read_tile_directory,
)
from .cli import main
from .documents import (
    DIGEST_TAG,
    ConsistencyProof,
    Digest,
    ExportedEvent,
    InclusionProof,
    digest_message,
    load_public_keys,
)
from .failures import (
    AuditPathMismatch,
    CheckpointMismatch,
    DigestInvalid,
    EventAltered,
    HistoryRewritten,
    Invalid,
    MalformedDocument,
    NotConsistent,
    ProofMismatch,
    RootMismatch,
    SignatureInvalid,
    TileAltered,
    TileUnreadable,
    TooFewWitnesses,
    UnknownSigningKey,
)

__all__ = [
    "DIGEST_TAG",
    "AuditPathMismatch",
    "CheckpointMismatch",
    "ConsistencyProof",
    "Digest",
    "DigestInvalid",
    "EventAltered",
    "ExportedEvent",
    "HistoryRewritten",
    "InclusionProof",
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
    "check_consistency",
    "check_digest",
    "check_inclusion",
    "check_tiles",
    "check_witnesses",
    "consistency_from_tiles",
    "digest_checkpoint",
    "digest_message",
    "inclusion_from_tiles",
    "load_public_keys",
    "main",
    "read_tile_directory",
]
