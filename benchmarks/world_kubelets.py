"""A rehearsal world on the played kubelet or on real kubelets: the GPU Operator's path to a
schedulable GPU, and the idle CPU and memory of everything the world runs.

Run: `.venv/bin/python benchmarks/world_kubelets.py [--kubelets real] [--seconds 30]` (real
kubelets need root). It serves a world (`python -m labs.sim serve`) in a temporary directory at
speed 600, scales the GPU node group to 1, installs the GPU Operator's chart with the stack's
values (`helm upgrade --install ... --no-hooks`), and prints the seconds until the system nodes
are Ready and until the GPU node's `nvidia.com/gpu` is allocatable. Then it reads the CPU time
of the world's process and every process under it (the control plane, the kubelets and
runtimes, the containers' processes, the operator) over `--seconds`, and prints it as a
percentage of one core (target: under 10 %) with their resident memory and the `--top`
busiest programs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.rehearsal import print_busiest, resident_mib, tree_usage  # noqa: E402
from labs.kube.api import KubeApi  # noqa: E402
from labs.kube.gpu import GPU_RESOURCE, is_ready  # noqa: E402
from labs.kube.resources import NODES  # noqa: E402
from labs.settings import KUBELETS, MODELLED_KUBELETS, OPERATOR_NAMESPACE  # noqa: E402
from labs.sim.aws.seed import gpu_node_group_name, moto_clients  # noqa: E402
from labs.sim.controlplane.gpu_operator import release  # noqa: E402
from labs.sim.gpu_operator_release import VALUES_FILE, Helm  # noqa: E402
from labs.sim.process import ENDPOINTS  # noqa: E402

CLUSTER = "myeks"


def until(what: str, check: Callable[[], bool], started: float, timeout: float = 600) -> float:
    """Seconds from `started` until `check` holds."""
    while not check():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubelets", choices=KUBELETS, default=MODELLED_KUBELETS)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--top", type=int, default=12, help="how many programs to list")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        state = Path(scratch)
        started = time.monotonic()
        world = subprocess.Popen(
            [sys.executable, "-m", "labs.sim", "serve", "--state-dir", str(state),
             "--speed", "600", "--kubelets", args.kubelets],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            until("the world serves", lambda: (state / ENDPOINTS).exists(), started)
            endpoints = json.loads((state / ENDPOINTS).read_text())
            kubeconfig = yaml.safe_load((state / "kubeconfig").read_text())
            api = KubeApi(config.new_client_from_config(str(state / "kubeconfig")))

            def nodes() -> list[dict]:
                return api.list(NODES)[0]

            system = until(
                "the system nodes turn Ready",
                lambda: len(nodes()) >= 2 and all(is_ready(n) for n in nodes()),
                started,
            )
            moto_clients(endpoints)("eks").update_nodegroup_config(
                clusterName=CLUSTER,
                nodegroupName=gpu_node_group_name(CLUSTER),
                scalingConfig={"minSize": 0, "maxSize": 2, "desiredSize": 1},
            )
            Helm(kubeconfig).run(
                "upgrade", "--install", "gpu-operator", str(release().chart),
                "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
                "--values", str(VALUES_FILE), "--no-hooks",
            )  # fmt: skip
            asked = time.monotonic()
            gpu = until(
                "the GPU is allocatable",
                lambda: any(
                    n["status"].get("allocatable", {}).get(GPU_RESOURCE) == "1" for n in nodes()
                ),
                asked,
            )
            usage = tree_usage(world.pid, args.seconds)
            print(f"kubelets: {args.kubelets}")
            print(f"system nodes Ready: {system:.1f} s after the world started")
            print(f"nvidia.com/gpu allocatable: {gpu:.1f} s after the scale and the install")
            memory, count = resident_mib(usage.pids), len(usage.pids)
            print(f"idle over {usage.elapsed:.0f} s: {usage.share:.1f} % of a core, "
                  f"{memory:.0f} MiB resident in {count} processes")  # fmt: skip
            print_busiest(usage, args.top)
        finally:
            world.terminate()
            world.wait(60)


if __name__ == "__main__":
    main()
