"""LangGraph adapter: the create_agent middleware, a tool node for custom graphs, and encrypted
checkpoints, all on one Signoff store."""

# ruff: noqa: E402  (the extra is checked before anything imports LangGraph)

from adapters.extras import LANGGRAPH, require_extra

require_extra("adapters.langgraph", "langgraph", LANGGRAPH)

from ._envelope import CheckpointSealer
from .checkpointer import EncryptedPostgresSaver, encrypted_checkpointer
from .errors import InvalidResume, PlaintextCheckpoint, UnsupportedCheckpoint
from .middleware import SignoffMiddleware
from .reencrypt import KeyUsage, ReencryptReport, TableCounts, key_usage, reencrypt_checkpoints
from .tool_node import SignoffToolNode, signoff_tool_node
from .tools import SignoffTools, ToolSpec, effect_of, get_idempotency_key, resume_config

__all__ = [
    "CheckpointSealer",
    "EncryptedPostgresSaver",
    "InvalidResume",
    "KeyUsage",
    "PlaintextCheckpoint",
    "ReencryptReport",
    "SignoffMiddleware",
    "SignoffToolNode",
    "SignoffTools",
    "TableCounts",
    "ToolSpec",
    "UnsupportedCheckpoint",
    "effect_of",
    "encrypted_checkpointer",
    "get_idempotency_key",
    "key_usage",
    "reencrypt_checkpoints",
    "resume_config",
    "signoff_tool_node",
]
