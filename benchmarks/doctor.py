"""How long `lab.doctor` takes on a rehearsal lab (target: under 5 s), healthy and with a fault.

Run: `.venv/bin/python benchmarks/doctor.py [--runs 5]`. On a ready rehearsal world in this
process it times the doctor in-process (read, checks, log tails, AWS rules) `--runs` times on
the healthy lab and with device-plugin-off injected, then the whole `invoke lab.doctor`
command once each way (a fresh Python process: imports included, what a user waits for).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from lab_support import invoke_env, run_invoke  # noqa: E402
from scenario_support import quiet, ready_sim_lab, wait_ready  # noqa: E402

import scenarios  # noqa: E402
from labs.doctor.run import doctor  # noqa: E402
from labs.lab import Lab  # noqa: E402
from labs.run.engine import inject_scenario, revert_scenarios  # noqa: E402

TARGET_SECONDS = 5.0


def in_process(lab: Lab, runs: int) -> tuple[list[float], str]:
    """Wall seconds of each in-process run, and the last run's verdict."""
    seconds, verdict = [], ""
    for _ in range(runs):
        started = time.monotonic()
        report = doctor(lambda: Lab.open(lab.settings))
        seconds.append(time.monotonic() - started)
        cause = report.probable_cause
        verdict = f"exit {report.exit_code}, probable cause {cause.name if cause else '-'}"
    return seconds, verdict


def command(lab: Lab) -> tuple[float, int]:
    """Wall seconds and exit code of `invoke lab.doctor --lab L` in a new process."""
    started = time.monotonic()
    result: subprocess.CompletedProcess[str] = run_invoke(
        "lab.doctor", "--lab", lab.name, env=invoke_env(lab.settings.state_dir)
    )
    return time.monotonic() - started, result.returncode


def report(title: str, seconds: list[float], verdict: str, whole: tuple[float, int]) -> None:
    print(f"{title}: {verdict}")
    print(
        f"  in-process ({len(seconds)} runs): median {statistics.median(seconds):.3f} s, "
        f"max {max(seconds):.3f} s"
    )
    mark = "ok" if whole[0] < TARGET_SECONDS else f"OVER the {TARGET_SECONDS:g} s target"
    print(f"  invoke lab.doctor (exit {whole[1]}): {whole[0]:.2f} s ({mark})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ready_sim_lab(Path(tmp)) as ready:
        lab = ready.lab
        healthy = in_process(lab, args.runs)
        report("healthy lab", *healthy, command(lab))
        inject_scenario(lab, scenarios.get("device-plugin-off"), out=quiet)
        try:
            faulty = in_process(lab, args.runs)
            report("device-plugin-off injected", *faulty, command(lab))
        finally:
            revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet)
            wait_ready(lab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
