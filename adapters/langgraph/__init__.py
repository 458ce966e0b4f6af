"""LangGraph adapter: the create_agent middleware, a tool node and `Send` tool tasks for custom
graphs, `one_use` for your own nodes, and encrypted checkpoints, all on one Signoff store."""

# ruff: noqa: E402  (the extra is checked before anything imports LangGraph)

from adapters.extras import LANGGRAPH, require_extra

require_extra("adapters.langgraph", "langgraph", LANGGRAPH)

from ._envelope import CheckpointSealer
from .checkpointer import EncryptedPostgresSaver, encrypted_checkpointer
from .errors import (
    InvalidResume,
    InvalidSend,
    OutsideOneUse,
    PlaintextCheckpoint,
    ToolOutsideStep,
    UnsupportedCheckpoint,
)
from .middleware import SignoffMiddleware
from .one_use import ask, ask_sync, one_use, step, step_sync
from .reencrypt import KeyUsage, ReencryptReport, TableCounts, key_usage, reencrypt_checkpoints
from .tasks import SignoffToolTask, fan_out, tool_task
from .tool_node import SignoffToolNode, signoff_tool_node
from .tools import SignoffTools, ToolSpec, effect_of, get_idempotency_key, resume_config

__all__ = [
    "CheckpointSealer",
    "EncryptedPostgresSaver",
    "InvalidResume",
    "InvalidSend",
    "KeyUsage",
    "OutsideOneUse",
    "PlaintextCheckpoint",
    "ReencryptReport",
    "SignoffMiddleware",
    "SignoffToolNode",
    "SignoffToolTask",
    "SignoffTools",
    "TableCounts",
    "ToolOutsideStep",
    "ToolSpec",
    "UnsupportedCheckpoint",
    "ask",
    "ask_sync",
    "effect_of",
    "encrypted_checkpointer",
    "fan_out",
    "get_idempotency_key",
    "key_usage",
    "one_use",
    "reencrypt_checkpoints",
    "resume_config",
    "signoff_tool_node",
    "step",
    "step_sync",
    "tool_task",
]
