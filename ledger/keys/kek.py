"""The key-encryption key (KEK): it wraps the data keys and never enters the database.

`Kek` is the small interface a KMS can implement later: an id, `wrap` and `unwrap`. `LocalKek`
holds 32 bytes from `SIGNOFF_KEK` (base64) or the file named by `SIGNOFF_KEK_FILE` (base64 text),
as `ledger.store.settings` reads them.
Its id is derived from the key, so an error can name the KEK a database needs without storing it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path
from typing import Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import ConfigurationError
from ..log import get_logger

__all__ = ["Kek", "LocalKek", "create_kek_file", "embedded_kek", "new_kek_text"]

log = get_logger(__name__)
_NONCE = 12
_MAKE_ONE = "`signoff keys new-kek --out FILE` makes one"


class Kek(Protocol):
    """What the key ring needs from a key-encryption key."""

    @property
    def kek_id(self) -> str: ...

    def wrap(self, plaintext: bytes, associated_data: bytes) -> bytes: ...

    def unwrap(self, wrapped: bytes, associated_data: bytes) -> bytes:
        """Raises `cryptography.exceptions.InvalidTag` when `wrapped` is not ours."""
        ...


class LocalKek:
    """A KEK held in this process's memory (AES-256-GCM, random 96-bit nonces)."""

    def __init__(self, key: bytes, *, source: str | None = None) -> None:
        if len(key) != 32:
            raise ConfigurationError(f"a KEK is 32 bytes, not {len(key)}")
        self._aead = AESGCM(key)
        self.kek_id = "kek-" + hashlib.sha256(b"signoff.kek.id.v1" + key).hexdigest()[:16]
        # Where it came from ("SIGNOFF_KEK", "SIGNOFF_KEK_FILE=/path"), for error messages.
        self.source = source

    def wrap(self, plaintext: bytes, associated_data: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, plaintext, associated_data)

    def unwrap(self, wrapped: bytes, associated_data: bytes) -> bytes:
        return self._aead.decrypt(wrapped[:_NONCE], wrapped[_NONCE:], associated_data)

    @classmethod
    def from_base64(cls, text: str, source: str) -> LocalKek:
        """The KEK in `text`; `source` names where it came from in errors (a variable, a file).

        Raises:
            ConfigurationError: not base64 of 32 bytes; the message names `source` and the
                command that makes a KEK.
        """
        try:
            key = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError) as e:
            raise ConfigurationError(
                f"{source} is not base64 of 32 bytes ({e}): {_MAKE_ONE}"
            ) from e
        if len(key) != 32:
            raise ConfigurationError(
                f"{source} holds {len(key)} bytes, a KEK is base64 of 32 bytes: {_MAKE_ONE}"
            )
        return cls(key, source=source)

    @classmethod
    def from_file(cls, path: Path, *, variable: str | None = None) -> LocalKek:
        """The KEK in the file `path`; `variable` is the setting that named the file."""
        source = f"{variable}={path}" if variable else f"KEK file {path}"
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) else "not text"
            raise ConfigurationError(
                f"cannot read the KEK file {source}: {reason}: {_MAKE_ONE}"
            ) from e
        return cls.from_base64(text, source)


def embedded_kek(path: Path) -> LocalKek:
    """The embedded server's KEK in `path`, created on first use and readable only by its owner."""
    if not path.exists():
        create_kek_file(path)
        log.warning(
            "created a local key-encryption key; back it up, without it nothing encrypted can "
            "be read",
            path=str(path),
        )
    kek = LocalKek.from_file(path)
    kek.source = f"the embedded server's KEK file {path}"
    return kek


def new_kek_text() -> str:
    """32 random bytes, base64: a new KEK as `SIGNOFF_KEK` and KEK files hold it."""
    return base64.b64encode(os.urandom(32)).decode()


def create_kek_file(path: Path) -> None:
    """Write a new random KEK (base64) to `path`, mode 0600; refuses to overwrite."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as e:
        raise ConfigurationError(f"{path} exists already; not overwriting a KEK") from e
    with os.fdopen(fd, "w") as file:
        file.write(new_kek_text() + "\n")
