"""The token roles (no dependencies: the CLI lists them without loading the server)."""

ROLES: tuple[str, ...] = ("admin", "analyst")
