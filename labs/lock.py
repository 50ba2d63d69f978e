"""One lock per lab for the commands that change it, so two of them never interleave.

Injection, revert, scale, down and up each hold `<state_dir>/.<lab>.lock` (an exclusive
flock, beside the lab's directory so lab.down --destroy can remove that while holding it)
from their first check to their last write: "one fault at a time" is then checked and
recorded under the same lock, and `lab.down` cannot pull the world from under a scenario
run. The file names the holder (command, pid, since when), so a second command waits a few
seconds and then refuses, saying who holds it. Taking the lock first proves the lab's
directory can be written, before anything is changed. Nested takes in one process (lab.up
scaling, lab.down reverting) share the outer hold.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from labs.errors import LabError
from labs.state import StateWriteError, utc_now, warn

if TYPE_CHECKING:
    from labs.lab import Lab

POLL_SECONDS = 0.1
_held: dict[Path, int] = {}  # lock path -> depth, for this process


class LabBusy(LabError):
    """Another command holds the lab's lock; the message names it and its pid."""


def _holder(path: Path) -> dict[str, Any]:
    """Who holds (or last held) the lock: {"command", "pid", "since"}; {} when unknown."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_path(root: Path) -> Path:
    """Where the lock of the lab whose directory is `root` lives."""
    return root.parent / f".{root.name}.lock"


def _check_writable(root: Path) -> None:
    """A command that changes the lab must be able to record what it did, before it does it."""
    where = root if root.is_dir() else root.parent
    probe = where / f".write-check.{os.getpid()}"
    try:
        where.mkdir(parents=True, exist_ok=True)
        probe.write_text("lab")  # a byte, so a full disk fails here and not half-way
        probe.unlink()
    except OSError as error:
        with contextlib.suppress(OSError):  # created, then the disk was full
            probe.unlink()
        raise StateWriteError(
            f"cannot write in {where} ({error.strerror or error}): a command that changes the "
            "lab must be able to record what it did. Make the directory writable (or point "
            "state_dir elsewhere) and try again. Nothing was changed."
        ) from error


def _open(path: Path) -> IO[str]:
    try:
        return open(path, "a+", encoding="utf-8")
    except OSError as error:
        raise StateWriteError(
            f"cannot open the lab's lock file {path} ({error.strerror or error}); make "
            f"{path.parent} writable and try again. Nothing was changed."
        ) from error


@contextmanager
def lab_lock(
    lab: Lab,
    command: str,
    on_busy: Callable[[dict[str, Any]], float | None] | None = None,
    writable: bool = True,
) -> Iterator[None]:
    """Hold the lab's lock while `command` runs; LabBusy after its `lock_wait` of contention.

    `on_busy(holder)` is asked once when the lock is taken: it may act (ask the holder to
    stop) and return a longer wait, or None to keep `wait`. `writable=False` skips the
    check that the state directory can be written (the cost guard must run regardless).
    """
    lab.backend.check_writable(lab, command)  # a read-only target gets no lock file either
    root, wait = lab.paths.root, lab.settings.lock_wait
    path = lock_path(root)
    if _held.get(path):
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    if writable:
        _check_writable(root)
    try:
        handle = _open(path)
    except StateWriteError as error:
        if writable:
            raise
        warn(f"{error}; {command} goes on without the lab's lock")
        yield
        return
    existed = (root / "state.json").exists()
    with handle:
        _acquire(handle, path, command, wait, on_busy)
        if existed and not (root / "state.json").exists():
            raise LabBusy(
                f"refusing {command}: lab {root.name!r} was removed (lab.down --destroy) while "
                "this command waited for it. Nothing was changed."
            )
        _name_holder(handle, path, command, writable)
        _held[path] = 1
        try:
            yield
        finally:
            del _held[path]
            os.ftruncate(handle.fileno(), 0)


def _name_holder(handle: IO[str], path: Path, command: str, writable: bool) -> None:
    """Write who holds the lock (unbuffered: a full disk fails here, not at close). The cost
    guard (`writable=False`) goes on without it; any other command stops, having changed
    nothing."""
    holder = json.dumps({"command": command, "pid": os.getpid(), "since": utc_now()})
    try:
        os.ftruncate(handle.fileno(), 0)
        os.pwrite(handle.fileno(), holder.encode(), 0)
    except OSError as error:
        problem = f"could not write {path} ({error.strerror or error})"
        if writable:
            raise StateWriteError(
                f"{problem}: a command that changes the lab must be able to record what it "
                f"did. Free space in {path.parent} (or point state_dir elsewhere) and try "
                "again. Nothing was changed."
            ) from error
        warn(f"{problem}; {command} holds the lab's lock without naming itself there")


def _acquire(
    handle: IO[str],
    path: Path,
    command: str,
    wait: float,
    on_busy: Callable[[dict[str, Any]], float | None] | None,
) -> None:
    if _try_lock(handle):
        return
    busy = _holder(path)
    if on_busy is not None:
        wait = on_busy(busy) or wait
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        if _try_lock(handle):
            return
    busy = _holder(path) or busy
    who = f"`{busy.get('command', 'another command')}` (pid {busy.get('pid', '?')})"
    since = f" since {busy['since']}" if busy.get("since") else ""
    lab = path.name.removeprefix(".").removesuffix(".lock")
    raise LabBusy(
        f"refusing {command}: lab {lab!r} is busy: {who} has held its lock{since}. "
        f"Waited {wait:g} s; try again when it has finished. Nothing was changed."
    )


def ask_to_stop(holder: dict[str, Any], command: str) -> bool:
    """SIGTERM the lock's holder if it is still `command` (it reverts and reports, as on
    Ctrl-C); False when it is another command or already gone."""
    pid = holder.get("pid")
    if not str(holder.get("command", "")).startswith(command) or not isinstance(pid, int):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if command.encode() not in argv:  # the pid was reused by another process
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True
