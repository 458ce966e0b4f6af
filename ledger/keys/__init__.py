"""Keys: the KEK outside the database, data keys inside it (wrapped), and Signoff's ciphertexts."""

from .kek import Kek, LocalKek, create_kek_file, embedded_kek
from .ring import KeyInfo, KeyRing, KeyState, Purpose
from .sealing import key_id_of

__all__ = [
    "Kek",
    "KeyInfo",
    "KeyRing",
    "KeyState",
    "LocalKek",
    "Purpose",
    "create_kek_file",
    "embedded_kek",
    "key_id_of",
]
