"""Operator mistakes that would create a second aggregator: refused before anything is created.

An aggregator is its keys (clients pin the public ones) and its database
(the acknowledged reports). ``onesided serve`` therefore never invents
either silently:

* no keys (a new or mistyped data folder, ``--db sqlite:////typo/x.db``):
  refused unless told ``--init`` (or after ``onesided keys init``);
* keys that have served a SQLite file which is now missing (removed, or
  the data folder restored without it): refused unless told
  ``--new-database``, since an empty database beside the old keys would
  silently drop every acknowledged report.

The key directory remembers the SQLite files it has served (file
``sqlite-databases``, one absolute path a line): a database that was never
created there (keys from ``onesided keys init``) may still be created.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.engine import make_url

from aggregator.server.settings import Settings
from protocol.crypto import write_private_file
from protocol.errors import ParameterError

log = logging.getLogger(__name__)
SERVED_DATABASES_FILE = "sqlite-databases"


def sqlite_file(settings: Settings) -> Path | None:
    """The SQLite database's path (``None`` on PostgreSQL)."""
    if settings.dialect != "sqlite":
        return None
    return Path(make_url(settings.database_url).database or "").absolute()


def served_databases(key_path: Path) -> set[str]:
    """The SQLite files these keys have served."""
    try:
        text = (key_path / SERVED_DATABASES_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return set()
    return {line for line in text.splitlines() if line}


def check_initialised(settings: Settings, *, init: bool, new_database: bool) -> None:
    """Refuse to serve what was never initialised, or a database that vanished from beside its keys.

    Raises:
        ParameterError: field ``key_dir`` (no keys and not ``init``) or
            ``database`` (its SQLite file is missing and not ``new_database``).
    """
    database = sqlite_file(settings)
    if not settings.key_path.is_dir():
        if init and database is not None:
            return
        where = f"--data-dir {settings.data_dir}" if settings.key_dir is None else f"--key-dir {settings.key_path}"
        raise ParameterError(
            "key_dir", f"{settings.key_path} has no keys: nothing was initialised there (a typo?); run "
                       f"`onesided keys init {where}` or start with --init to create a new aggregator")
    if database is None or database.exists() or new_database:
        return
    if str(database) in served_databases(settings.key_path):
        raise ParameterError(
            "database", f"the SQLite file {database} is missing, but the keys in {settings.key_path} have served "
                        "it: its acknowledged reports would be lost; put the file back (or restore a backup), "
                        "or start an empty database with --new-database")


def record_database(settings: Settings) -> None:
    """Remember in the key directory that these keys serve this SQLite file (nothing on PostgreSQL)."""
    database = sqlite_file(settings)
    if database is None:
        return
    served = served_databases(settings.key_path)
    if str(database) not in served:
        lines = "".join(f"{path}\n" for path in sorted(served | {str(database)}))
        write_private_file(settings.key_path / SERVED_DATABASES_FILE, lines.encode("utf-8"))
