"""A rehearsal lab's figures: lab.up time, idle CPU and memory, and the whole `invoke demo`.

Run: `.venv/bin/python benchmarks/rehearsal.py [--seconds 30] [--settle 30] [--kubelets modelled]
[--top 12]`.
It prints how fast this machine is (a fixed loop's seconds), brings a rehearsal lab up (on the
real kubelets, or on the modelled one) through `invoke lab.up --sim` in a temporary state directory
(timing it), waits `--settle` seconds (the operands' first rounds), reads the user+system CPU
time of the rehearsal process and every process under it (etcd, the API server, the
controllers, the node endpoint, the kubelets and their containers) from /proc over `--seconds`,
prints it as a percentage of one core (target: under 10 %) with their resident memory and the
`--top` busiest programs, and destroys the lab. Then it times `invoke demo` (target: under 45 s
warm), which brings its own lab up, runs device-plugin-off and takes the lab down.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci_run import machine_seconds  # noqa: E402

from labs.settings import DEFAULT_KUBELETS, KUBELETS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INVOKE = str(Path(sys.executable).parent / "invoke")
LAB = "idle"


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree(root: int) -> list[int]:
    """`root` and every process under it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat(int(entry.name))[1])
            except (OSError, IndexError):
                continue
    found, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def program(pid: int) -> str:
    """What the process runs, as a person names it: the program, or Python's module."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in argv if w]
    if not words:
        return "?"
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    return Path(words[0]).name


def resident_mib(pids: list[int]) -> float:
    pages = 0
    for pid in pids:
        with contextlib.suppress(OSError):  # it ended meanwhile
            pages += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@dataclass
class Usage:
    """The CPU seconds a process tree used over `elapsed` seconds, in all and by program.
    Processes that ended meanwhile count too, through the CPU their parents reaped: a real
    kubelet's short-lived processes (a probe's, an exec's) come and go between two readings."""

    seconds: float
    elapsed: float
    by_program: dict[str, float]
    pids: list[int]  # the tree at the end

    @property
    def share(self) -> float:
        """As a percentage of one core."""
        return 100 * self.seconds / self.elapsed


ENDED = "(processes that ended meanwhile)"


def _cpu(pid: int) -> tuple[float, float]:
    """(its own user+system seconds, those of its children it has reaped)."""
    stat, tick = _stat(pid), os.sysconf("SC_CLK_TCK")
    return (int(stat[11]) + int(stat[12])) / tick, (int(stat[13]) + int(stat[14])) / tick


def _snapshot(root: int) -> dict[int, tuple[float, float]]:
    taken = {}
    for pid in tree(root):
        with contextlib.suppress(OSError, IndexError):  # it ended meanwhile
            taken[pid] = _cpu(pid)
    return taken


def tree_usage(root: int, seconds: float) -> Usage:
    """What `root` and every process under it use over the next `seconds`."""
    before, started = _snapshot(root), time.monotonic()
    time.sleep(seconds)
    after, elapsed = _snapshot(root), time.monotonic() - started
    total = sum(map(sum, after.values())) - sum(map(sum, before.values()))
    by_program: dict[str, float] = {}
    for pid, (own, _) in after.items():
        name = program(pid)
        by_program[name] = by_program.get(name, 0.0) + own - before.get(pid, (0.0, 0.0))[0]
    ended = total - sum(by_program.values())
    if ended > 0.005:
        by_program[ENDED] = ended
    return Usage(total, elapsed, by_program, list(after))


def print_busiest(usage: Usage, top: int) -> None:
    print(f"  the busiest programs (% of one core), of {len(usage.by_program)}:")
    for name, seconds in sorted(usage.by_program.items(), key=lambda item: -item[1])[:top]:
        print(f"    {100 * seconds / usage.elapsed:5.1f}  {name}", flush=True)


def invoke(env: dict[str, str], *args: str) -> float:
    """Run one invoke command; its wall seconds."""
    started = time.monotonic()
    result = subprocess.run(
        [INVOKE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    if result.returncode:
        raise SystemExit(f"invoke {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--kubelets", choices=KUBELETS, default=DEFAULT_KUBELETS)
    parser.add_argument("--top", type=int, default=12, help="how many programs to list")
    args = parser.parse_args()
    # the same lab idles at several times the CPU on a slower day: the loop says which day
    print(f"machine: a fixed loop takes {machine_seconds():.2f} s (ci_run.py's loop)", flush=True)
    with tempfile.TemporaryDirectory() as state_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("INVOKE_", "AWS_"))}
        env |= {"INVOKE_LAB_STATE_DIR": state_dir, "INVOKE_LAB_SPEED": "60",
                "INVOKE_LAB_KUBELETS": args.kubelets}  # fmt: skip
        up = invoke(env, "lab.up", "--sim", "--lab", LAB)
        try:
            endpoints = Path(state_dir, LAB, "sim", "endpoints.json").read_text()
            time.sleep(args.settle)
            usage = tree_usage(int(json.loads(endpoints)["pid"]), args.seconds)
            memory = resident_mib(usage.pids)
        finally:
            invoke(env, "lab.down", "--lab", LAB, "--destroy", "--yes")
        print(f"kubelets: {args.kubelets}")
        print(f"lab.up --sim (2 GPU nodes, operator ready, speed 60): {up:.1f} s")
        print(f"idle rehearsal, {len(usage.pids)} processes, {usage.elapsed:.1f} s:")
        print(f"  CPU {usage.seconds:.2f} s = {usage.share:.1f} % of one core (target < 10 %)")
        print(f"  resident memory {memory:.0f} MiB")
        print_busiest(usage, args.top)
        demo = invoke(env, "demo")
    print(f"invoke demo (up, device-plugin-off run, down): {demo:.1f} s (target < 45 s)")


if __name__ == "__main__":
    main()
