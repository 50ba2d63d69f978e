"""Real-kubelet nodes: seconds from start to Ready, and each node's idle CPU and memory.

Run: `.venv/bin/python benchmarks/kubelet_node.py [--nodes 3] [--idle 30]` as root. It starts
the real control plane, then `--nodes` nodes (`labs.sim.node.kubelet`: our container runtime
and the kubelet) at once, prints the seconds until each is Ready, then the kubelet's and the
runtime's CPU over `--idle` seconds as a percentage of one core and their resident memory (the
kubelet's binary pages are shared between nodes, so its RSS overstates what a node adds).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.controlplane import cpu_seconds, resident_mib  # noqa: E402
from labs.kube.api import KubeApi  # noqa: E402
from labs.kube.gpu import is_ready  # noqa: E402
from labs.kube.resources import NODES, NotFound  # noqa: E402
from labs.sim.controlplane.run import ControlPlane  # noqa: E402
from labs.sim.node import container_process  # noqa: E402
from labs.sim.node.images import write_catalogue  # noqa: E402
from labs.sim.node.kubelet import KubeletNode, NodeSpec  # noqa: E402


def children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in found]


def ready(api: KubeApi, name: str) -> bool:
    try:
        return is_ready(api.get(NODES, name))
    except NotFound:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        plane = ControlPlane(Path(scratch) / "plane")
        plane.start(print)
        assert plane.ca is not None
        api = KubeApi(plane.credentials("admin").api_client())
        images = write_catalogue(Path(scratch) / "images.json")
        command = container_process.command(plane.api_url, plane.home / "pki")
        nodes = []
        try:
            for number in range(args.nodes):
                ip = f"192.168.20.{10 + number}"
                spec = NodeSpec(
                    f"ip-192-168-20-{10 + number}.ap-northeast-2.compute.internal",
                    ip,
                    f"192.168.{32 + number}.0/24",
                    "g5.xlarge",
                    f"aws:///ap-northeast-2a/i-0{number:016x}",
                )
                nodes.append(
                    KubeletNode(
                        Path(scratch) / "nodes" / ip, spec, plane.ca, plane.api_url, command, images
                    )
                )
            started = time.monotonic()
            for node in nodes:
                node.start()
            waiting = {node.spec.name for node in nodes}
            while waiting and time.monotonic() - started < 120:
                for name in sorted(waiting):
                    if ready(api, name):
                        print(f"{name}: Ready {time.monotonic() - started:.1f} s after start")
                        waiting.discard(name)
                time.sleep(0.2)
            time.sleep(5)
            pids = {}
            for node in nodes:
                assert node.pid is not None
                pids[f"{node.spec.ip} runtime"] = node.pid
                for child in children(node.pid):
                    pids[f"{node.spec.ip} kubelet"] = child
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            time.sleep(args.idle)
            for name, pid in pids.items():
                share = 100 * (cpu_seconds(pid) - before[name]) / args.idle
                memory = resident_mib(pid)
                print(f"{name}: idle CPU {share:.1f} % of a core, resident {memory:.0f} MiB")
            total = sum(cpu_seconds(pid) - before[name] for name, pid in pids.items())
            print(
                f"{len(nodes)} nodes: idle CPU {100 * total / args.idle:.1f} % of a core, "
                f"{sum(resident_mib(pid) for pid in pids.values()):.0f} MiB resident"
            )
        finally:
            for node in nodes:
                node.stop()
            plane.stop()


if __name__ == "__main__":
    main()
