"""How fast `practice.check` answers a wrong fix, and what a study evening's checks cost of the
GPU time limit, on a rehearsal lab.

A wrong fix is told from the lab as it is (no waiting), so a check should answer in a few
seconds, most of them `invoke`'s own start; and the world's fast pace for a check's own work
must not move the lab's clock faster than the wall clock. Prints each check's wall time and the
minutes of the limit the series spent beside the wall minutes it took.
Run: .venv/bin/python benchmarks/practice_check.py [--checks N] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INVOKE = str(Path(sys.executable).parent / "invoke")
LAB = "bench-practice"
LEFT = re.compile(r"^GPU time limit: (?:(\d+)h)?(\d+)m left", re.M)


def invoke(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([INVOKE, *args], cwd=ROOT, env=env, capture_output=True, text=True)


def minutes_left(env: dict[str, str]) -> int:
    status = invoke(env, "lab.status", "--lab", LAB).stdout
    found = LEFT.search(status)
    if found is None:
        raise SystemExit(f"lab.status shows no GPU time limit:\n{status}")
    return int(found.group(1) or 0) * 60 + int(found.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=10)
    parser.add_argument("--scenario", default="device-plugin-off")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-practice-") as state_dir:
        env = {**os.environ, "INVOKE_LAB_STATE_DIR": state_dir, "INVOKE_LAB_SPEED": "60",
               "INVOKE_LAB_TTL": "4h"}  # fmt: skip
        up = invoke(env, "lab.up", "--sim", "--lab", LAB)
        if up.returncode:
            raise SystemExit(f"lab.up failed:\n{up.stdout}{up.stderr}")
        try:
            start = invoke(env, "practice.start", "--lab", LAB, "--scenario", args.scenario,
                           "--who", "bench", "--speed", "1")  # fmt: skip
            if start.returncode:
                raise SystemExit(f"practice.start failed:\n{start.stdout}{start.stderr}")
            before, began, samples = minutes_left(env), time.monotonic(), []
            for _ in range(args.checks):
                started = time.perf_counter()
                check = invoke(env, "practice.check", "--lab", LAB)
                samples.append(time.perf_counter() - started)
                if check.returncode != 1:
                    raise SystemExit(f"a check of no fix did not fail:\n{check.stdout}")
            wall = time.monotonic() - began
            spent = before - minutes_left(env)
            print(f"practice.check of a wrong fix ({args.scenario}, {args.checks} runs): median "
                  f"{statistics.median(samples):.1f} s, max {max(samples):.1f} s")  # fmt: skip
            print(f"GPU time limit spent by them: {spent} min in {wall / 60:.1f} wall minutes")
            invoke(env, "practice.giveup", "--lab", LAB, "--who", "bench")
        finally:
            invoke(env, "lab.down", "--lab", LAB, "--destroy", "--yes")


if __name__ == "__main__":
    main()
