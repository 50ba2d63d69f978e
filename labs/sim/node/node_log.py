"""What a rehearsal node's log says of its kubelet: whether it ended without being stopped, and
why. Light to import: `lab.status` reads it on every call."""

from __future__ import annotations

from pathlib import Path

from labs.sim.logs import log_tail

# The node runtime's last line when its kubelet ends (go/controlplane/cmd/node-runtime), and
# the line `KubeletNode.stop` adds after it when the node was stopped on purpose.
KUBELET_ENDED = "the kubelet ended: "
HALTED = "the node was stopped with its instance"
# How much of a node's log is read for the kubelet's last error.
LOG_TAIL_BYTES = 64 * 1024
# A kubelet's fatal errors that this machine's settings cause, and what to do about each.
MACHINE_LIMITS = {
    "inotify_init: too many open files": (
        "every kubelet (and API server) takes inotify instances, and this machine allows "
        "{inotify} per user: stop other labs, or raise it (`sudo sysctl "
        "fs.inotify.max_user_instances=1024`)"
    ),
}


def ended_kubelets(nodes_dir: Path) -> list[str]:
    """Each node under `nodes_dir` whose kubelet ended without being stopped, with its last
    error and log (and what to do where the machine's limits ended it): such a node never
    turns Ready again, and nothing else says why."""
    found = []
    for log in sorted(nodes_dir.glob("*/logs/node.log")):
        lines = log_tail(log, LOG_TAIL_BYTES).splitlines()
        if not lines or KUBELET_ENDED not in lines[-1]:
            continue
        status = lines[-1].split(KUBELET_ENDED, 1)[1]
        errors = [line for line in lines if line.startswith("E")]
        last = errors[-1].split("] ", 1)[-1] if errors else "no error logged"
        said = f"the kubelet of node {log.parents[1].name} ended ({status}): {last}"
        for cause, advice in MACHINE_LIMITS.items():
            if cause in last:
                said += "; " + advice.format(inotify=_read_limit("fs/inotify/max_user_instances"))
        found.append(f"{said}; its log is {log}")
    return found


def _read_limit(name: str) -> str:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return "few"
