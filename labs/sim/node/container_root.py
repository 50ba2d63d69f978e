"""A real program in a root of its own: its container's mounts where the pod's spec puts them.

Real programs (Node Feature Discovery, the GPU Operator) read fixed paths: the ServiceAccount
under `/var/run/secrets/kubernetes.io/serviceaccount`, the node's `/host-sys`, the operator's
`/opt/gpu-operator`. None of them may be the user's machine's, so each program runs in a user
and mount namespace of its own (`unshare`, Linux with user namespaces), with what it needs bound
into a directory of the lab's, then `chroot` into it: what a container runtime does. Nothing
outside the namespaces sees those mounts, and they go with the process.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from labs.sim.controlplane.run import ControlPlaneError

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# `unshare`'s flags for a user namespace whose root is this user.
USER_NAMESPACE = ("--user", "--map-root-user")
# Where a root's program is: the image's entrypoint, bound from the lab's build.
PROGRAM_DIR = "/usr/local/bin"


@dataclass(frozen=True)
class Bind:
    """`source` on this host, at `target` inside the root."""

    source: Path
    target: str
    read_only: bool = False


def lay_out(root: Path, files: Mapping[str, str] = {}) -> None:
    """A fresh root under `root`: `files` written at their paths, an empty /tmp and a mount
    point for /proc (`command` makes the binds' mount points)."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "tmp").mkdir(parents=True)
    (root / "proc").mkdir()
    for path, text in files.items():
        target = inside(root, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def inside(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def command(root: Path, binds: Iterable[Bind], argv: list[str], writable: Path) -> list[str]:
    """The command that binds each of `binds` into `root` in namespaces of its own and runs
    `argv` (its program a path inside the root) there. Shallower targets are bound first, each
    mount point made just before its bind (inside an earlier one where it nests: a ConfigMap's
    directory holding a hostPath's, as runc makes them, but only where that one's files are
    under `writable`), and read-only ones remounted so after all are in place."""
    mount = tool("mount")
    ordered = sorted(binds, key=lambda b: len(Path(b.target).parts))
    _check_mount_points(ordered, writable)
    lines = ["set -e"]
    for bind in ordered:
        target = shlex.quote(str(inside(root, bind.target)))
        if bind.source.is_dir():
            lines.append(f"mkdir -p {target}")
        else:
            lines.append(f'mkdir -p "$(dirname {target})" && : >> {target}')
        lines.append(f"{mount} --bind {shlex.quote(str(bind.source))} {target}")
    for bind in ordered:
        if bind.read_only:
            target = shlex.quote(str(inside(root, bind.target)))
            lines.append(f"{mount} -o remount,bind,ro {target}")
    # /proc as a container has it, read-only (NFD reads the kernel's release and modules there)
    proc = shlex.quote(str(inside(root, "/proc")))
    lines += [f"{mount} --rbind /proc {proc}", f"{mount} -o remount,bind,ro {proc}"]
    lines.append(f'exec {tool("chroot")} {shlex.quote(str(root))} "$@"')
    return [
        tool("unshare"), *USER_NAMESPACE, "--mount", "--",
        tool("sh"), "-c", "\n".join(lines), "container", *argv,
    ]  # fmt: skip


def _check_mount_points(ordered: list[Bind], writable: Path) -> None:
    """A mount point nested in an earlier bind is made in that bind's source: refuse where the
    source is not ours to write (a host directory) and lacks it."""
    for number, bind in enumerate(ordered):
        target = Path(bind.target)
        enclosing = [b for b in ordered[:number] if target.is_relative_to(b.target)]
        if not enclosing:
            continue
        outer = max(enclosing, key=lambda b: len(Path(b.target).parts))
        point = outer.source / target.relative_to(outer.target)
        if not point.exists() and not outer.source.resolve().is_relative_to(writable.resolve()):
            raise ControlPlaneError(
                f"the mount at {bind.target} needs its mount point made in {outer.source} (the "
                f"mount at {outer.target}), which is not the node's to write: mount "
                "them apart"
            )


def container_binds(mounts: Iterable[dict], kubelet_root: str | None, copies: Path) -> list[Bind]:
    """A container's mounts (the runtime's CONTAINER_MOUNTS entries) as binds. One that only
    the kubelet's mount namespace has (a ServiceAccount token is a tmpfs the kubelet mounts
    there), seen through `kubelet_root`, is copied into `copies` and bound from there; a token
    copied once stays valid for the lab's life (the API server extends the kubelet's to a year).
    A host path that does not exist is an empty directory, as containerd creates one on a node,
    without touching this host."""
    binds = []
    for number, mount in enumerate(mounts):
        source = Path(mount["host_path"])
        seen = kubelets_view(mount, kubelet_root)
        if seen is not None and _only_the_kubelets(source, seen):
            source = copies / str(number)
            shutil.rmtree(source, ignore_errors=True)
            shutil.copytree(seen, source, symlinks=True)
        elif not source.exists():
            source = copies / str(number)
            source.mkdir(parents=True, exist_ok=True)
        binds.append(Bind(source, mount["container_path"], bool(mount.get("read_only"))))
    return binds


def kubelets_view(mount: dict, kubelet_root: str | None) -> Path | None:
    """A mount's files as the kubelet sees them, through its mount namespace's root
    (`kubelet_root`): at the kubelet's own path for its own files, else at the host's path;
    None where the runtime does not say where that namespace is."""
    if not kubelet_root:
        return None
    return Path(f"{kubelet_root}{mount.get('kubelet_path') or mount['host_path']}")


def _only_the_kubelets(here: Path, seen: Path) -> bool:
    """Something is mounted at `here` in the kubelet's namespace (`seen`) that this host lacks."""
    try:
        return seen.is_dir() and seen.stat().st_dev != here.stat().st_dev
    except OSError:
        return False


def tool(name: str) -> str:
    # chroot lives in sbin, which a user's PATH may lack
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if found is None:
        raise ControlPlaneError(
            f"the rehearsal runs real programs (the GPU Operator, Node Feature Discovery) in a "
            f"root of their own, which needs `{name}` (util-linux) and Linux user namespaces; "
            "install util-linux"
        )
    return found
