"""What the world's containers print, kept where a kubelet keeps it: one file per container.

The files use the CRI log format the kubelet reads (`<RFC3339Nano> stdout F <line>`), so the
node endpoint serves `kubectl logs` (with `--timestamps`, `--since`, `--tail`, `-f`) from them
as a kubelet serves /var/log/pods. Layout: `<root>/<namespace>_<pod>/<container>.log`.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path


class ContainerLogs:
    """Appends container output to its log file; removes a pod's logs when it is gone."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, namespace: str, pod: str, container: str) -> Path:
        return self.root / f"{namespace}_{pod}" / f"{container}.log"

    def rootfs(self, namespace: str, pod: str, container: str) -> Path:
        """The container's own files (`labs.sim.node.container_files`), kept with its logs so
        that they start empty with a new pod of the name and go when the pod goes."""
        return self.root / f"{namespace}_{pod}" / f"{container}.rootfs"

    def append(
        self, pod: dict, text: str, container: str | None = None, stream: str = "stdout"
    ) -> None:
        """Add `text` (whole lines) to `container`'s log, the pod's first container by default."""
        if not text:
            return
        meta = pod["metadata"]
        name = container or (pod["spec"].get("containers") or [{"name": "main"}])[0]["name"]
        target = self.path(meta["namespace"], meta["name"], name)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._write(target, text, stream)

    @staticmethod
    def _write(target: Path, text: str, stream: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with target.open("a", encoding="utf-8") as log:
            log.writelines(f"{stamp} {stream} F {line}\n" for line in text.splitlines())

    def previous(self, namespace: str, pod: str, container: str) -> Path:
        """The log of the container's last ended run (`kubectl logs --previous`)."""
        return self.root / f"{namespace}_{pod}" / f"{container}.previous.log"

    def ended(self, pod: dict, container: str) -> None:
        """The container's run ended: its log is now also the last ended run's, what
        `--previous` shows (and, while it waits in back-off, what `kubectl logs` shows)."""
        meta = pod["metadata"]
        current = self.path(meta["namespace"], meta["name"], container)
        if current.exists():
            previous = self.previous(meta["namespace"], meta["name"], container)
            shutil.copyfile(current, previous.with_suffix(".new"))
            os.replace(previous.with_suffix(".new"), previous)

    def restarted(self, pod: dict, container: str, text: str, stream: str = "stdout") -> None:
        """A new run of the container printed `text`: its log holds only that, as the kubelet's
        next `<restartCount>.log` (swapped in whole, so no reader sees it empty); the ended
        run's stays for `--previous`."""
        meta = pod["metadata"]
        current = self.path(meta["namespace"], meta["name"], container)
        current.parent.mkdir(parents=True, exist_ok=True)
        fresh = current.with_suffix(".new")
        fresh.write_text("", encoding="utf-8")
        self._write(fresh, text, stream)
        os.replace(fresh, current)

    def start(self, pod: dict) -> None:
        """An admitted pod's containers (init containers too) have log files, empty until they
        print. A new pod may reuse a gone one's name (the API server removes finished pods
        unseen by any kubelet): its logs start empty, as under a new /var/log/pods/<uid>."""
        meta = pod["metadata"]
        self.forget(meta["namespace"], meta["name"])
        spec = pod["spec"]
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            target = self.path(meta["namespace"], meta["name"], container["name"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()

    def forget(self, namespace: str, pod: str) -> None:
        """A deleted pod's logs go with it, as the kubelet removes them."""
        shutil.rmtree(self.root / f"{namespace}_{pod}", ignore_errors=True)
