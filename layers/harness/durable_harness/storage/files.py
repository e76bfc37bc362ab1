"""The local-mode chunk log: one directory per run, one immutable segment file per append.

Layout of ``<root>/<run_id>/``::

    000000000000.jsonl   segment holding chunks 0..k-1, one compact JSON text per line
    00000000000k.jsonl   the next append's segment, named by its zero-padded start index
    fence                highest epoch that has opened or appended (absent: 0)
    tail                 a chunk count the log had reached (a hint, see below)
    lock                 flock target serializing writers across processes

Each append is one segment (D4: one write per flush, never one file per chunk). A segment is
written to a temporary file and published with ``os.link``, which fails when the name exists, so
publication is both atomic (readers never see half a segment) and exclusive (like S3
``If-None-Match: *``). Writers also hold a per-run lock (a thread lock plus ``fcntl.flock``), so
the fence check, the start check and the publish form one step even across processes.

The segment is the commit point. ``tail`` is only a hint that saves a directory scan: a reader
takes it and walks forward over any segment that starts at it, so a process that died between
publishing a segment and updating ``tail`` leaves nothing inconsistent. Being a hint, it is
rewritten only every ``_HINT_EVERY`` segments (a cold reader walks at most that many small files,
once): creating its replacement file would cost each append as much as the segment itself. A
log object that knows a run's segments (the cache below) counts from what it knows instead, and
walks forward from there (one failed ``open`` when nothing is new). ``read`` finds its first
segment by bisecting the sorted segment starts, cached per run and refreshed (one ``listdir``)
only when the count has grown past what the cache covers; appends made through this object, and
segments found by a walk, extend the cache directly.

Folders are created 0700 and files 0600 (:mod:`._private`): chunks hold whole conversations.

POSIX only (``fcntl``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import threading
import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from ..chunks.base import BaseChunkLog
from ..errors import LogConflictError, StorageError
from ..lru import LRU
from ._private import FILE_MODE, make_private_dirs

__all__ = ["FileChunkLog"]

_DIGITS = 12
_SUFFIX = ".jsonl"
_CACHE_RUNS = 1024
_HINT_EVERY = 16
# Errors from os.link that mean "this filesystem has no hard links", not "the name exists".
_NO_LINK = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


def _segment_name(start: int) -> str:
    return f"{start:0{_DIGITS}d}{_SUFFIX}"


def _segment_start(name: str) -> int | None:
    stem = name[: -len(_SUFFIX)]
    if name.endswith(_SUFFIX) and len(stem) == _DIGITS and stem.isdigit():
        return int(stem)
    return None


@dataclass
class _Index:
    """Sorted segment starts covering chunks ``[0, end)`` exactly, for one run."""

    starts: list[int] = field(default_factory=list)
    end: int = 0
    unhinted: int = 0
    """Segments this object appended since it last wrote the ``tail`` hint."""


class _RunLock:
    """A thread lock that can live in a WeakValueDictionary (plain locks cannot be weakly held)."""

    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


class FileChunkLog(BaseChunkLog):
    """A :class:`~durable_harness.ports.ChunkLog` in a directory tree on local disk.

    ``fsync=True`` makes every append durable against power loss (file and directory fsync);
    the default survives process crashes only, which suits development.
    """

    def __init__(self, root_dir: str | os.PathLike[str], *, fsync: bool = False) -> None:
        """Use (and create when missing) ``root_dir`` as the root of all runs' logs."""
        self._root = Path(root_dir)
        self._fsync = fsync
        try:
            make_private_dirs(self._root)
        except OSError as exc:
            raise StorageError(f"cannot create chunk log root {self._root}: {exc}") from exc
        self._guard = threading.Lock()
        self._run_locks: weakref.WeakValueDictionary[str, _RunLock] = weakref.WeakValueDictionary()
        self._index: LRU[str, _Index] = LRU(_CACHE_RUNS)

    @property
    def root(self) -> Path:
        """The directory holding one subdirectory per run."""
        return self._root

    def _open(self, run_id: str, epoch: int) -> int:
        run_dir = self._root / run_id
        with self._io_errors(run_id), self._locked(run_id, run_dir):
            fence = self._read_int(run_dir / "fence") or 0
            self._check_fence(run_id, epoch, fence)
            if epoch > fence:
                self._write_small(run_dir / "fence", epoch)
            return self._count(run_id)

    def _append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        # One segment. Encode before taking the lock: a chunk that is not UTF-8 fails with nothing written.
        data = "".join(chunk + "\n" for chunk in chunks).encode("utf-8")
        run_dir = self._root / run_id
        with self._io_errors(run_id), self._locked(run_id, run_dir):
            fence = self._read_int(run_dir / "fence") or 0
            self._check_fence(run_id, epoch, fence)
            count = self._count(run_id)
            self._check_start(run_id, start, count)
            if epoch > fence:
                self._write_small(run_dir / "fence", epoch)
            if not chunks:
                # An empty segment would share its name with the next real one.
                return count
            self._publish(run_dir, _segment_name(start), data)
            new_count = start + len(chunks)
            if self._note_segment(run_id, start, new_count, appended=True):
                # The segment is already committed; a failed hint update must not report failure.
                with suppress(OSError):
                    self._write_small(run_dir / "tail", new_count)
        return new_count

    def _read(self, run_id: str, start: int, limit: int | None) -> list[str]:
        run_dir = self._root / run_id
        with self._io_errors(run_id):
            total = self._count(run_id)
            if start >= total:
                return []
            want = total - start if limit is None else min(limit, total - start)
            needed = self._segments_for(run_id, run_dir, total, start, start + want)
            out: list[str] = []
            expected = needed[0]
            for seg_start in needed:
                if seg_start != expected:
                    raise StorageError(f"run {run_id!r}: chunk log has a gap at index {expected}")
                lines = self._read_segment(run_dir, seg_start)
                skip = max(start - seg_start, 0)
                out.extend(lines[skip : skip + want - len(out)])
                expected = seg_start + len(lines)
            if len(out) != want:
                raise StorageError(f"run {run_id!r}: chunk log is missing chunks before {total}")
            return out

    # --- locks, errors -----------------------------------------------------------------------------

    @contextmanager
    def _io_errors(self, run_id: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise StorageError(f"run {run_id!r}: chunk log I/O failed: {exc}") from exc

    @contextmanager
    def _locked(self, run_id: str, run_dir: Path) -> Iterator[None]:
        """Hold the run's writer lock against other threads and other processes."""
        with self._guard:
            run_lock = self._run_locks.get(run_id)
            if run_lock is None:
                run_lock = self._run_locks[run_id] = _RunLock()
        # flock alone would also exclude threads (each opens its own descriptor); the thread lock
        # first keeps waiting threads from each holding a descriptor and a blocked flock call.
        with run_lock.lock:
            make_private_dirs(run_dir)
            fd = os.open(run_dir / "lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the flock

    # --- small files -------------------------------------------------------------------------------

    @staticmethod
    def _read_int(path: Path) -> int | None:
        try:
            text = path.read_text("ascii").strip()
        except FileNotFoundError:
            return None
        try:
            return int(text)
        except ValueError:
            raise StorageError(f"corrupt chunk log file {path}: {text[:40]!r}") from None

    def _temp_path(self, run_dir: Path) -> Path:
        return run_dir / f".tmp-{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}"

    def _write_temp(self, path: Path, data: bytes) -> None:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb") as f:
            f.write(data)
            if self._fsync:
                f.flush()
                os.fsync(f.fileno())

    def _sync_dir(self, run_dir: Path) -> None:
        if self._fsync:
            fd = os.open(run_dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _write_small(self, path: Path, value: int) -> None:
        """Replace a one-number file atomically (readers see the old or the new number)."""
        tmp = self._temp_path(path.parent)
        try:
            self._write_temp(tmp, f"{value}\n".encode("ascii"))
            os.replace(tmp, path)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
        self._sync_dir(path.parent)

    # --- segments ----------------------------------------------------------------------------------

    def _publish(self, run_dir: Path, name: str, data: bytes) -> None:
        """Make a complete segment appear under ``name``, failing if the name is taken."""
        tmp = self._temp_path(run_dir)
        final = run_dir / name
        try:
            self._write_temp(tmp, data)
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise LogConflictError(f"segment {final} already exists") from None
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                # No hard links on this filesystem. We hold the run lock, so check-then-rename
                # is still exclusive among writers that follow the protocol.
                if final.exists():
                    raise LogConflictError(f"segment {final} already exists") from None
                os.rename(tmp, final)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
        self._sync_dir(run_dir)

    def _read_segment(self, run_dir: Path, start: int) -> list[str]:
        data = (run_dir / _segment_name(start)).read_bytes()
        if not data.endswith(b"\n"):
            raise StorageError(f"corrupt segment {run_dir / _segment_name(start)}")
        # split on "\n" only: str.splitlines would also split on U+2028 inside a JSON string.
        return data[:-1].decode("utf-8").split("\n")

    def _count(self, run_id: str) -> int:
        """The chunk count: what the cache knows (else the ``tail`` hint), advanced over any segment
        published after it. Segments are never removed, so what the cache knows is a floor."""
        run_dir = self._root / run_id
        with self._guard:
            index = self._index.get(run_id)
            count = index.end if index is not None else None
        with self._io_errors(run_id):
            count = count if count is not None else self._read_int(run_dir / "tail") or 0
            while True:
                try:
                    data = (run_dir / _segment_name(count)).read_bytes()
                except FileNotFoundError:
                    return count
                lines = data.count(b"\n")
                if lines == 0:
                    raise StorageError(f"corrupt empty segment {run_dir / _segment_name(count)}")
                self._note_segment(run_id, count, count + lines)
                count += lines

    def _segments_for(self, run_id: str, run_dir: Path, total: int, start: int, stop: int) -> list[int]:
        """Starts of the segments holding chunks ``[start, stop)``, all below ``total``."""
        with self._guard:
            index = self._index.get(run_id)
        if index is None or index.end < total:
            # Every segment below ``total`` existed when ``total`` was computed and segments are
            # never removed, so one listing covers [0, total) exactly.
            listed = sorted(s for s in map(_segment_start, os.listdir(run_dir)) if s is not None and s < total)
            with self._guard:
                index = self._index.get(run_id)
                if index is None or index.end < total:
                    index = self._remember(run_id, _Index(listed, total))
        with self._guard:
            first = bisect_right(index.starts, start) - 1
            last = bisect_left(index.starts, stop)
            if first < 0 or index.starts[0] != 0:
                raise StorageError(f"run {run_id!r}: chunk log has no segment at index 0")
            return index.starts[first:last]

    def _remember(self, run_id: str, index: _Index) -> _Index:
        # Caller holds self._guard: the index is read and then extended in one step.
        return self._index.put(run_id, index)

    def _note_segment(self, run_id: str, start: int, end: int, *, appended: bool = False) -> bool:
        """Extend the cached index with a segment that exists, if it is contiguous; True when this
        object ``appended`` it and should now write the ``tail`` hint (see the module)."""
        with self._guard:
            index = self._index.get(run_id)
            if index is not None and index.end == start:
                index.starts.append(start)
                index.end = end
            elif index is None and start == 0:
                index = self._remember(run_id, _Index([0], end))
            else:
                return appended  # not contiguous with what is known: keep the hint current
            if not appended:
                return False
            index.unhinted += 1
            if index.unhinted < _HINT_EVERY:
                return False
            index.unhinted = 0
            return True
