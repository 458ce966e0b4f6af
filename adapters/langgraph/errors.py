"""Errors of the LangGraph adapter."""

from __future__ import annotations

from ledger.errors import SignoffError

__all__ = [
    "InvalidResume",
    "InvalidSend",
    "OutsideOneUse",
    "PlaintextCheckpoint",
    "ToolOutsideStep",
    "UnsupportedCheckpoint",
]


class PlaintextCheckpoint(SignoffError):
    """A checkpoint row is not encrypted by Signoff (written by a plain saver, or downgraded).

    Not a `DecryptionFailed`: nothing failed to decrypt, the row was refused on purpose, and the
    remedy differs (migrate it, or find who wrote it).
    """

    def __init__(self, where: str, found: str) -> None:
        super().__init__(
            f"{where} is not encrypted ({found}); refusing it. To migrate plaintext "
            "checkpoints on purpose, run `signoff checkpoints reencrypt --include-plaintext` "
            "(or read them with allow_plaintext=True)"
        )
        self.where = where
        self.found = found


class UnsupportedCheckpoint(SignoffError):
    """A checkpoint is in a form the encrypted saver cannot read (e.g. format v<4 with sends)."""


class InvalidResume(SignoffError, ValueError):
    """A resume value is neither a decision, a signed token, nor "continue"."""


class InvalidSend(SignoffError, ValueError):
    """A `Send` argument a tool task cannot run (not a mapping, an explicit call id that is
    not text, a model's tool call of another tool or without an id), or an item `fan_out`
    cannot send (not a mapping)."""


class OutsideOneUse(SignoffError, RuntimeError):
    """A step or an approval was asked for outside a node wrapped in `one_use` (where nothing
    would keep it from running again when LangGraph re-runs the node)."""


class ToolOutsideStep(SignoffError, RuntimeError):
    """A graph whose tool calls run in Steps of their own (a Dex agent session) reached a tool
    call the ledger has no outcome for: the tool would run inside the model's Step. Nothing
    ran."""

    def __init__(self, run_id: str, call_id: str, tool: str) -> None:
        super().__init__(
            f"tool {tool!r} (call {call_id!r} of run {run_id!r}) would run inside the graph; "
            "in an agent session every call runs in its own Step first"
        )
        self.run_id = run_id
        self.call_id = call_id
        self.tool = tool
