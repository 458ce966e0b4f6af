"""Approval records, decisions, signed resume tokens and policies, built on the ledger's journal."""

__all__: list[str] = []
