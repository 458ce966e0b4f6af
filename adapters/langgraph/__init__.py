"""LangGraph adapter: encrypted checkpoints (and, later, middleware, tool node, approval port)."""

from ._envelope import CheckpointSealer
from .checkpointer import EncryptedPostgresSaver, encrypted_checkpointer
from .errors import PlaintextCheckpoint, UnsupportedCheckpoint
from .reencrypt import KeyUsage, ReencryptReport, TableCounts, key_usage, reencrypt_checkpoints

__all__ = [
    "CheckpointSealer",
    "EncryptedPostgresSaver",
    "KeyUsage",
    "PlaintextCheckpoint",
    "ReencryptReport",
    "TableCounts",
    "UnsupportedCheckpoint",
    "encrypted_checkpointer",
    "key_usage",
    "reencrypt_checkpoints",
]
