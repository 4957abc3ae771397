"""One state file, one client: an exclusive, advisory lock on ``<state_path>.lock``.

Two clients on one state would each read the same ledger and each spend
the whole ceiling (and overwrite each other's writes), so a
:class:`~client_sdk.Client` holds this lock from construction to
:meth:`~client_sdk.Client.close`. A second opener (another process, a CLI
next to the app, or a second ``Client`` in the same process) gets
:class:`StateLocked` naming the path and the holder's process id.

The lock is the operating system's: ``fcntl.flock`` on POSIX, a one-byte
``msvcrt.locking`` range on Windows. Both are released by the kernel when
the holder exits or dies, so a crash never leaves a stale lock behind (the
file itself stays, with the last holder's pid in it, and is reused). The
pid is informational: it is read only to name the holder in the error.
"""

from __future__ import annotations

import os
import sys
import weakref
from pathlib import Path
from typing import Any

from protocol.errors import OnesidedError

# Windows locks are mandatory: the byte locked sits far past the pid, so the pid stays readable.
_WINDOWS_LOCK_OFFSET = 1 << 20


class StateLocked(OnesidedError):
    """Another client holds this state file (``.path``; ``.pid``: its process id, when known)."""

    code = "state_locked"

    def __init__(self, path: Path, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        same = " (this process: close the other Client first)" if pid == os.getpid() else ""
        super().__init__(
            f"{path} is in use by {holder}{same}: one state file serves one client at a time; "
            "give each app instance its own state_path, or close the other client"
        )
        self.path = path
        self.pid = pid


def _try_lock(fd: int) -> bool:
    """Take the exclusive lock without waiting; ``False`` if another open file holds it."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(fd: int) -> None:
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


def _holder(fd: int) -> int | None:
    """The pid the holder wrote, if it is there and parses."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 32)
        return int(text.split(b"\n", 1)[0]) if text.strip() else None
    except (OSError, ValueError):
        return None


_HELD: weakref.WeakSet[StateLock] = weakref.WeakSet()


def _abandon() -> None:
    for lock in list(_HELD):
        lock.abandon()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon)


class StateLock:
    """The exclusive lock of one state file, taken by :meth:`acquire`, given back by :meth:`release`.

    Args:
        state_path: the state file; the lock is ``<state_path>.lock`` next to it (0600).
    """

    def __init__(self, state_path: str | os.PathLike[str]) -> None:
        self.state_path = Path(state_path)
        self.path = Path(f"{self.state_path}.lock")
        self._fd: int | None = None
        self._finalizer: Any = None  # weakref.finalize closing the descriptor with the object

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock now, or raise.

        Raises:
            StateLocked: another client (any process, this one included) holds it.
            OSError: the lock file cannot be created (a read-only folder).
        """
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if not _try_lock(fd):
                raise StateLocked(self.state_path, _holder(fd))
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        # An object dropped without release() (its process "crashed" as far as it is concerned): the
        # descriptor closes with it, and the lock goes, as it would with the process.
        self._finalizer = weakref.finalize(self, os.close, fd)
        _HELD.add(self)

    def release(self) -> None:
        """Give the lock back (the file stays, for the next holder); idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        try:
            _unlock(fd)
        finally:
            os.close(fd)

    def abandon(self) -> None:
        """Close the descriptor without unlocking: what a process's end does to it.

        In a forked child this drops the child's copy and leaves the parent
        holding the lock (``flock`` locks belong to the open file, which the
        child shares: unlocking there would unlock the parent). In the
        holder, closing its only descriptor gives the lock up, as its death
        would (:func:`client_sdk.testing.simulate_crash`).
        """
        fd, self._fd = self._fd, None
        if fd is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
            os.close(fd)


__all__ = ["StateLock", "StateLocked"]
