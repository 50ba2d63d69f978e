"""How late the engine notices a fault, compared with the write-up's 10-second polling loop.

Run: .venv/bin/python benchmarks/detection.py [--runs 5] [--speed 60]

On a rehearsal world in this process it runs device-plugin-off `--runs` times and, for
each run, compares the moment a watch of its own on the real API server saw the
device-plugin DaemonSet deleted with the moment the engine recorded the symptom (its
watch-fed check). A polling loop
(`sleep 10; kubectl get ds ...`) sees a change on its next tick: on average half an
interval late (5 s), at worst a whole one (10 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from scenario_support import ready_sim_lab  # noqa: E402

from labs.kube.gpu import DEVICE_PLUGIN_DAEMONSET  # noqa: E402
from labs.run.engine import run_scenario  # noqa: E402
from labs.sim.controlplane.resources import DAEMONSETS  # noqa: E402
from scenarios.device_plugin_off import SCENARIO  # noqa: E402

POLL_INTERVAL = 10.0
SYMPTOM = "device-plugin DaemonSet deleted (NotFound, not scaled to 0)"


def record_deletions(store, deleted_at: list[float], stop: threading.Event) -> None:
    """Wall-clock time of every device-plugin DaemonSet deletion, as the API server reports it."""
    with closing(store.watch(DAEMONSETS)) as stream:
        while not stop.is_set():
            event = stream.next(timeout=0.2)
            if event and event[0] == "DELETED":
                if event[1]["metadata"]["name"] == DEVICE_PLUGIN_DAEMONSET:
                    deleted_at.append(time.time())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--speed", type=float, default=60.0)
    args = parser.parse_args()

    delays: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, ready_sim_lab(Path(tmp), args.speed) as ready:
        deleted_at: list[float] = []
        stop = threading.Event()
        watcher = threading.Thread(
            target=record_deletions, args=(ready.world.store, deleted_at, stop), daemon=True
        )
        watcher.start()
        for run in range(args.runs):
            result = run_scenario(ready.lab, SCENARIO, out=lambda _line: None)
            report = json.loads((result.report_dir / "report.json").read_text())
            seen = next(c for c in report["checks"] if c["name"] == SYMPTOM)
            if not result.ok or seen["wall_time"] is None or len(deleted_at) <= run:
                print(f"run {run + 1}: not usable ({result.failed_checks or result.error})")
                continue
            delays.append(seen["wall_time"] - deleted_at[run])
        stop.set()
        watcher.join()

    if not delays:
        print("no usable runs")
        return 1
    milliseconds = [d * 1000 for d in delays]
    print(f"device-plugin DaemonSet deletion -> engine records it ({len(delays)} runs, "
          f"rehearsal at {args.speed:g}x)")  # fmt: skip
    print(f"  watch-fed engine:  mean {statistics.mean(milliseconds):7.1f} ms   "
          f"max {max(milliseconds):7.1f} ms")  # fmt: skip
    print(f"  {POLL_INTERVAL:g} s polling loop: mean {POLL_INTERVAL / 2 * 1000:7.1f} ms   "
          f"max {POLL_INTERVAL * 1000:7.1f} ms  (a change waits for the next tick)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
