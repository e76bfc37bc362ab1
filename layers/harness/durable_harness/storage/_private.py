"""Local data is private to its owner: folders are created 0700, files 0600.

Run records and chunk logs hold whole conversations (and the data folder the local approval
secret), so nothing the local kit creates is readable by other users of the machine. Folders and
files that already exist keep their mode: the kit never changes what it did not create.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dirs(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and any missing parents with mode 0700 (``mkdir -p`` applies the mode to the
    last folder only); returns the path. Existing folders are left as they are."""
    target = Path(path)
    missing: list[Path] = []
    current = target
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        with suppress(FileExistsError):  # created meanwhile by another thread or process
            folder.mkdir(mode=DIR_MODE)
    if not target.is_dir():
        raise NotADirectoryError(f"{target} is not a folder")
    return target


def touch_private(path: str | os.PathLike[str]) -> None:
    """Create an empty file with mode 0600 unless it exists (an existing file is not changed)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE))
