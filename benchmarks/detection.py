"""How late the engine notices a fault, compared with the write-up's 10-second polling loop.

Run: .venv/bin/python benchmarks/detection.py [--runs 5] [--speed 60]

On a rehearsal world in this process it runs device-plugin-off `--runs` times and reads,
from each run's report, how long after the injection began (the ClusterPolicy patch; the
operator then deletes the device-plugin DaemonSet) the engine recorded the deletion through
its watch: the operator's reaction and the watch's delay together. A polling loop
(`sleep 10; kubectl get ds ...`) sees a change on its next tick: on average half an interval
late (5 s), at worst a whole one (10 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from scenario_support import ready_sim_lab  # noqa: E402

from labs.run.engine import run_scenario  # noqa: E402
from scenarios.device_plugin_off import SCENARIO  # noqa: E402

POLL_INTERVAL = 10.0
SYMPTOM = "device-plugin DaemonSet deleted (NotFound, not scaled to 0)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--speed", type=float, default=60.0)
    args = parser.parse_args()

    delays: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, ready_sim_lab(Path(tmp), args.speed) as ready:
        for run in range(args.runs):
            result = run_scenario(ready.lab, SCENARIO, out=lambda _line: None)
            report = json.loads((result.report_dir / "report.json").read_text())
            seen = next(c for c in report["checks"] if c["name"] == SYMPTOM)
            if not result.ok or seen["t"] is None:
                print(f"run {run + 1}: not usable ({result.failed_checks or result.error})")
                continue
            delays.append(seen["t"])

    if not delays:
        print("no usable runs")
        return 1
    milliseconds = [d * 1000 for d in delays]
    print(f"injection -> engine records the DaemonSet deleted ({len(delays)} runs, "
          f"rehearsal at {args.speed:g}x)")  # fmt: skip
    print(f"  watch-fed engine:  mean {statistics.mean(milliseconds):7.1f} ms   "
          f"max {max(milliseconds):7.1f} ms")  # fmt: skip
    print(f"  {POLL_INTERVAL:g} s polling loop: mean {POLL_INTERVAL / 2 * 1000:7.1f} ms   "
          f"max {POLL_INTERVAL * 1000:7.1f} ms  (a change waits for the next tick)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
