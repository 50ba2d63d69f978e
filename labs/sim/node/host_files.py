"""The few files on a node that the debugging path reads, made from the world's state.

- `/var/lib/kubelet/device-plugins/`: `kubelet.sock` and `kubelet_internal_checkpoint`
  always; `nvidia-gpu.sock` while a Ready device-plugin pod serves the node (the plugin
  creates it when it registers with kubelet and removes it when it stops).
- `/run/nvidia/validations/`: the status files of the GPU Operator's validator while its
  pod runs Ready on the node: `driver-ready` (the host-driver facts it writes),
  `toolkit-ready`, `cuda-ready`, and `plugin-ready` only while the device plugin serves
  (the validator runs its plugin check only with the plugin on; its preStop hook removes
  the files when the pod goes).

Listings are what `ls -la` shows on the AL2023 AMI: an XFS root (a short directory's size is
its inline entries, 6 bytes plus 8 plus the name per entry), a tmpfs /run (20 bytes per
entry, `.` and `..` included), SELinux labels (the `.` after the mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from labs.kube import gpu
from labs.kube.api import KubeApi
from labs.kube.resources import PODS
from labs.sim.controllers.placement import pod_ready

DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"
VALIDATIONS_DIR = "/run/nvidia/validations"
PLUGIN_SOCKET = "nvidia-gpu.sock"
CHECKPOINT_SIZE = 660
EMPTY_STATUS_FILES = ("toolkit-ready", "cuda-ready")
# What the validator writes for a driver installed on the host (the NVIDIA AMI's).
HOST_DRIVER_READY = (
    "IS_HOST_DRIVER=true\n"
    "NVIDIA_DRIVER_ROOT=/\n"
    "DRIVER_ROOT_CTR_PATH=/host\n"
    "NVIDIA_DEV_ROOT=/\n"
    "DEV_ROOT_CTR_PATH=/host\n"
)


@dataclass(frozen=True)
class Entry:
    """One directory entry as `ls -la` lists it; `content` for regular files."""

    name: str
    mode: str
    links: int
    size: int
    blocks: int  # 1K blocks, for `total`
    mtime: datetime
    content: str | None = None


def _when(timestamp: str | None) -> datetime:
    if not timestamp:
        return datetime.now(UTC)
    return datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def _serving_since(store: KubeApi, node: dict, app: str) -> datetime | None:
    """When the Ready pod of `app` on the node started, None when there is none."""
    name = node["metadata"]["name"]
    pods = store.list(PODS, label_selector=f"app={app}", field_selector=f"spec.nodeName={name}")[0]
    ready = [p for p in pods if pod_ready(p)]
    return _when(ready[0]["status"].get("startTime")) if ready else None


def _device_plugins(store: KubeApi, node: dict) -> list[Entry]:
    booted = _when(node["metadata"].get("creationTimestamp"))
    files = [
        Entry("kubelet.sock", "srwxr-xr-x.", 1, 0, 0, booted),
        Entry("kubelet_internal_checkpoint", "-rw-------.", 1, CHECKPOINT_SIZE, 4, booted),
    ]
    plugin = _serving_since(store, node, gpu.DEVICE_PLUGIN_DAEMONSET)
    if plugin is not None:
        files.append(Entry(PLUGIN_SOCKET, "srwxr-xr-x.", 1, 0, 0, plugin))
    size = 6 + sum(8 + len(entry.name) for entry in files)
    changed = max(entry.mtime for entry in files)
    return [
        Entry(".", "drwxr-xr-x.", 2, size, 0, changed),
        Entry("..", "drwxr-xr-x.", 10, 16384, 16, booted),
        *files,
    ]


def _validations(store: KubeApi, node: dict) -> list[Entry]:
    booted = _when(node["metadata"].get("creationTimestamp"))
    validator = _serving_since(store, node, gpu.VALIDATOR_DAEMONSET)
    files: list[Entry] = []
    if validator is not None:
        files.append(
            Entry("driver-ready", "-rw-r--r--.", 1, len(HOST_DRIVER_READY), 4, validator,
                  HOST_DRIVER_READY)
        )  # fmt: skip
        files += [Entry(n, "-rw-r--r--.", 1, 0, 0, validator, "") for n in EMPTY_STATUS_FILES]
        plugin = _serving_since(store, node, gpu.DEVICE_PLUGIN_DAEMONSET)
        if plugin is not None:
            files.append(Entry("plugin-ready", "-rw-r--r--.", 1, 0, 0, max(plugin, validator), ""))
    changed = max([booted, *(entry.mtime for entry in files)])
    return [
        Entry(".", "drwxr-xr-x.", 2, 20 * (len(files) + 2), 0, changed),
        Entry("..", "drwxr-xr-x.", 4, 80, 0, booted),
        *files,
    ]


DIRECTORIES = {DEVICE_PLUGINS_DIR: _device_plugins, VALIDATIONS_DIR: _validations}


def listing(store: KubeApi, node: dict, path: str) -> list[Entry] | None:
    """The entries of a host directory the world knows (`.` and `..` first), else None."""
    make = DIRECTORIES.get(path.rstrip("/") or "/")
    return make(store, node) if make is not None else None


def known_parent(path: str) -> str | None:
    """The known directory `path` lies directly in, if any."""
    parent = path.rsplit("/", 1)[0] or "/"
    return parent if parent in DIRECTORIES else None
