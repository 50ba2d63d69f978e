"""`.ci/run` on a clean clone, as CI runs it: wall time, CPU time, and how fast the machine was.

Run: `python3 benchmarks/ci_run.py [--ref main]`. It clones the repository at `--ref` into a
temporary directory, runs `bash .ci/run` there (its output goes to `ci_run.log` in that
directory, kept when the run fails) and prints the wall-clock and CPU time of the run and
pytest's summary line. The same tree took from 14 to 18.5 minutes within one afternoon on
the same 2-core machine, its CPU time moving in step, so it also times a fixed pure-Python
loop before and after the run: a slow loop explains a slow run; a fast one does not rule out
a host busy meanwhile (15.5 minutes once with the loop at its fastest).
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOOP = 20_000_000


def machine_seconds() -> float:
    """Seconds a fixed loop takes on one core: the machine's speed now."""
    started = time.perf_counter()
    total = 0
    for number in range(LOOP):
        total += number * number % 7
    return time.perf_counter() - started


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="what to clone (default: HEAD)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="ci-run-"))
    clone = scratch / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", args.ref], check=True)
    before = machine_seconds()
    log = scratch / "ci_run.log"
    cpu, started = children_cpu(), time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(["bash", ".ci/run"], cwd=clone, stdout=out, stderr=subprocess.STDOUT)
    wall, cpu = time.monotonic() - started, children_cpu() - cpu
    after = machine_seconds()
    summary = re.findall(r"=+ (.* in [\d.]+s.*) =+", log.read_text())
    print(f".ci/run exit {code.returncode}: {wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU")
    print(f"pytest: {summary[-1] if summary else 'no summary line'}")
    print(f"machine: the fixed loop took {before:.2f} s before, {after:.2f} s after")
    if code.returncode == 0:
        shutil.rmtree(scratch)
    else:
        print(f"its output: {log}")
    return code.returncode


if __name__ == "__main__":
    raise SystemExit(main())
