"""Signoff's core, one sub-package per concern.

- `ledger.store`: database access (`Database`), URL resolution, the embedded server, LISTEN/NOTIFY
  and migrations;
- `ledger.journal.journal`: the append-only event journal and its hash chains;
- `ledger.keys`: the KEK, the wrapped data keys and Signoff's ciphertexts;
- `ledger.calls`: the once-per-run tool-call ledger;
- `ledger.audit`: audit queries, export, Merkle trees, signed digests, proofs and the offline
  verifier.

Shared by all of them: `ledger.errors` (every typed error, re-exported here), `ledger.canonical`
(the canonical form that is hashed), `ledger.limits` (input rules) and `ledger.log`. This module
imports only `ledger.errors`, which is pure, so the offline verifier (`python -m
ledger.audit.verifier`) loads neither a database driver nor structlog.
"""

from __future__ import annotations

from . import errors
from .errors import *  # noqa: F403  (every typed error, so `from ledger import UnknownCall` works)

__all__ = ["__version__"]
__all__ += errors.__all__

__version__ = "0.1.0"
