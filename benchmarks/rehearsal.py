"""A rehearsal lab's figures: lab.up time, idle CPU and memory, and the whole `invoke demo`.

Run: `.venv/bin/python benchmarks/rehearsal.py [--seconds 30] [--settle 3] [--kubelets real]`.
It brings a rehearsal lab up (on the played kubelet, or on real ones) through
`invoke lab.up --sim` in a temporary state directory (timing it),
waits `--settle` seconds, reads the user+system CPU time of the rehearsal process and every
process under it (etcd, the API server, the controllers, the node endpoint) from /proc over
`--seconds`, prints it as a percentage of one core (target: under 10 %) with their resident
memory, and destroys the lab. Then it times `invoke demo` (target: under 60 s warm), which
brings its own lab up, runs device-plugin-off and takes the lab down.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labs.settings import KUBELETS, MODELLED_KUBELETS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INVOKE = str(Path(sys.executable).parent / "invoke")
LAB = "idle"


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree(root: int) -> list[int]:
    """`root` and every process under it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat(int(entry.name))[1])
            except (OSError, IndexError):
                continue
    found, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds these processes have used so far (all their threads)."""
    ticks = sum(int(_stat(pid)[11]) + int(_stat(pid)[12]) for pid in pids)
    return ticks / os.sysconf("SC_CLK_TCK")


def resident_mib(pids: list[int]) -> float:
    pages = sum(int(Path(f"/proc/{pid}/statm").read_text().split()[1]) for pid in pids)
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def invoke(env: dict[str, str], *args: str) -> float:
    """Run one invoke command; its wall seconds."""
    started = time.monotonic()
    result = subprocess.run(
        [INVOKE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    if result.returncode:
        raise SystemExit(f"invoke {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--kubelets", choices=KUBELETS, default=MODELLED_KUBELETS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("INVOKE_", "AWS_"))}
        env |= {"INVOKE_LAB_STATE_DIR": state_dir, "INVOKE_LAB_SPEED": "60",
                "INVOKE_LAB_KUBELETS": args.kubelets}  # fmt: skip
        up = invoke(env, "lab.up", "--sim", "--lab", LAB)
        try:
            endpoints = Path(state_dir, LAB, "sim", "endpoints.json").read_text()
            pids = tree(int(json.loads(endpoints)["pid"]))
            time.sleep(args.settle)
            before, started = cpu_seconds(pids), time.monotonic()
            time.sleep(args.seconds)
            used, elapsed = cpu_seconds(pids) - before, time.monotonic() - started
            memory = resident_mib(pids)
        finally:
            invoke(env, "lab.down", "--lab", LAB, "--destroy", "--yes")
        print(f"kubelets: {args.kubelets}")
        print(f"lab.up --sim (2 GPU nodes, operator ready, speed 60): {up:.1f} s")
        print(f"idle rehearsal, {len(pids)} processes, {elapsed:.1f} s:")
        print(f"  CPU {used:.2f} s = {100 * used / elapsed:.1f} % of one core (target < 10 %)")
        print(f"  resident memory {memory:.0f} MiB", flush=True)
        demo = invoke(env, "demo")  # its monitoring does not run on real kubelets yet
    print(f"invoke demo (up, device-plugin-off run, down): {demo:.1f} s (target < 60 s)")


if __name__ == "__main__":
    main()
