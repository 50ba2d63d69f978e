"""A container's own files: its writable layer, a directory the world keeps beside its logs.

What `kubectl cp` moves lands here and comes back from here: kubectl runs `tar` in the
container over exec (`tar cf - PATH` to copy out, `tar -xmf - -C DIR` to copy in), and the
world's `tar` (Python's tarfile) reads and writes this directory, so `kubectl exec -- cat`
sees a copied-in file as a container would. A new container's layer has the directories an
image has (`/tmp`, `/root`, ...) and nothing else; paths under a `hostPath` mount are the
node's (`labs.sim.node.host_files`), not the layer's.
"""

from __future__ import annotations

import io
import posixpath
import stat
import tarfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from labs.sim.node.host_files import Entry

if TYPE_CHECKING:
    from labs.sim.node.programs import Process, Terminal

IMAGE_DIRS = ("etc", "home", "root", "tmp", "var/tmp")
TAR_USAGE = "Try 'tar --help' or 'tar --usage' for more information.\n"
TAR_FAILED = "tar: Exiting with failure status due to previous errors\n"


def layer_path(process: Process, path: str) -> Path | None:
    """The file behind `path` in the container's own layer; None under a hostPath mount or
    where the world keeps no layer (a container the kubelet runs to completion)."""
    if process.rootfs is None or process.host_path(path) is not None:
        return None
    for name in IMAGE_DIRS:
        (process.rootfs / name).mkdir(parents=True, exist_ok=True)
    return process.rootfs / process.container_path(path).lstrip("/")


def listing(directory: Path) -> list[Entry]:
    """A layer directory as `ls -la` lists it (`.` and `..` first)."""
    inside = [(path.name, path) for path in directory.iterdir()]
    named = [(".", directory), ("..", directory.parent), *inside]
    return [_entry(name, path) for name, path in named]


def _entry(name: str, path: Path) -> Entry:
    info = path.lstat()
    mtime = datetime.fromtimestamp(info.st_mtime, UTC)
    mode = stat.filemode(info.st_mode)
    return Entry(name, mode, info.st_nlink, info.st_size, info.st_blocks // 2, mtime)


@dataclass
class TarCommand:
    """`tar` as kubectl runs it: one of c/x, `-f -`, `-C DIR`, member paths."""

    mode: str = ""
    archive: str = ""
    directory: str = "."
    members: list[str] = field(default_factory=list)


def _tar_command(args: list[str]) -> TarCommand:
    """Old-style (`cf -`) and short (`-xmf -`) options; ValueError says what tar says."""
    words = [f"-{args[0]}", *args[1:]] if args and not args[0].startswith("-") else list(args)
    command = TarCommand()
    while words:
        word = words.pop(0)
        if not word.startswith("-") or word == "-":
            command.members.append(word)
            continue
        for letter in word[1:]:
            if letter in "cx":
                command.mode = letter
            elif letter in "fC" and words:
                setattr(command, "archive" if letter == "f" else "directory", words.pop(0))
            elif letter != "m":  # m: do not restore modification times
                raise ValueError(f"invalid option -- '{letter}'")
    if not command.mode:
        raise ValueError("You must specify one of the '-Acdtrux' options")
    return command


def tar(args: list[str], process: Process, term: Terminal) -> int:
    """Create an archive on stdout or extract one from stdin, in the container's layer."""
    try:
        command = _tar_command(args)
    except ValueError as error:
        term.err(f"tar: {error}\n{TAR_USAGE}")
        return 2
    if command.archive != "-":
        term.err(f"tar: {command.archive}: the rehearsal world models only -f - (stdin/stdout)\n")
        return 2
    if command.mode == "c":
        return _create(command, process, term)
    return _extract(command, process, term)


def _create(command: TarCommand, process: Process, term: Terminal) -> int:
    buffer, failed = io.BytesIO(), False
    if any(member.startswith("/") for member in command.members):
        term.err("tar: Removing leading `/' from member names\n")
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for member in command.members:
            local = layer_path(process, posixpath.join(command.directory, member))
            if local is None or not local.exists():
                term.err(f"tar: {member}: Cannot stat: No such file or directory\n")
                failed = True
                continue
            archive.add(local, arcname=member.lstrip("/"))
    term.out_bytes(buffer.getvalue())
    if failed:
        term.err(TAR_FAILED)
    return 2 if failed else 0


def _extract(command: TarCommand, process: Process, term: Terminal) -> int:
    data = term.read_bytes()
    target = layer_path(process, command.directory)
    if target is None or not target.is_dir():
        term.err(
            f"tar: {command.directory}: Cannot open: No such file or directory\n"
            "tar: Error is not recoverable: exiting now\n"
        )
        return 2
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            archive.extractall(target, filter="data")
    except tarfile.TarError:
        term.err(f"tar: This does not look like a tar archive\n{TAR_FAILED}")
        return 2
    return 0
