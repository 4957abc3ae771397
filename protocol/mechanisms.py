"""The central mechanisms' old import path: :mod:`protocol.central`, kept for existing callers."""

from .central import *  # noqa: F403
from .central import __all__  # noqa: F401
