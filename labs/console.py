"""Terminal output for long-running lab commands: phases with timings and live waits.

Each phase prints what it does and how long it took; a wait shows a live progress
line on a terminal (rewritten in place) and a line every few seconds elsewhere
(CI logs, pipes), so nobody stares at a silent command while GPUs bill.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as left-aligned columns two spaces apart, no trailing blanks (as kubectl prints)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]  # fmt: skip


class Console:
    """Prints phases, facts and progress lines to one stream."""

    def __init__(self, stream: TextIO | None = None, log_every: float = 10.0) -> None:
        self.stream = stream or sys.stdout
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._log_every = log_every
        self._last_logged = 0.0
        self._progress_shown = False

    def say(self, text: str = "") -> None:
        """Print one line (ending any live progress line first)."""
        self._end_progress()
        print(text, file=self.stream, flush=True)

    @contextmanager
    def phase(self, title: str) -> Iterator[None]:
        """`==> title` ... `    done in 3.2 s`, or the failure and its time."""
        self.say(f"==> {title}")
        started = time.monotonic()
        try:
            yield
        except BaseException:
            self.say(f"    failed after {time.monotonic() - started:.1f} s")
            raise
        self.say(f"    done in {time.monotonic() - started:.1f} s")

    def progress(self, text: str) -> None:
        """Show a waiting state: rewritten in place on a terminal, throttled in logs."""
        if self.live:
            self.stream.write(f"\r    {text}\033[K")
            self.stream.flush()
            self._progress_shown = True
            return
        now = time.monotonic()
        if now - self._last_logged >= self._log_every:
            self._last_logged = now
            print(f"    {text}", file=self.stream, flush=True)

    def waiter(self, describe: Callable[[], str]) -> Callable[[float], None]:
        """An `on_wait(elapsed)` callback that shows `describe()` with the elapsed time."""
        return lambda elapsed: self.progress(f"[{elapsed:5.0f} s] {describe()}")

    def _end_progress(self) -> None:
        if self._progress_shown:
            self.stream.write("\n")
            self._progress_shown = False


class _Resilient(io.TextIOBase):
    """A standard stream that goes quiet, instead of failing the command, once its reader is gone.

    `invoke lab.status | head -2` closes the pipe; a closed terminal answers EIO. Neither may
    abort a command half-way (a lab.up between two applies, a revert): the first failed
    write points the descriptor at /dev/null, and the command carries on without output.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        self._guarded(lambda: self._stream.write(text))
        return len(text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def isatty(self) -> bool:
        return not self._gone and self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def _guarded(self, action: Callable[[], object]) -> None:
        if self._gone:
            return
        try:
            action()
        except OSError:  # EPIPE, EIO: nobody reads any more
            self._gone = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())  # so the interpreter's last flush succeeds
            os.close(devnull)


@contextmanager
def resilient_stdio() -> Iterator[None]:
    """Standard output and error that survive a closed pipe or terminal while the body runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Resilient(sys.stdout), _Resilient(sys.stderr)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # a pipe closed by now fails here, guarded, not at interpreter exit
        sys.stdout, sys.stderr = saved
