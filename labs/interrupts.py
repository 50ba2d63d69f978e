"""SIGHUP and SIGTERM stop a command the way Ctrl-C does; a second one cannot cut clean-up short.

Closing the terminal (SIGHUP) or `kill`/`lab.down` (SIGTERM) during a scenario run must
revert the fault like Ctrl-C: `handled_signals()` makes all three raise `Interrupted`, a
KeyboardInterrupt that names its signal. Inside `shielded()` (a revert, a journal write,
the report) a further signal is only noted and said; `shielded(reraise=True)` raises it
once the shielded work is done, plain `shielded()` leaves it (the command already stops).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_WHY = {
    signal.SIGINT: "Ctrl-C",
    signal.SIGTERM: "SIGTERM",
    signal.SIGHUP: "SIGHUP: the terminal closed",
}
_shield_depth = 0
_pending: list[int] = []


class Interrupted(KeyboardInterrupt):
    """The command was interrupted by a signal; `why` names it for the user."""

    def __init__(self, signum: int) -> None:
        super().__init__(_WHY.get(signal.Signals(signum), signal.Signals(signum).name))
        self.why = str(self.args[0])


def describe(error: BaseException) -> str:
    """`interrupted (Ctrl-C)`, `interrupted (SIGTERM)`, ... for an interrupt."""
    return f"interrupted ({error.why if isinstance(error, Interrupted) else 'Ctrl-C'})"


def _handler(signum: int, _frame: FrameType | None) -> None:
    if _shield_depth:
        _pending.append(signum)
        print(
            f"{describe(Interrupted(signum))}: finishing the revert and the report first",
            file=sys.stderr,
            flush=True,
        )
        return
    raise Interrupted(signum)


@contextmanager
def handled_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into Interrupted while the body runs."""
    previous = {signum: signal.signal(signum, _handler) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def shielded(reraise: bool = False) -> Iterator[None]:
    """Let the body finish whatever signal comes; with `reraise`, raise the first one after."""
    global _shield_depth
    _shield_depth += 1
    try:
        yield
    finally:
        _shield_depth -= 1
        first = _pending[0] if _pending and not _shield_depth else None
        if first is not None:
            _pending.clear()
    if reraise and first is not None:
        raise Interrupted(first)


def signal_pipe(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> int:
    """A pipe the interpreter writes a byte to when one of `signals` comes: reading it waits
    for one, even one that came before the read. The handlers do nothing more, as a program's
    stop must take no lock in a handler (one setting a threading.Event can run while its own
    thread holds that Event's lock in `wait()`: the process then hangs for good)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    for signum in signals:
        signal.signal(signum, lambda *_: None)
    return read_end
