"""How long `invoke --list` and `invoke lab.status` take, beside the bare
`python -c "import invoke"` floor.

The tasks import boto3 and kubernetes lazily; if someone moves those imports to the
top of tasks.py, the gap between the first two figures grows by about half a second.
With `--lab NAME` (a running lab under $INVOKE_LAB_STATE_DIR) it also times `invoke
lab.status` and the status's own requests in a warm process (imports done, clients made),
and prints status / (floor + requests): what a command costs beyond its work, beside what
importing botocore and kubernetes alone adds to that floor.
Run: .venv/bin/python benchmarks/cli_startup.py [--runs N] [--lab NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = "import invoke, botocore.session, kubernetes"


def time_command(command: list[str], runs: int) -> list[float]:
    """Wall-clock seconds of `runs` executions of `command` from the project root."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--lab", help="also time `invoke lab.status --lab LAB` (a running lab)")
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    commands = {
        'python -c "import invoke"': [sys.executable, "-c", "import invoke"],
        "invoke --list": [str(bin_dir / "invoke"), "--list"],
    }
    if args.lab:
        commands["invoke lab.status"] = [str(bin_dir / "invoke"), "lab.status", "--lab", args.lab]
        # The two client libraries lab.status reads through (AWS, Kubernetes), imported only.
        commands["import invoke + libraries"] = [sys.executable, "-c", LIBRARIES]
    print(f"{'command':<28} {'median ms':>10} {'min ms':>8} {'max ms':>8}  ({args.runs} runs)")
    medians = {}
    for label, command in commands.items():
        samples = time_command(command, args.runs)
        medians[label] = statistics.median(samples)
        print(
            f"{label:<28} {medians[label] * 1000:>10.0f} "
            f"{min(samples) * 1000:>8.0f} {max(samples) * 1000:>8.0f}"
        )
    if args.lab:
        requests = statistics.median(warm_status_seconds(args.lab, args.runs))
        print(f"{'lab.status requests (warm)':<28} {requests * 1000:>10.0f}")
        floor = medians['python -c "import invoke"'] + requests
        ratio = medians["invoke lab.status"] / floor
        print(f"lab.status / (import invoke + its requests) = {ratio:.2f}")
        libraries = medians["import invoke + libraries"] + requests
        print(
            f"(import invoke + libraries + requests) / (import invoke + requests) = "
            f"{libraries / floor:.2f}: what importing the clients alone costs"
        )


def warm_status_seconds(lab: str, runs: int) -> list[float]:
    """What lab.status's reads take once everything is imported and its clients exist."""
    from labs.commands import status
    from labs.lab import Lab
    from labs.settings import load_settings

    target = Lab.open(load_settings(flags={"lab": lab}, environ=os.environ))
    status.render(status.gather(target))  # imports, clients, TLS sessions
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        status.render(status.gather(target))
        samples.append(time.perf_counter() - started)
    return samples


if __name__ == "__main__":
    main()
