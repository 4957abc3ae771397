"""The command line's parser: usage errors in one line with a hint, and flags named in domain errors.

argparse prints a command's whole usage (17 lines for ``metric create``)
before its error; :class:`OnesidedParser` prints only the error, the command
it belongs to, a "did you mean" for a mistyped command or action, and where
the full usage is. :func:`flag_of` turns the field a domain error names
(``num_bits``, ``server_public_keys[0]``) into the flag the user typed
(``--num-bits``, ``--server-key``).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Any, NoReturn

_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)$")

# Fields whose flag is not the field's name with dashes.
FLAG_OF_FIELD: dict[str, str] = {
    "server_public_keys": "--server-key",
    "server_public_key": "--server-key",
    "lengths": "--prefix-lengths",
    "kind": "--encoding",
    "retention_seconds": "--retention",
}


class OnesidedParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors take one line and end with a hint."""

    def error(self, message: str) -> NoReturn:
        match = _INVALID_CHOICE.search(message)
        if match is not None:
            choices = re.findall(r"'([^']*)'", match.group("choices"))
            near = difflib.get_close_matches(match.group("given"), choices, n=1, cutoff=0.6)
            guess = f"did you mean {near[0]!r}? " if near else f"one of {', '.join(choices)}; "
            message = f"{message[:match.start()]}invalid choice: {match.group('given')!r} ({guess}" \
                      f"'{self.prog} --help' lists them)"
        else:
            message = f"{message} ('{self.prog} --help' shows the options)"
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, and remembers the innermost parser that read the line (for :func:`flag_of`)."""
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, "_parser"):
            parsed._parser = self  # the innermost parser returns first; its namespace is copied outward
        return parsed, extras


def flag_of(args: argparse.Namespace, field: str) -> str | None:
    """The flag of the command that sets ``field`` (``num_bits`` -> ``--num-bits``), or None.

    None when the values came from a file (``--file``: the field is the file's own key)
    or when the command has no such flag.
    """
    parser = getattr(args, "_parser", None)
    if parser is None or getattr(args, "file", None) is not None:
        return None
    base = re.sub(r"\[\d+\]$", "", field.split(".")[-1])
    flags = {action.dest: action.option_strings[-1] for action in parser._actions if action.option_strings}
    wanted = FLAG_OF_FIELD.get(base)
    if wanted is not None and wanted in flags.values():
        return wanted
    return flags.get(base)


def print_domain_error(args: argparse.Namespace, field: str | None, detail: str) -> None:
    """``error: --flag: detail`` (or the field when no flag sets it) on stderr, in one line."""
    flag = flag_of(args, field) if field else None
    if flag is not None:
        dest = next((a.dest for a in args._parser._actions if flag in a.option_strings), None)
        missing = dest is not None and getattr(args, dest, None) is None and not detail.startswith("is required")
        print(f"error: {flag} is required here ({detail})" if missing else f"error: {flag}: {detail}",
              file=sys.stderr)
    elif field:
        print(f"error: {field}: {detail}", file=sys.stderr)
    else:
        print(f"error: {detail}", file=sys.stderr)
