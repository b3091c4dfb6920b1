"""The on-disk backlog: snapshots the server could not take yet, kept until it answers again.

A spool is a directory of JSONL files, one snapshot per line as it is sent. Each file is written
under a hidden temporary name and renamed into place, so a reader never sees half a file; its
name starts with the enqueue time of its first snapshot, so sorting names gives the order in
which snapshots were recorded, across processes. A file is sent while holding an exclusive
`flock` on it and removed after delivery; two processes sharing the directory therefore never
send the same file at once, and the kernel releases the lock of a process that dies (kill -9), so
the next Client picks the file up. Where `flock` is not available (Windows) a file may be sent
twice: harmless, the server deduplicates by snapshot_id.

The directory is bounded in bytes: before a write would exceed the bound, the oldest files are
dropped and their snapshots counted.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("ctxobs.spool")

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
SUFFIX = ".jsonl"
# A writer renames its temporary file within milliseconds; one this old belongs to a process
# that died while writing, and its complete lines are worth keeping.
_ORPHAN_AGE_S = 300.0
_OFF = {"0", "false", "no", "off"}


def spool_key(endpoint: str, api_key: str) -> str:
    """Directory name for ENDPOINT and API_KEY: spooled snapshots are only ever sent with the
    key they were recorded for, so two projects on one server never share a directory."""
    digest = hashlib.sha256(f"{endpoint.rstrip('/')}\0{api_key}".encode()).hexdigest()
    return digest[:16]


def default_spool_dir(endpoint: str, api_key: str) -> Path:
    """`$XDG_CACHE_HOME/ctxobs/spool/<hash>` (or `~/.cache/...`) for ENDPOINT and API_KEY."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    return root / "ctxobs" / "spool" / spool_key(endpoint, api_key)


def resolve_spool_dir(
    spool: bool | str | os.PathLike[str] | None, endpoint: str, api_key: str
) -> Path | None:
    """The spool directory a Client uses: SPOOL if a path, none if False; by default
    `CTXOBS_SPOOL` (a directory, or 0/off to disable), else `default_spool_dir()`."""
    if spool is False:
        return None
    if spool is None or spool is True:
        env = os.environ.get("CTXOBS_SPOOL", "").strip()
        if env.lower() in _OFF:
            return None
        if env:
            return Path(env).expanduser()
        return default_spool_dir(endpoint, api_key)
    return Path(spool).expanduser()


def _count_in_name(name: str) -> int:
    # <ts_ns>-<pid>.<tag>-<seq>-<count>.jsonl
    try:
        return int(name[: -len(SUFFIX)].rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


@dataclass
class SpoolFile:
    """A spool file claimed for sending: locked until `finish()`."""

    path: Path
    lines: list[bytes]
    _fd: int

    def finish(self, remaining: list[bytes]) -> None:
        """Release the file: removed if nothing REMAINING, else rewritten with only those lines."""
        try:
            if not remaining:
                self.path.unlink(missing_ok=True)
            elif len(remaining) != len(self.lines):
                # Same time prefix, so the remainder keeps its place in the order; the count in
                # the name follows. A crash between the two steps leaves a resend, not a loss.
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                _write_private(tmp, b"".join(line + b"\n" for line in remaining))
                os.replace(tmp, self.path.with_name(_renamed(self.path.name, len(remaining))))
                if _renamed(self.path.name, len(remaining)) != self.path.name:
                    self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _renamed(name: str, count: int) -> str:
    stem = name[: -len(SUFFIX)]
    head = stem.rsplit("-", 1)[0] if stem.count("-") >= 3 else stem
    return f"{head}-{count}{SUFFIX}"


class Spool:
    """One spool directory. Thread-safe; safe to share between processes."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        on_drop: Callable[[int, int], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max(1, int(max_bytes))
        self.on_drop = on_drop  # (snapshots, files) dropped to stay under max_bytes
        self._lock = threading.Lock()
        self._seq = itertools.count()

    # --- writing -------------------------------------------------------------------------

    def append(self, lines: list[bytes], first_ts_ns: int | None = None) -> bool:
        """Write LINES (encoded snapshots, no newline) as one new file; False if it failed.

        FIRST_TS_NS (when the first of them was recorded) orders the file among the others.
        """
        if not lines:
            return True
        data = b"".join(line + b"\n" for line in lines)
        ts = first_ts_ns if first_ts_ns is not None else time.time_ns()
        # pid and a random tag: containers sharing a volume may all be pid 1.
        name = f"{ts:020d}-{os.getpid()}.{secrets.token_hex(3)}-{next(self._seq):06d}-{len(lines)}{SUFFIX}"
        tmp = self.directory / f".{name}.tmp"
        try:
            with self._lock:
                # Prompts and replies: readable by the user only.
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                if not self._make_room(len(data)):
                    self._dropped(len(lines), 0)
                    return True
                _write_private(tmp, data)
                os.replace(tmp, self.directory / name)
        except OSError as exc:
            log.warning("ctxobs.spool.write_failed error=%s", type(exc).__name__)
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return False
        return True

    def _make_room(self, incoming: int) -> bool:
        """Drop the oldest unlocked files until INCOMING bytes fit; False if they never can."""
        if incoming > self.max_bytes:
            log.warning("ctxobs.spool.too_large bytes=%d max_bytes=%d", incoming, self.max_bytes)
            return False
        entries = []
        total = 0
        for path in self._all_files():
            try:
                size = path.stat().st_size
            except OSError:
                continue
            entries.append((path, size))
            total += size
        if total + incoming <= self.max_bytes:
            return True
        dropped_items = dropped_files = 0
        for path, size in entries:
            if total + incoming <= self.max_bytes:
                break
            claim = self._try_lock(path)
            if claim is None:
                continue  # being sent right now: it leaves by itself
            try:
                path.unlink(missing_ok=True)
            finally:
                os.close(claim)
            total -= size
            dropped_items += _count_in_name(path.name)
            dropped_files += 1
        if dropped_files:
            self._dropped(dropped_items, dropped_files)
        return total + incoming <= self.max_bytes

    def _dropped(self, items: int, files: int) -> None:
        log.warning(
            "ctxobs.spool.dropped items=%d files=%d max_bytes=%d dir=%s",
            items,
            files,
            self.max_bytes,
            self.directory,
        )
        if self.on_drop is not None:
            self.on_drop(items, files)

    # --- reading -------------------------------------------------------------------------

    def _all_files(self) -> list[Path]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return [self.directory / n for n in sorted(names) if n.endswith(SUFFIX) and not n.startswith(".")]

    def files(self) -> list[Path]:
        """The spool's files, oldest first (orphaned partial writes are recovered first)."""
        self._recover_orphans()
        return self._all_files()

    def pending(self) -> int:
        """Snapshots waiting in the spool (from the file names; no file is read)."""
        return sum(_count_in_name(p.name) for p in self._all_files())

    def _recover_orphans(self) -> None:
        try:
            names = [n for n in os.listdir(self.directory) if n.startswith(".") and n.endswith(".tmp")]
        except OSError:
            return
        now = time.time()
        for n in names:
            path = self.directory / n
            try:
                if now - path.stat().st_mtime < _ORPHAN_AGE_S:
                    continue
                # .<name>.jsonl.tmp or .<name>.jsonl.<pid>.tmp -> <name>.jsonl; an unreadable last
                # line is skipped when sent.
                final = n[1:].split(SUFFIX, 1)[0] + SUFFIX
                os.replace(path, self.directory / final)
                log.info("ctxobs.spool.recovered file=%s", final)
            except OSError:
                continue

    def claim_oldest(self) -> SpoolFile | None:
        """Lock and read the oldest file no other sender holds; None when there is none."""
        for path in self.files():
            fd = self._try_lock(path)
            if fd is None:
                continue
            try:
                with os.fdopen(os.dup(fd), "rb") as fh:
                    data = fh.read()
            except OSError:
                os.close(fd)
                continue
            lines = [line.strip() for line in data.split(b"\n")]
            return SpoolFile(path, [line for line in lines if line], fd)
        return None

    @staticmethod
    def _try_lock(path: Path) -> int | None:
        """An fd holding an exclusive lock on PATH, or None if another sender has it or it is gone."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        if fcntl is None:
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The holder may have removed or rewritten the file before letting go of it.
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                raise OSError("replaced")
        except OSError:
            os.close(fd)
            return None
        return fd

    def reset_after_fork(self) -> None:
        # The parent's writer thread may have held the lock at fork time.
        self._lock = threading.Lock()
