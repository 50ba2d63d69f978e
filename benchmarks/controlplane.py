"""The real control plane: build time, start time, idle CPU and resident memory.

Run: `.venv/bin/python benchmarks/controlplane.py [--cold] [--idle 30]`. `--cold` builds into
an empty binary cache and empty Go caches (the first run on a fresh machine: expect about 15
minutes on 2 idle cores); without it the build is the warm check (binaries already cached). Then it
starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler, prints the seconds
until the API server is ready, the four processes' CPU over `--idle` seconds as a percentage
of one core, and their resident memory, and stops them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labs.sim.controlplane import build  # noqa: E402
from labs.sim.controlplane.run import ControlPlane  # noqa: E402


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed_build(cold: bool, scratch: Path) -> float:
    if cold:
        os.environ[build.CACHE_ENV] = str(scratch / "cache")
        os.environ["GOMODCACHE"] = str(scratch / "gomod")
        os.environ["GOCACHE"] = str(scratch / "gobuild")
    started = time.monotonic()
    build.binaries(print)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        built = timed_build(args.cold, Path(scratch))
        print(f"build ({'cold' if args.cold else 'warm'}): {built:.1f} s")
        plane = ControlPlane(Path(scratch) / "plane")
        started = time.monotonic()
        plane.start(print)
        print(f"start until /readyz: {time.monotonic() - started:.1f} s")
        try:
            time.sleep(5)  # the controllers' first sync
            before = {name: cpu_seconds(pid) for name, pid in plane.pids.items()}
            time.sleep(args.idle)
            for name, pid in plane.pids.items():
                share = 100 * (cpu_seconds(pid) - before[name]) / args.idle
                memory_mib = resident_mib(pid)
                print(f"{name}: idle CPU {share:.1f} % of a core, resident {memory_mib:.0f} MiB")
            total = sum(cpu_seconds(pid) - before[name] for name, pid in plane.pids.items())
            memory = sum(resident_mib(pid) for pid in plane.pids.values())
            print(f"all four: idle CPU {100 * total / args.idle:.1f} % of a core, {memory:.0f} MiB")
        finally:
            plane.stop()


if __name__ == "__main__":
    main()
