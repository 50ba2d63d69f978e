"""The commands of the debugging path, answered from the world's state instead of a shell.

`kubectl exec`, `kubectl attach`/`debug` and the kubelet's run-to-completion containers run
their commands here. What a command sees follows the pod: files under a `hostPath` mount
are the node's (`labs.sim.node.host_files`), `chroot /host` makes the mounted host root the
root, binaries are the node AMI's or the image's, and the GPU is visible only to a process
whose container got the devices (a pod with `nvidia.com/gpu` allocated, or a container the
NVIDIA runtime injects, `NVIDIA_VISIBLE_DEVICES` set, as for the dcgm-exporter and device
plugin) - so `kubectl debug node/... -- chroot /host nvidia-smi` fails on a healthy driver,
as on EKS.

Per-program behaviour is the table `PROGRAMS`; a name not in it, or not installed where
the command runs, answers as a minimal shell (`sh: 1: foo: not found`, 127) or, run
without a shell, as containerd (`executable file not found in $PATH`, 126). Files outside
`hostPath` mounts are the container's own (`labs.sim.node.container_files`: what `kubectl cp`
moves with `tar`). Shell scripts (`sh -c`) support `;`, `&&`, `||`, `cd` and globs; not
pipes or redirections.
Output that nvidia-smi prints follows the driver 580 layout recorded on real hardware.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from labs.kube.api import KubeApi
from labs.kube.gpu import NVIDIA_PCI_LABEL
from labs.kube.resources import CONFIG_MAPS, NODES, NotFound
from labs.sim.node import container_files, host_files, node_os
from labs.sim.node.container_files import layer_path, tar
from labs.sim.node.gpu_faults import lost_xid
from labs.sim.node.hardware import (
    CUDA_VERSION,
    GPU_COMPUTE_CAP,
    GPU_DRIVER_VERSION,
    GPU_MEMORY_MIB,
    GPU_NAME,
    GPU_TABLE_CELLS,
    TOOLKIT_COMMIT,
    TOOLKIT_VERSION,
    gpu_uuid,
)
from labs.sim.node.images import repository
from labs.sim.node.nvidia_runtime import container_env, injected_gpus
from labs.sim.node.validator import Run, nvidia_validator
from labs.state import atomic_write_text

NOT_MODELLED = "the rehearsal world does not model"
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\?|\w+))")
NVML_FAILURE = "Failed to initialize NVML: Unknown Error\n"
# nvidia-smi(1), RETURN VALUE: 15, the GPU has fallen off the bus or has otherwise become
# inaccessible.
GPU_LOST_EXIT = 15
SHELLS = ("sh", "bash")
BASE_TOOLS = frozenset(
    {*SHELLS, "cat", "chroot", "echo", "env", "false", "hostname", "ldd", "ls", "sleep", "tar"}
    | {"test", "true"}
)
NVIDIA_HOST_TOOLS = frozenset({"nvidia-smi", "nvidia-ctk"})
# Binaries an image ships beside the base tools, by the image's repository name.
IMAGE_TOOLS: dict[str, frozenset[str]] = {
    "k8s-device-plugin": frozenset({"config-manager"}),
    "gpu-operator-validator": frozenset({"nvidia-validator"}),
}


class Terminal(Protocol):
    """Where a process reads and writes: a stream session, or captured output."""

    tty: bool

    def read_line(self, prompt: str) -> str | None:
        """The next input line (no newline), None at end of input."""
        ...

    def read_bytes(self) -> bytes:
        """All the input left, as sent (an archive for `tar`)."""
        ...

    def out(self, text: str) -> None: ...

    def out_bytes(self, data: bytes) -> None: ...

    def err(self, text: str) -> None: ...


@dataclass
class Captured:
    """A terminal without input whose output is kept (a container's log)."""

    tty: bool = False
    text: str = ""

    def read_line(self, prompt: str) -> str | None:
        return None

    def read_bytes(self) -> bytes:
        return b""

    def out(self, text: str) -> None:
        self.text += text

    def out_bytes(self, data: bytes) -> None:
        self.text += data.decode(errors="replace")

    def err(self, text: str) -> None:
        self.text += text


@dataclass
class Process:
    """A process in a container: its pod and node, the root `chroot` gave it, its cwd, and the
    directory holding the container's own files (`labs.sim.node.container_files`), if kept.
    On a real kubelet's node it also has its mounts (container path -> where that is on this
    machine) and runs in real time: `sleep` sleeps."""

    store: KubeApi
    pod: dict
    container: dict
    node: dict
    root: str = "/"
    cwd: str = "/"
    rootfs: Path | None = None
    mounts: dict[str, Path] = field(default_factory=dict)
    real_time: bool = False

    def write_mounted(self, path: str, text: str) -> None:
        """Write the file at container path `path` where its mount keeps it (a node's hostPath
        directory); nothing where no mount holds it (the model keeps no node files)."""
        point = max(
            (p for p in self.mounts if path == p or path.startswith(p.rstrip("/") + "/")),
            key=len,
            default=None,
        )
        if point is None:
            return
        # readers (an operand's init container) see whole files only
        atomic_write_text(self.mounts[point] / path[len(point) :].lstrip("/"), text)

    def container_path(self, path: str) -> str:
        """`path` as the container sees it (the chroot applied)."""
        absolute = posixpath.join(self.cwd, path)
        return posixpath.normpath(posixpath.join(self.root, absolute.lstrip("/")))

    def host_path(self, path: str) -> str | None:
        """The node's path behind `path` through a hostPath mount, None inside the image."""
        full = self.container_path(path)
        volumes = {
            v["name"]: v["hostPath"]["path"]
            for v in self.pod["spec"].get("volumes") or []
            if v.get("hostPath")
        }
        best = None
        for mount in self.container.get("volumeMounts") or []:
            point = mount.get("mountPath", "").rstrip("/") or "/"
            inside = full == point or full.startswith(point.rstrip("/") + "/")
            if mount.get("name") in volumes and inside and (best is None or len(point) > best[0]):
                best = (len(point), posixpath.join(volumes[mount["name"]], full[len(point) :]))
        if best is None:
            return None
        return posixpath.normpath("/" + best[1].lstrip("/"))

    @property
    def on_host_root(self) -> bool:
        """Its root is the node's (`chroot /host` in a pod mounting the host's /)."""
        return self.host_path("/usr/bin") == "/usr/bin"

    @property
    def gpu_node(self) -> bool:
        return NVIDIA_PCI_LABEL in (self.node["metadata"].get("labels") or {})

    @property
    def gpus(self) -> int | None:
        """How many /dev/nvidia* the container has (allocated by the device plugin, or injected
        by the NVIDIA runtime: `labs.sim.node.nvidia_runtime`); None without the driver at all."""
        return injected_gpus(self.pod, self.node, self.container)

    @property
    def has_driver(self) -> bool:
        """The runtime injected the driver (and nvidia-smi), with or without a GPU."""
        return self.gpus is not None

    def container_env(self) -> dict[str, str]:
        return container_env(self.pod, self.container)

    def installed(self, name: str) -> bool:
        """Whether the binary exists where this process looks for it."""
        image = self.container.get("image", "")
        if self.on_host_root:
            tools = BASE_TOOLS | (NVIDIA_HOST_TOOLS if self.gpu_node else frozenset())
        else:
            tools = frozenset() if "distroless" in image else BASE_TOOLS
            tools |= {"nvidia-smi"} if self.has_driver else frozenset()
            tools |= IMAGE_TOOLS.get(repository(image), frozenset())
        return posixpath.basename(name) in tools

    @property
    def amazon_linux(self) -> bool:
        return self.on_host_root or "amazonlinux" in self.container.get("image", "")


Program = Callable[[list[str], Process, Terminal], int]


# --- running a command -------------------------------------------------------------------


def exec_argv(argv: list[str], process: Process, term: Terminal) -> int:
    """Run `argv` as the container runtime does (no shell); returns the exit code."""
    if not argv:
        return run_default(process, term)
    if not process.installed(argv[0]):
        term.err(
            "OCI runtime exec failed: exec failed: unable to start container process: exec: "
            f'"{argv[0]}": executable file not found in $PATH: unknown\n'
        )
        return 126
    return PROGRAMS[posixpath.basename(argv[0])](argv[1:], process, term)


def run_default(process: Process, term: Terminal) -> int:
    """A container started without a command runs the image's: a shell, as in the images the
    debugging path uses."""
    return shell([], process, term, "bash" if process.amazon_linux else "sh")


def container_command(container: dict) -> list[str]:
    return [str(x) for x in (container.get("command") or []) + (container.get("args") or [])]


def run_container(store: KubeApi, pod: dict, container: dict, node: dict) -> tuple[str, int]:
    """What a non-interactive container prints and its exit code (kubelet's run to completion)."""
    term = Captured()
    argv = container_command(container)
    if not argv:
        return "", 0  # the image's own entrypoint: nothing the rehearsal plays
    code = exec_argv(argv, Process(store, pod, container, node), term)
    return term.text, code


def plays(container: dict) -> bool:
    """Whether the world plays what this container starts: a program of `PROGRAMS` or a
    builtin of the world's shell, run directly or as the first word of its `sh -c` script. The
    rest (a shell loop) is the image's own process, which the rehearsal does not model."""
    return _program_name(container) in (*PROGRAMS, *SHELL_BUILTINS)


def _program_name(container: dict) -> str:
    """The program a container starts: its command, or the first word of its `sh -c` script
    ("" for none)."""
    argv = container_command(container)
    if argv[:1] and posixpath.basename(argv[0]) in SHELLS and argv[1:2] == ["-c"]:
        script = argv[2] if len(argv) > 2 else ""
        argv = script.split()[:1]
    return posixpath.basename(argv[0]) if argv else ""


@dataclass
class LongRun:
    """An init container's program that runs for a while (`LONG_PROGRAMS`): each `step` lets
    it run until it sleeps again, so the kubelet never waits on it."""

    steps: Run
    term: Captured

    def step(self) -> tuple[str, int | None, float]:
        """(what it printed since the last step, its exit code or None while it runs, the real
        seconds it now sleeps)."""
        before = len(self.term.text)
        try:
            wait = next(self.steps)
        except StopIteration as end:
            return self.term.text[before:], int(end.value or 0), 0.0
        return self.term.text[before:], None, wait


def start_init(store: KubeApi, pod: dict, container: dict, node: dict) -> LongRun | None:
    """The init container's long-running program started (its `sh -c` script's first word in
    `LONG_PROGRAMS`), None for any other."""
    term = Captured()
    steps = long_program(Process(store, pod, container, node), term)
    return None if steps is None else LongRun(steps, term)


def long_program(process: Process, term: Terminal) -> Run | None:
    """The container's program that runs for a while (`LONG_PROGRAMS`), started; None when its
    program is another."""
    program = LONG_PROGRAMS.get(_program_name(process.container))
    return None if program is None else program(process, term)


def daemon_program(argv: list[str]) -> Callable[[list[str], Process, Terminal], int | None] | None:
    """The long-running program a container's command starts (`DAEMONS`), or None."""
    return DAEMONS.get(posixpath.basename(argv[0])) if argv else None


def run_init(store: KubeApi, pod: dict, container: dict, node: dict) -> tuple[str, int]:
    """What an init container prints and its exit code: its program where the world plays it,
    else the image's own, which it takes to succeed at once without a word."""
    if not plays(container):
        return "", 0
    return run_container(store, pod, container, node)


def run_daemon(
    store: KubeApi, pod: dict, container: dict, node: dict
) -> tuple[str, int | None] | None:
    """A long-running container's start (restartPolicy Always): what it printed and its exit
    code (None: it keeps running); None when the world does not play it (`DAEMONS`)."""
    argv = container_command(container)
    program = daemon_program(argv)
    if program is None:
        return None
    process = Process(store, pod, container, node)
    if not process.installed(argv[0]):
        return run_container(store, pod, container, node)  # containerd's own refusal
    term = Captured()
    code = program(argv[1:], process, term)
    return term.text, code


# --- the shell -------------------------------------------------------------------------


def shell(args: list[str], process: Process, term: Terminal, name: str = "sh") -> int:
    """`sh -c SCRIPT`, or an interactive shell reading lines until `exit` or end of input."""
    if args[:1] == ["-c"]:
        if len(args) < 2:
            term.err(f"{name}: 0: -c requires an argument\n")
            return 2
        return run_script(args[1], process, term)
    prompt = f"{name}-5.2# " if process.amazon_linux else "# "
    code = 0
    while (line := term.read_line(prompt if term.tty else "")) is not None:
        words = line.split()
        if words[:1] == ["exit"]:
            return int(words[1]) if len(words) > 1 and words[1].isdigit() else code
        if words:
            code = run_script(line, process, term)
    return code


def run_script(script: str, process: Process, term: Terminal) -> int:
    """Commands joined by `;`, `&&` and `||`, each with globs expanded."""
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        term.err(f"sh: 1: Syntax error: {script!r} is not complete\n")
        return 2
    code, command, joiner = 0, [], ";"
    for token in [*tokens, ";"]:
        if token not in (";", "&&", "||"):
            if token in ("|", "<", ">", ">>", "&", "2>&1"):
                term.err(f"sh: 1: {token}: pipes and redirections: {NOT_MODELLED} them\n")
                return 2
            command.append(token)
            continue
        if command and (joiner == ";" or (joiner == "&&") == (code == 0)):
            words = [_expand(word, code, process) for word in command]
            code = _simple_command(words, process, term)
        command, joiner = [], token
    return code


def _expand(word: str, last_code: int, process: Process) -> str:
    """`$?`, `$NAME` and `${NAME}` (quoting is not told apart)."""
    values = {"?": str(last_code), **process.container_env()}
    return _VARIABLE.sub(lambda m: values.get(m.group(1) or m.group(2), ""), word)


# What the world's shell runs itself (`_simple_command`).
SHELL_BUILTINS = ("cd", "exit")


def _simple_command(words: list[str], process: Process, term: Terminal) -> int:
    words = [expanded for word in words for expanded in _glob(word, process)]
    name = words[0]
    if name == "cd":
        process.cwd = posixpath.normpath(
            posixpath.join(process.cwd, words[1] if words[1:] else "/")
        )
        return 0
    if name == "exit":
        return int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
    if not process.installed(name):
        term.err(f"sh: 1: {name}: not found\n")
        return 127
    return PROGRAMS[posixpath.basename(name)](words[1:], process, term)


def _glob(word: str, process: Process) -> list[str]:
    if not any(char in word for char in "*?["):
        return [word]
    directory, pattern = posixpath.split(word)
    host = process.host_path(directory or ".")
    entries = host_files.listing(process.store, process.node, host) if host else None
    visible = [e.name for e in entries or [] if not e.name.startswith(".")]
    names = sorted(n for n in visible if fnmatch.fnmatch(n, pattern))
    return [posixpath.join(directory, n) for n in names] if names else [word]


# --- programs --------------------------------------------------------------------------


def chroot(args: list[str], process: Process, term: Terminal) -> int:
    if not args:
        term.err("chroot: missing operand\nTry 'chroot --help' for more information.\n")
        return 125
    new_root = process.container_path(args[0])
    if new_root != "/" and process.host_path(args[0]) is None:
        term.err(f"chroot: cannot change root directory to '{args[0]}': {NOT_MODELLED} it\n")
        return 125
    inside = replace(process, root=new_root, cwd="/")
    command = args[1:] or ["/bin/sh", "-i"]
    if not inside.installed(command[0]):
        term.err(f"chroot: failed to run command ‘{command[0]}’: No such file or directory\n")
        return 127
    if posixpath.basename(command[0]) in SHELLS and command[1:] == ["-i"]:
        return shell([], inside, term, posixpath.basename(command[0]))
    return PROGRAMS[posixpath.basename(command[0])](command[1:], inside, term)


def _table_line(cells: list[str]) -> str:
    return "|" + "|".join(cells) + "|\n"


def nvidia_smi_table() -> str:
    """`nvidia-smi` with no arguments: one idle A10G, in the driver 580 layout."""
    c = GPU_TABLE_CELLS
    rule = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+\n"
    wide = "+" + "-" * 89 + "+\n"
    header = f" NVIDIA-SMI {GPU_DRIVER_VERSION}             Driver Version: {GPU_DRIVER_VERSION}"
    header += f"     CUDA Version: {CUDA_VERSION}"
    return "".join(
        [
            time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime()) + "       \n",
            wide,
            f"|{header:<89}|\n",
            rule,
            _table_line([" GPU  Name                 Persistence-M ",
                         " Bus-Id          Disp.A ", " Volatile Uncorr. ECC "]),
            _table_line([" Fan  Temp   Perf          Pwr:Usage/Cap ",
                         "           Memory-Usage ", " GPU-Util  Compute M. "]),
            _table_line([" " * 41, " " * 24, "               MIG M. "]),
            "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|\n",
            _table_line([f"{0:>4}  {GPU_NAME:<31}{c['persistence']:<3} ",
                         f"   {c['bus_id']} {c['display']:<3} ", f"{c['ecc']:>21} "]),
            _table_line([f"{c['fan']:>4}   {c['temperature']:>3}    {c['perf']:>2}"
                         f"{c['power']:>16} / {c['power_cap']:>5} ",
                         f"{'0MiB':>11} / {f'{GPU_MEMORY_MIB}MiB':>9} ",
                         f"{c['utilization']:>8}{c['compute_mode']:>13} "]),
            _table_line([" " * 41, " " * 24, f"{c['mig']:>21} "]),
            rule,
            "\n",
            wide,
            f"|{' Processes:':<89}|\n",
            f"|{'  GPU   GI   CI              PID   Type   Process name':<78}GPU Memory |\n",
            f"|{'        ID   ID':<78}Usage      |\n",
            "|" + "=" * 89 + "|\n",
            f"|{'  No running processes found':<89}|\n",
            wide,
        ]
    )  # fmt: skip


def gpu_lost() -> str:
    """What nvidia-smi prints for a GPU fallen off the bus: NVML answers GPU_IS_LOST for its
    handle. Worded as quoted from a real node in JosephKJ/OWOD issue #81 ("Unable to determine
    the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the system to recover this
    GPU"), with the A10G's bus id in that short form."""
    bus_id = GPU_TABLE_CELLS["bus_id"][4:]  # 00000000:00:1E.0 -> 0000:00:1E.0
    return (
        f"Unable to determine the device handle for GPU {bus_id}: GPU is lost. "
        "Reboot the system to recover this GPU\n"
    )


def _query_fields(node_name: str) -> dict[str, tuple[str, str]]:
    """--query-gpu field -> (CSV header, value): the A10G of this node."""
    total = f"{GPU_MEMORY_MIB} MiB"
    return {
        "name": ("name", GPU_NAME),
        "driver_version": ("driver_version", GPU_DRIVER_VERSION),
        "memory.total": ("memory.total [MiB]", total),
        "memory.used": ("memory.used [MiB]", "0 MiB"),
        "memory.free": ("memory.free [MiB]", total),
        "uuid": ("uuid", gpu_uuid(node_name)),
        "index": ("index", "0"),
        "count": ("count", "1"),
        "pci.bus_id": ("pci.bus_id", GPU_TABLE_CELLS["bus_id"]),
        "temperature.gpu": ("temperature.gpu", GPU_TABLE_CELLS["temperature"].rstrip("C")),
        "utilization.gpu": ("utilization.gpu [%]", GPU_TABLE_CELLS["utilization"][:-1] + " %"),
        "compute_cap": ("compute_cap", GPU_COMPUTE_CAP),
    }  # fmt: skip


def _query(fields: str, formats: str, node_name: str, term: Terminal) -> int:
    known = _query_fields(node_name)
    wanted = [f.strip() for f in fields.split(",") if f.strip()]
    for name in wanted:
        if name not in known:
            term.out(f'Field "{name}" is not a valid field to query.\n\n')
            return 2
    options = {option.strip() for option in formats.split(",")}
    if "noheader" not in options:
        term.out(", ".join(known[name][0] for name in wanted) + "\n")
    values = [known[name][1] for name in wanted]
    if "nounits" in options:
        values = [value.removesuffix(" MiB").removesuffix(" %") for value in values]
    term.out(", ".join(values) + "\n")
    return 0


def nvidia_smi(args: list[str], process: Process, term: Terminal) -> int:
    node_name = process.node["metadata"]["name"]
    options = dict(arg.partition("=")[::2] for arg in args)
    unknown = [a for a in options if a not in ("-L", "--list-gpus", "--query-gpu", "--format")]
    if unknown:
        term.out(f"ERROR: Option {unknown[0]} is not recognized. Please run 'nvidia-smi -h'.\n\n")
        return 255
    gpus = process.gpus
    if gpus == 0:  # the driver without a device: NVIDIA_VISIBLE_DEVICES=none
        term.out("No devices were found\n")
        return 6
    if gpus is None:
        term.out(NVML_FAILURE)
        return 255
    if lost_xid(process.node) is not None:
        term.out(gpu_lost())
        return GPU_LOST_EXIT
    if "--query-gpu" in options:
        return _query(options["--query-gpu"], options.get("--format", "csv"), node_name, term)
    if "-L" in options or "--list-gpus" in options:
        term.out(f"GPU 0: {GPU_NAME} (UUID: {gpu_uuid(node_name)})\n")
        return 0
    term.out(nvidia_smi_table())
    return 0


def nvidia_ctk(args: list[str], process: Process, term: Terminal) -> int:
    if args[:1] in (["--version"], ["-v"]):
        term.out(
            f"NVIDIA Container Toolkit CLI version {TOOLKIT_VERSION}\ncommit: {TOOLKIT_COMMIT}\n"
        )
        return 0
    term.err(f"nvidia-ctk {' '.join(args)}: {NOT_MODELLED} this; only --version\n")
    return 1


def ldd(args: list[str], process: Process, term: Terminal) -> int:
    if args[:1] != ["--version"]:
        term.err(f"ldd: {NOT_MODELLED} the libraries of binaries; only --version\n")
        return 1
    if not process.amazon_linux:
        image = process.container.get("image", "")
        term.err(f"ldd: {NOT_MODELLED} the C library of image {image}\n")
        return 1
    version, year = node_os.glibc(process.node)
    term.out(
        f"ldd (GNU libc) {version}\n"
        f"Copyright (C) {year} Free Software Foundation, Inc.\n"
        "This is free software; see the source for copying conditions.  There is NO\n"
        "warranty; not even for MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.\n"
        "Written by Roland McGrath and Ulrich Drepper.\n"
    )
    return 0


def _lookup(path: str, process: Process) -> tuple[str | None, list[host_files.Entry] | None]:
    """(host path, its listing when it is a known directory) for a path the process names;
    (None, its listing) for a directory of the container's own layer."""
    host = process.host_path(path)
    if host is None:
        local = layer_path(process, path)
        return None, container_files.listing(local) if local and local.is_dir() else None
    return host, host_files.listing(process.store, process.node, host)


def _entry(host: str, process: Process) -> host_files.Entry | None:
    parent = host_files.known_parent(host)
    if parent is None:
        return None
    name = posixpath.basename(host)
    entries = host_files.listing(process.store, process.node, parent) or []
    return next((e for e in entries if e.name == name and e.name not in (".", "..")), None)


def cat(args: list[str], process: Process, term: Terminal) -> int:
    code = 0
    for path in args:
        host, entries = _lookup(path, process)
        local = layer_path(process, path)
        if local is not None and local.is_file():
            term.out_bytes(local.read_bytes())
        elif local is not None:
            reason = "Is a directory" if local.is_dir() else "No such file or directory"
            term.err(f"cat: {path}: {reason}\n")
            code = 1
        elif entries is not None:
            term.err(f"cat: {path}: Is a directory\n")
            code = 1
        elif host is not None and host_files.known_parent(host):
            entry = _entry(host, process)
            if entry is None or entry.content is None:
                term.err(f"cat: {path}: No such file or directory\n")
                code = 1
            else:
                term.out(entry.content)
        else:
            term.err(f"cat: {path}: {NOT_MODELLED} this file\n")
            code = 1
    return code


def _ls_long(entries: list[host_files.Entry]) -> str:
    links = max(len(str(e.links)) for e in entries)
    size = max(len(str(e.size)) for e in entries)
    lines = [f"total {sum(e.blocks for e in entries)}"]
    for e in entries:
        stamp = e.mtime.strftime("%b %e %H:%M")
        lines.append(f"{e.mode} {e.links:>{links}} root root {e.size:>{size}} {stamp} {e.name}")
    return "\n".join(lines) + "\n"


def ls(args: list[str], process: Process, term: Terminal) -> int:
    flags = "".join(a[1:] for a in args if a.startswith("-") and len(a) > 1)
    paths = [a for a in args if not a.startswith("-") or a == "-"] or ["."]
    code = 0
    for path in paths:
        host, entries = _lookup(path, process)
        if entries is None:
            file = _entry(host, process) if host else None
            if host is not None and host_files.known_parent(host) and file is None:
                term.err(f"ls: cannot access '{path}': No such file or directory\n")
                code = 2
                continue
            if file is not None:
                term.out(_ls_long([file]).split("\n", 1)[1] if "l" in flags else f"{path}\n")
                continue
            term.err(f"ls: cannot open directory '{path}': {NOT_MODELLED} this directory\n")
            code = 2
            continue
        dots, rest = entries[:2], sorted(entries[2:], key=lambda e: e.name.encode())
        shown = [*dots, *rest] if "a" in flags else rest
        if len(paths) > 1:
            term.out(f"{path}:\n")
        if "l" in flags:
            term.out(_ls_long(shown))
        elif shown:
            term.out(("  " if term.tty else "\n").join(e.name for e in shown) + "\n")
    return code


def test(args: list[str], process: Process, term: Terminal) -> int:
    """`test -d|-f|-e PATH`: what `kubectl cp` asks before copying into a directory."""
    kinds = {"-d": {"dir"}, "-f": {"file"}, "-e": {"dir", "file"}}
    if len(args) != 2 or args[0] not in kinds:
        term.err(f"test: {NOT_MODELLED} this expression; only -d, -f or -e PATH\n")
        return 2
    return 0 if _file_kind(args[1], process) in kinds[args[0]] else 1


def _file_kind(path: str, process: Process) -> str | None:
    local = layer_path(process, path)
    if local is not None:
        return "dir" if local.is_dir() else "file" if local.exists() else None
    host, entries = _lookup(path, process)
    if entries is not None:
        return "dir"
    return "file" if host is not None and _entry(host, process) is not None else None


def echo(args: list[str], process: Process, term: Terminal) -> int:
    newline = args[:1] != ["-n"]
    term.out(" ".join(args if newline else args[1:]) + ("\n" if newline else ""))
    return 0


def env(args: list[str], process: Process, term: Terminal) -> int:
    values = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    values |= {"HOSTNAME": _hostname(process), **process.container_env(), "HOME": "/root"}
    term.out("".join(f"{key}={value}\n" for key, value in values.items()))
    return 0


def _hostname(process: Process) -> str:
    if process.pod["spec"].get("hostNetwork"):
        return process.node["metadata"]["name"]
    return process.pod["metadata"]["name"]


def hostname(args: list[str], process: Process, term: Terminal) -> int:
    term.out(_hostname(process) + "\n")
    return 0


# --- the device plugin's config-manager --------------------------------------------------
# NVIDIA/k8s-device-plugin cmd/config-manager/main.go at v0.17.4 (the device plugin the GPU
# Operator v25.3.4 chart runs: its values.yaml devicePlugin.version), flags from the env the
# operator renders. Each line below names the source line that logs it; klog writes to
# stderr, `Lmmdd hh:mm:ss.uuuuuu <pid, 7 wide> file:line] message`.
CONFIG_LABEL = "nvidia.com/device-plugin.config"  # main.go:49 DefaultConfigLabel
# client-go v0.31.3 (v0.17.4's go.mod) tools/clientcmd/client_config.go:659, KUBECONFIG="".
IN_CLUSTER_WARNING = (
    "Neither --kubeconfig nor --master was specified.  Using the inClusterConfig.  "
    "This might not work."
)


def klog(term: Terminal, severity: str, where: str, message: str) -> None:
    """One klog line, `Lmmdd hh:mm:ss.uuuuuu <pid> file:line] message`, on the stream klog
    writes to (stderr)."""
    stamp = time.strftime("%m%d %H:%M:%S", time.gmtime())
    micros = f"{time.time() % 1:.6f}"[2:]
    term.err(f"{severity}{stamp}.{micros}       1 {where}] {message}\n")


def go_duration(seconds: float) -> str:
    """Seconds as Go's time.Duration prints them: 10s, 1m20s, 5m0s."""
    whole = int(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def _config_names(process: Process, srcdir: str) -> list[str] | None:
    """The keys of the ConfigMap mounted at `srcdir` (the files os.ReadDir lists there, `..`
    entries excluded: main.go:473-488), read through the API as the kubelet mounts it; None
    when no ConfigMap is mounted there."""
    mount = next(
        (m for m in process.container.get("volumeMounts") or []
         if m.get("mountPath", "").rstrip("/") == srcdir.rstrip("/")),
        None,
    )  # fmt: skip
    volumes = {v.get("name"): v for v in process.pod["spec"].get("volumes") or []}
    source = (volumes.get((mount or {}).get("name")) or {}).get("configMap") or {}
    if not source.get("name"):
        return None
    namespace = process.pod["metadata"].get("namespace", "default")
    try:
        found = process.store.get(CONFIG_MAPS, source["name"], namespace)
    except NotFound:
        return None
    return sorted(k for k in found.get("data") or {} if not k.startswith(".."))


def config_manager(args: list[str], process: Process, term: Terminal) -> int:
    """config-manager with ONESHOT=true (the init container): pick the config the node's label
    names (or the default, or the fallbacks) among the mounted ConfigMap's keys; exit 1 with
    `specified config X does not exist` (main.go:353) when the map lacks it."""
    code = _config_manager(process, term)
    return 0 if code is None else code


def config_manager_daemon(args: list[str], process: Process, term: Terminal) -> int | None:
    """config-manager with ONESHOT=false (the sidecar): the same choice, then it waits for the
    label to change (None: it keeps running)."""
    return _config_manager(process, term)


def _config_manager(process: Process, term: Terminal) -> int | None:
    env = process.container_env()
    label = env.get("NODE_LABEL") or CONFIG_LABEL
    oneshot = env.get("ONESHOT", "false").lower() == "true"
    if not env.get("KUBECONFIG"):
        klog(term, "W", "client_config.go:659", IN_CLUSTER_WARNING)
    klog(term, "I", "main.go:246", f"Waiting for change to '{label}' label")
    node = process.store.get(NODES, env.get("NODE_NAME") or process.node["metadata"]["name"])
    chosen = (node["metadata"].get("labels") or {}).get(label, "")
    klog(term, "I", "main.go:248", f"Label change detected: {label}={chosen}")
    names = _config_names(process, env.get("CONFIG_FILE_SRCDIR", ""))
    if names is None:
        term.err(f"config-manager: {NOT_MODELLED} a config directory without its ConfigMap\n")
        return 1
    config, error = _choose_config(chosen, names, env, term)
    if error:
        klog(term, "E", "main.go:208", error)  # klog.Error(err) before os.Exit(1)
        return 1
    if config:
        klog(term, "I", "main.go:304", f"Updating to config: {config}")
    else:
        klog(term, "I", "main.go:302", "Updating to empty config")
    if not oneshot:  # the init container made the same symlink moments before
        klog(term, "I", "main.go:312", "Already configured. Skipping update...")
        klog(term, "I", "main.go:246", f"Waiting for change to '{label}' label")
        return None
    if config:
        klog(term, "I", "main.go:319", f"Successfully updated to config: {config}")
    else:
        klog(term, "I", "main.go:317", "Successfully updated to empty config")
    return 0


def _choose_config(
    config: str, names: list[str], env: dict[str, str], term: Terminal
) -> tuple[str, str]:
    """updateConfigName (main.go:334-392): (the config, "") or ("", the error)."""
    if not names:
        return "", "no configuration files available"  # main.go:342
    if config:
        if config not in names:
            return "", f"specified config {config} does not exist"  # main.go:353
        return config, ""
    default = env.get("DEFAULT_CONFIG", "")
    if default:
        klog(term, "I", "main.go:360", f"No value set. Selecting default name: {default}")
        # main.go:362 formats the empty label value, not the default: two spaces.
        return (default, "") if default in names else ("", "specified config  does not exist")
    strategies = [s for s in env.get("FALLBACK_STRATEGIES", "").split(",") if s]
    klog(term, "I", "main.go:368", "No value set and no default set. Attempting fallback "
          f"strategies: [{' '.join(strategies)}]")  # fmt: skip
    for fallback in strategies:
        if fallback == "named":
            klog(term, "I", "main.go:372", "Attempting to find config named: default")
            if "default" in names:
                return "default", ""
            klog(term, "I", "main.go:376", "No configuration named 'default' was found")
        elif fallback == "single":
            klog(term, "I", "main.go:378", "Attempting to see if only a single config is "
                  "available...")  # fmt: skip
            if len(names) == 1:
                return names[0], ""
            klog(term, "I", "main.go:382", f"More than one configuration was found: "
                  f"[{' '.join(names)}]")  # fmt: skip
        elif fallback == "empty":
            klog(term, "I", "main.go:384", "Falling back to an empty configuration")
            return "", ""
        else:
            return "", f"unknown fallback strategy: {fallback}"  # main.go:387
    return "", "no config was set, no default was provided, and all fallbacks failed"


def sleep(args: list[str], process: Process, term: Terminal) -> int:
    """`sleep N` or `sleep infinity`: at once in the model, for real in a real container (until
    the time is up or the runtime stops it)."""
    if not process.real_time:
        return 0
    if args == ["infinity"]:
        signal.pause()  # SIGTERM's default action ends the process, as it ends a real one
        return 0
    try:
        seconds = sum(float(word.rstrip("s")) for word in args)
    except ValueError:
        term.err(f"sleep: invalid time interval '{' '.join(args)}'\n")
        return 1
    time.sleep(seconds)
    return 0


def _exit_with(code: int) -> Program:
    return lambda args, process, term: code


PROGRAMS: dict[str, Program] = {
    "sh": lambda args, process, term: shell(args, process, term, "sh"),
    "bash": lambda args, process, term: shell(args, process, term, "bash"),
    "chroot": chroot,
    "nvidia-smi": nvidia_smi,
    "nvidia-ctk": nvidia_ctk,
    "ldd": ldd,
    "ls": ls,
    "cat": cat,
    "echo": echo,
    "env": env,
    "hostname": hostname,
    "true": _exit_with(0),
    "false": _exit_with(1),
    "sleep": sleep,
    "tar": tar,
    "test": test,
    "config-manager": config_manager,
}
# Init programs that run for a while, stepped by the kubelet (`start_init`).
LONG_PROGRAMS: dict[str, Callable[[Process, Terminal], Run]] = {
    "nvidia-validator": nvidia_validator,
}
# Long-running programs a restartPolicy Always container starts: an exit code when the
# process ends, None while it keeps running (`run_daemon`).
DAEMONS: dict[str, Callable[[list[str], Process, Terminal], int | None]] = {
    "config-manager": config_manager_daemon,
}
