"""What monitoring costs a rehearsal lab: the extra memory and idle CPU of Prometheus and
kube-state-metrics, and of the whole lab with them (the API server's watches, the scrapes
through the node endpoint, the exporters' pages).

Run: `.venv/bin/python benchmarks/monitoring.py [--seconds 30] [--settle 10]`. It brings a
rehearsal lab up with `invoke lab.up --sim` (speed 60) in a temporary state directory, reads
the lab's idle CPU and resident memory over `--seconds`, then turns monitoring on with
`invoke lab.up --monitoring`, waits `--settle` seconds, reads them again, and destroys the lab.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from rehearsal import Usage, invoke, program, resident_mib, tree_usage

LAB = "monitored"
PROGRAMS = ("prometheus", "kube-state-metrics")


def idle(world: int, seconds: float) -> tuple[Usage, float]:
    """What the lab uses over `seconds`, and its resident MiB at the end."""
    usage = tree_usage(world, seconds)
    return usage, resident_mib(usage.pids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("INVOKE_", "AWS_"))}
        env |= {"INVOKE_LAB_STATE_DIR": state_dir, "INVOKE_LAB_SPEED": "60"}
        invoke(env, "lab.up", "--sim", "--lab", LAB)
        try:
            endpoints = Path(state_dir, LAB, "sim", "endpoints.json").read_text()
            world = int(json.loads(endpoints)["pid"])
            time.sleep(args.settle)
            plain = idle(world, args.seconds)
            on = invoke(env, "lab.up", "--lab", LAB, "--monitoring")
            time.sleep(args.settle)
            monitored = idle(world, args.seconds)
            # named as tree_usage names them, so their CPU below is theirs
            watched = [pid for pid in monitored[0].pids if program(pid) in PROGRAMS]
            if len(watched) != len(PROGRAMS):
                raise SystemExit(f"expected {PROGRAMS} under the lab's process, found {watched}")
            own_seconds = sum(monitored[0].by_program.get(name, 0.0) for name in PROGRAMS)
            own_cpu = 100 * own_seconds / monitored[0].elapsed
            own_memory = resident_mib(watched)
        finally:
            invoke(env, "lab.down", "--lab", LAB, "--destroy", "--yes")
    print(f"lab.up --monitoring on a running rehearsal lab (speed 60): {on:.1f} s")
    print(f"idle lab without monitoring: CPU {plain[0].share:.1f} % of one core, "
          f"{plain[1]:.0f} MiB")  # fmt: skip
    print(f"idle lab with monitoring:    CPU {monitored[0].share:.1f} % of one core, "
          f"{monitored[1]:.0f} MiB")  # fmt: skip
    print(f"  extra: CPU {monitored[0].share - plain[0].share:+.1f} % of one core, "
          f"{monitored[1] - plain[1]:+.0f} MiB")  # fmt: skip
    print(f"  of which Prometheus and kube-state-metrics themselves: CPU {own_cpu:.1f} % of one "
          f"core, {own_memory:.0f} MiB (they scrape and evaluate every second)")  # fmt: skip


if __name__ == "__main__":
    main()
