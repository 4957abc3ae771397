"""The data directory and the SQLite files are private to the aggregator's user.

The data directory holds the private keys and the raw reports; docs/operations.md
promises mode 0700 for it and 0600 for the database. Under the usual umask
022 plain ``mkdir`` and SQLite would make them 0755 and 0644, so here:

* :func:`prepare_data_dir` creates a missing data directory with mode 0700
  and refuses (``ParameterError``, field ``data_dir``, naming the path) one
  that group or others may use, unless the operator allows it
  (``allow_shared_data_dir``, ``onesided serve --allow-shared-data-dir``);
* :func:`secure_sqlite_files` creates the database file with mode 0600
  before SQLite opens it (SQLite gives its ``-wal`` and ``-shm`` files the
  database file's mode) and brings existing ``db``, ``-wal`` and ``-shm``
  files back to 0600.

Both ignore the umask: modes are set with ``chmod``, not requested from it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from protocol.errors import ParameterError

DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def shared_bits(path: Path) -> int:
    """The group and other permission bits of ``path`` (0: private)."""
    return stat.S_IMODE(path.stat().st_mode) & 0o077


def prepare_data_dir(path: str | os.PathLike[str], *, allow_shared: bool = False) -> Path:
    """Create ``path`` with mode 0700 if missing; refuse it if group or others may use it.

    Raises:
        ParameterError: field ``data_dir``: the folder is shared and ``allow_shared`` is false.
    """
    folder = Path(path)
    if not folder.exists():
        folder.mkdir(mode=DIR_MODE, parents=True)
        folder.chmod(DIR_MODE)
        return folder
    if shared_bits(folder) and not allow_shared:
        mode = stat.S_IMODE(folder.stat().st_mode)
        raise ParameterError(
            "data_dir",
            f"{folder.absolute()} is open to group or others (mode {mode:04o}) but holds private keys "
            f"and raw reports: run `chmod 700 {folder.absolute()}`, or start with --allow-shared-data-dir "
            "(setting allow_shared_data_dir) if another layer protects it",
        )
    return folder


def secure_sqlite_files(database: str | os.PathLike[str]) -> None:
    """Make the SQLite database (created empty if missing) and its companions mode 0600."""
    db = Path(database)
    if not db.exists():
        os.close(os.open(db, os.O_CREAT | os.O_WRONLY, FILE_MODE))
    for suffix in SQLITE_SUFFIXES:
        companion = db.with_name(db.name + suffix)
        if companion.exists() and stat.S_IMODE(companion.stat().st_mode) != FILE_MODE:
            companion.chmod(FILE_MODE)
