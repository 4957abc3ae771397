"""Domain exceptions shared by the client, the aggregator and the protocol core.

Each subclasses a built-in so callers may catch the familiar type, and each
carries the data a caller needs to react (which field, how much budget).
The HTTP layer maps them to ``{"error": code, "field": ..., "detail": ...}``.
"""

from __future__ import annotations


class OnesidedError(Exception):
    """Base class of every error raised on purpose by onesided."""

    code = "onesided_error"


class ParameterError(OnesidedError, ValueError):
    """A parameter is out of its domain. ``field`` names it."""

    code = "invalid_parameter"

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field} {detail}")
        self.field = field
        self.detail = detail


class PolicyError(ParameterError):
    """A configuration is well formed but not allowed by the privacy policy.

    Example: the asymmetric randomizer on single-valued categorical data
    without a declared non-sensitive value.
    """

    code = "policy_violation"


class BudgetExceeded(OnesidedError, ValueError):
    """A release would push the privacy spent past its ceiling."""

    code = "budget_exceeded"

    def __init__(self, requested: float, remaining: float, detail: str = "") -> None:
        msg = f"privacy budget exceeded: requested {requested:.6g}, remaining {remaining:.6g}"
        super().__init__(f"{msg}; {detail}" if detail else msg)
        self.requested = requested
        self.remaining = remaining
        self.field = "epsilon"


class TighteningRefused(OnesidedError, ValueError):
    """Released data cannot be revoked: a level may only go up."""

    code = "tightening_refused"

    def __init__(self, current: float, requested: float) -> None:
        super().__init__(
            f"level must increase: current {current:.6g}, requested {requested:.6g}"
        )
        self.current = current
        self.requested = requested
        self.field = "level"


class ReportRejected(OnesidedError, ValueError):
    """A report or message failed validation. ``field`` names the culprit."""

    code = "invalid_message"

    def __init__(self, field: str, reason: str, code: str | None = None) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
        if code is not None:
            self.code = code


class SignatureError(ReportRejected):
    """A signed document (config, round announcement) does not verify."""

    code = "bad_signature"

    def __init__(self, field: str = "signature", reason: str = "signature does not verify") -> None:
        super().__init__(field, reason)


class DecryptError(ReportRejected):
    """A sealed envelope does not open (wrong key, tampered, wrong binding)."""

    code = "decrypt_error"

    def __init__(self, field: str = "sealed", reason: str = "envelope does not open") -> None:
        super().__init__(field, reason)
