"""CPU use of an idle rehearsal process: a lab brought up with 2 GPU nodes, then left alone.

Run: `.venv/bin/python benchmarks/idle_cpu.py [--seconds 10] [--settle 3]`. It brings a
rehearsal lab up through `invoke lab.up --sim` in a temporary state directory, waits
`--settle` seconds, reads the process's user+system CPU time from /proc over `--seconds`,
prints it as a percentage of one core (target: under 2 %), and destroys the lab.
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

ROOT = Path(__file__).resolve().parents[1]
INVOKE = str(Path(sys.executable).parent / "invoke")
LAB = "idle"


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds the process has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def invoke(env: dict[str, str], *args: str) -> None:
    result = subprocess.run(
        [INVOKE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    if result.returncode:
        raise SystemExit(f"invoke {' '.join(args)} failed:\n{result.stdout}{result.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--settle", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("INVOKE_", "AWS_"))}
        env |= {"INVOKE_LAB_STATE_DIR": state_dir, "INVOKE_LAB_SPEED": "60"}
        invoke(env, "lab.up", "--sim", "--lab", LAB)
        try:
            endpoints = Path(state_dir, LAB, "sim", "endpoints.json").read_text()
            pid = int(json.loads(endpoints)["pid"])
            time.sleep(args.settle)
            before, started = cpu_seconds(pid), time.monotonic()
            time.sleep(args.seconds)
            used, elapsed = cpu_seconds(pid) - before, time.monotonic() - started
        finally:
            invoke(env, "lab.down", "--lab", LAB, "--destroy", "--yes")
    print(f"idle rehearsal process (2 GPU nodes, operator ready, speed 60), {elapsed:.1f} s:")
    print(f"  CPU {used:.2f} s = {100 * used / elapsed:.1f} % of one core (target < 2 %)")


if __name__ == "__main__":
    main()
