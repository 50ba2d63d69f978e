"""How long `invoke --list` takes, beside the bare `python -c "import invoke"` floor.

The tasks import boto3 and kubernetes lazily; if someone moves those imports to the
top of tasks.py, the gap between the two figures grows by about half a second.
Run: .venv/bin/python benchmarks/cli_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    commands = {
        'python -c "import invoke"': [sys.executable, "-c", "import invoke"],
        "invoke --list": [str(bin_dir / "invoke"), "--list"],
    }
    print(f"{'command':<28} {'median ms':>10} {'min ms':>8} {'max ms':>8}  ({args.runs} runs)")
    for label, command in commands.items():
        samples = time_command(command, args.runs)
        print(
            f"{label:<28} {statistics.median(samples) * 1000:>10.0f} "
            f"{min(samples) * 1000:>8.0f} {max(samples) * 1000:>8.0f}"
        )


if __name__ == "__main__":
    main()
