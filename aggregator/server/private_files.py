"""The data directory and the SQLite files are private to the aggregator's user.

The data directory holds the private keys and the raw reports; docs/operations.md
promises mode 0700 for it and 0600 for the database. Under the usual umask
022 plain ``mkdir`` and SQLite would make them 0755 and 0644, so here:

* :func:`prepare_data_dir` creates a missing data directory with mode 0700.
  An existing one that group or others may use is brought back to 0700
  (with a warning) when it is plainly the aggregator's own: owned by this
  user and holding nothing but ``keys/`` and the database files (e.g. made
  by an earlier version, or by ``mkdir`` under umask 022). Any other shared
  folder is refused (``ParameterError``, field ``data_dir``, naming the path
  and its mode) unless the operator allows it (``allow_shared_data_dir``,
  ``onesided serve --allow-shared-data-dir``);
* :func:`secure_sqlite_files` creates the database file with mode 0600
  before SQLite opens it (SQLite gives its ``-wal`` and ``-shm`` files the
  database file's mode) and brings existing ``db``, ``-wal`` and ``-shm``
  files back to 0600.

Both ignore the umask: modes are set with ``chmod``, not requested from it.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from aggregator.server.settings import DB_FILE, KEY_DIR
from protocol.errors import ParameterError

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def shared_bits(path: Path) -> int:
    """The group and other permission bits of ``path`` (0: private)."""
    return stat.S_IMODE(path.stat().st_mode) & 0o077


def is_own_data_dir(folder: Path) -> bool:
    """Owned by this user and holding only what the aggregator puts there."""
    own = {KEY_DIR} | {DB_FILE + suffix for suffix in SQLITE_SUFFIXES}
    return folder.stat().st_uid == os.getuid() and all(entry.name in own for entry in folder.iterdir())


def prepare_data_dir(path: str | os.PathLike[str], *, allow_shared: bool = False) -> Path:
    """Create ``path`` with mode 0700 if missing; make our own folder private again; refuse a shared one.

    Raises:
        ParameterError: field ``data_dir``: the folder is shared, not plainly
            the aggregator's own, and ``allow_shared`` is false.
    """
    folder = Path(path)
    if not folder.exists():
        folder.mkdir(mode=DIR_MODE, parents=True)
        folder.chmod(DIR_MODE)
        return folder
    if not shared_bits(folder) or allow_shared:
        return folder
    if is_own_data_dir(folder):
        log.warning("data directory %s was open to group or others; made it mode 0700", folder.absolute())
        folder.chmod(DIR_MODE)
        return folder
    mode = stat.S_IMODE(folder.stat().st_mode)
    raise ParameterError(
        "data_dir",
        f"{folder.absolute()} is open to group or others (mode {mode:04o}) and holds files that are not the "
        "aggregator's; it would keep private keys and raw reports: use a folder of its own, or run "
        f"`chmod 700 {folder.absolute()}`, or start with --allow-shared-data-dir (setting "
        "allow_shared_data_dir) if another layer protects it",
    )


def secure_sqlite_files(database: str | os.PathLike[str]) -> None:
    """Make the SQLite database (created empty if missing) and its companions mode 0600."""
    db = Path(database)
    if not db.exists():
        os.close(os.open(db, os.O_CREAT | os.O_WRONLY, FILE_MODE))
    for suffix in SQLITE_SUFFIXES:
        companion = db.with_name(db.name + suffix)
        if companion.exists() and stat.S_IMODE(companion.stat().st_mode) != FILE_MODE:
            companion.chmod(FILE_MODE)
