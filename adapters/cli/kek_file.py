"""`signoff keys new-kek`: a new KEK, as `LocalKek` and `SIGNOFF_KEK_FILE` expect it."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from ledger.errors import ConfigurationError
from ledger.keys.kek import create_kek_file

__all__ = ["shell_quoted", "write_new"]


def write_new(path: Path) -> Path:
    """A new KEK in the new file `path` (mode 0600), creating missing folders with mode 0700;
    an existing file is never overwritten. Returns the absolute path."""
    path = path.expanduser().absolute()
    missing = [p for p in reversed(path.parents) if not p.exists()]
    try:
        for folder in missing:  # one by one: mkdir(parents=True) would not apply the mode
            folder.mkdir(mode=0o700)
            os.chmod(folder, 0o700)  # whatever the umask
        create_kek_file(path)
    except OSError as e:
        raise ConfigurationError(f"cannot write the KEK file {path}: {e.strerror}") from e
    return path


def shell_quoted(path: Path) -> str:
    return shlex.quote(str(path))
