"""The client's corrected clock: the device's wall time plus what the server's answers taught it.

Phones with a wrong clock are common. A report's window comes from this
clock, so a device clock that is off is not allowed to charge windows the
aggregator refuses (``too_early``) or to block a metric once it is put
right. :class:`ServerClock` keeps ``offset`` (server time minus device
time, seconds), learned from every answer's ``Date`` header, an upload
answer's ``server_time`` (wire version 2) and, as a lower bound, the signed
config's ``issued_at`` (the server signed it, so its clock was at least
that). Between answers it keeps time continuous with the monotonic clock:

* the device clock moved back (someone set it, or an NTP step): the offset
  grows by the jump, so windows keep moving forward;
* the device clock moved forward: a jump that closes a known gap (the
  device was behind) shrinks the offset; any other forward jump is kept as
  is, since a suspended device also sees its wall clock jump ahead of the
  monotonic one, and the next answer tells which it was.

Across a restart the monotonic clock says nothing, so the state keeps
:meth:`ServerClock.checkpoint`: the latest time the client trusted and the
offset it had learned. :meth:`ServerClock.restore` starts from them: a
device clock found earlier than the last trusted time was moved back while
the app was not running, and time continues from the last trusted time; a
device clock that a server answer found ahead is taken to be ahead still,
unless that would put time before the last trusted time. The first server
answer overrides both.

A device clock ahead by more than :data:`TOLERANCE` is corrected (the
server refuses windows that start in its future: ``too_early``), one
behind only past :data:`BEHIND_TOLERANCE` (the server takes past windows
within its retention, and ``Date`` has whole seconds).
"""

from __future__ import annotations

import email.utils
import threading
from collections.abc import Callable

TOLERANCE = 5.0  # seconds a device clock may be ahead uncorrected
BEHIND_TOLERANCE = 86400.0  # seconds a device clock may be behind uncorrected
OFF_THRESHOLD = 120.0  # a device clock further off than this is reported (``clock_off``)
SUSPECT_AHEAD = 600.0  # ahead of the server's time (carried by the monotonic clock) by more: unverified


def http_date(value: str | None) -> float | None:
    """An HTTP ``Date`` header as Unix seconds (``None``: absent or unreadable)."""
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return when.timestamp()


class ServerClock:
    """Device time corrected by the server's (see the module docstring).

    Args:
        clock: the device's wall clock (Unix seconds).
        monotonic: a monotonic clock (seconds), to see the wall clock jump.
        on_off: called with the new offset when the device clock is found more than
            :data:`OFF_THRESHOLD` off (or back within it: then with the small offset).
    """

    def __init__(self, clock: Callable[[], float], monotonic: Callable[[], float], *,
                 on_off: Callable[[float], None] | None = None) -> None:
        self._clock = clock
        self._monotonic = monotonic
        self._on_off = on_off
        self.offset = 0.0
        self.learned = False  # an answer of the server set the offset
        self._last: tuple[float, float] | None = None
        self._anchor: tuple[float, float] | None = None  # (server time, monotonic) of the last answer
        self._guard = threading.Lock()

    def now(self) -> float:
        """The corrected time: the device's wall clock plus ``offset``, kept continuous across jumps."""
        wall, mono = self._clock(), self._monotonic()
        with self._guard:
            last, self._last = self._last, (wall, mono)
            if last is not None:
                jump = (wall - last[0]) - (mono - last[1])
                if jump < -TOLERANCE:
                    self.offset -= jump  # moved back: continue from where the clock was
                elif jump > TOLERANCE and self.offset > 0:
                    self.offset = max(0.0, self.offset - jump)  # moved forward toward the server's time
            return wall + self.offset

    def checkpoint(self) -> tuple[float, float]:
        """``(trusted, offset)`` to keep in the state: the corrected time now, or (it runs ahead of the
        server's last answer, :meth:`suspect`) that answer carried forward; and the offset."""
        now = self.now()
        anchor = self._anchor
        if anchor is not None and self.suspect(now):
            now = anchor[0] + self._monotonic() - anchor[1]
        return now, self.offset

    def restore(self, trusted: float, offset: float) -> None:
        """Start from a state's :meth:`checkpoint` (an earlier run's): the offset it learned when the
        device was ahead (a clock put right since is caught by what follows), and never a time before
        ``trusted``. Nothing changes once a server answer taught this clock."""
        wall = self._clock()
        with self._guard:
            if self.learned:
                return
            offset = min(offset, 0.0)  # behind: the server takes past windows; the wall clock may be right now
            if wall + offset < trusted - TOLERANCE:  # moved back while the app was not running
                offset = trusted - wall
            self.offset = offset
            self._last = (wall, self._monotonic())

    def learn(self, server_time: float) -> None:
        """An answer's ``Date`` or ``server_time``: the server's clock now (Unix seconds)."""
        wall = self._clock()
        self._anchor = (server_time, self._monotonic())
        self._set(server_time - wall, wall)

    def suspect(self, now: float) -> bool:
        """``now`` (a corrected time) runs ahead of the server's last answer, carried forward by the
        monotonic clock, by more than :data:`SUSPECT_AHEAD`: the device clock jumped forward since (or
        the device slept), and only the next answer tells which. A report then waits, uncharged."""
        anchor = self._anchor
        if anchor is None:
            return False
        return now - (anchor[0] + self._monotonic() - anchor[1]) > SUSPECT_AHEAD

    def learn_at_least(self, server_time: float) -> None:
        """The server's clock was at least ``server_time`` (a config's signing time)."""
        wall = self._clock()
        if wall + self.offset < server_time - TOLERANCE:
            self._set(server_time - wall, wall)

    def _set(self, offset: float, wall: float) -> None:
        with self._guard:
            was = self.offset
            self.learned = True
            if -TOLERANCE <= offset <= BEHIND_TOLERANCE:
                offset = 0.0
            if abs(offset - was) <= TOLERANCE:
                return
            self.offset = offset
            self._last = (wall, self._monotonic())
        if self._on_off is not None and (abs(self.offset) > OFF_THRESHOLD or abs(was) > OFF_THRESHOLD):
            self._on_off(self.offset)


__all__ = ["BEHIND_TOLERANCE", "OFF_THRESHOLD", "SUSPECT_AHEAD", "TOLERANCE", "ServerClock", "http_date"]
