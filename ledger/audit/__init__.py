"""Audit: who ran what (`queries`), the JSON-lines export (`export`), RFC 6962 Merkle trees
(`merkle`), signed digests and proofs taken from the database (`digest`), the offline
verifier (`verifier`, `python -m ledger.audit.verifier`), C2SP checkpoints and cosignatures
(`checkpoint`, signed by the log in `signing`) and the witness that cosigns them (`witness`).

This package imports nothing itself: `merkle` and `verifier` need only the standard library and
`cryptography`, so an auditor runs the verifier without a database driver installed. Import the
modules directly (`from ledger.audit.digest import take_digest`).
"""

__all__: list[str] = []
