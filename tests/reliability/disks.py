"""Real storage faults for the local kit: a full filesystem and a read-only chunk folder.

Where the test process may mount (root), :func:`disk` mounts a small tmpfs, so that the faults are
the kernel's own: ``ENOSPC`` once the filler file took the last page, ``EROFS`` from a read-only
bind mount of the chunk folder. Elsewhere it falls back to injecting those errors where the file
chunk log writes (every segment, fence and tail file goes through ``FileChunkLog._write_temp``),
and says so in :attr:`Disk.mode`.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from durable_harness.storage.files import FileChunkLog


def _run(*command: str) -> bool:
    try:
        return subprocess.run(command, capture_output=True, check=False, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):  # no mount(8) here, say
        return False


class Disk:
    """A data disk whose writes can be broken (``fill``, ``read_only``) and repaired (``repair``)."""

    def __init__(self, root: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.mode = mode
        """``"tmpfs"`` (real faults) or ``"injected"`` (errors raised by a patched chunk log)."""
        self._monkeypatch = monkeypatch
        self._filler = root / "filler"
        self._read_only: Path | None = None
        self._injected: int | None = None

    def fill(self) -> None:
        """Take every free block of the filesystem."""
        if self.mode == "injected":
            self._inject(errno.ENOSPC)
            return
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)  # tmpfs allocates whole pages: this leaves no free one
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)

    def read_only(self, folder: Path) -> None:
        """Make ``folder`` (and everything under it) read-only."""
        if self.mode == "injected":
            self._inject(errno.EROFS)
            return
        assert _run("mount", "--bind", str(folder), str(folder)), "bind mount failed"
        self._read_only = folder
        assert _run("mount", "-o", "remount,bind,ro", str(folder)), "read-only remount failed"

    def repair(self) -> None:
        """Undo the fault: free the space, or make the folder writable again."""
        self._injected = None
        with suppress(FileNotFoundError):
            self._filler.unlink()
        if self._read_only is not None:
            assert _run("umount", "-l", str(self._read_only)), "umount failed"
            self._read_only = None

    def _inject(self, code: int) -> None:
        self._injected = code
        original = FileChunkLog._write_temp

        def write_temp(log: FileChunkLog, path: Path, data: bytes) -> Any:
            if self._injected is not None:
                raise OSError(self._injected, os.strerror(self._injected), str(path))
            return original(log, path, data)

        self._monkeypatch.setattr(FileChunkLog, "_write_temp", write_temp)


@contextmanager
def disk(root: Path, monkeypatch: pytest.MonkeyPatch, size: str = "4m") -> Iterator[Disk]:
    """A ``size`` tmpfs mounted at ``root`` when this process may mount one, else a plain folder
    with injected faults."""
    root.mkdir(parents=True, exist_ok=True)
    mounted = os.geteuid() == 0 and _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(root))
    target = Disk(root, "tmpfs" if mounted else "injected", monkeypatch)
    try:
        yield target
    finally:
        target.repair()
        if mounted:
            _run("umount", "-l", str(root))
