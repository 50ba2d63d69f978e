"""A rehearsal lab's figures: lab.up time, idle CPU and memory, and the whole `invoke demo`.

Run: `.venv/bin/python benchmarks/rehearsal.py [--seconds 30] [--settle 30] [--kubelets real]
[--top 12]`.
It prints how fast this machine is (a fixed loop's seconds), brings a rehearsal lab up (on the
played kubelet, or on real ones) through `invoke lab.up --sim` in a temporary state directory
(timing it), waits `--settle` seconds (the operands' first rounds), reads the user+system CPU
time of the rehearsal process and every process under it (etcd, the API server, the
controllers, the node endpoint, the kubelets and their containers) from /proc over `--seconds`,
prints it as a percentage of one core (target: under 10 %) with their resident memory and the
`--top` busiest programs, and destroys the lab. Then it times `invoke demo` (target: under 45 s
warm), which brings its own lab up, runs device-plugin-off and takes the lab down.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci_run import machine_seconds  # noqa: E402

from labs.settings import KUBELETS, MODELLED_KUBELETS  # noqa: E402

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


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """Each live process's user plus system CPU seconds so far (all its threads)."""
    used = {}
    for pid in pids:
        try:
            stat = _stat(pid)
        except OSError:  # it ended meanwhile
            continue
        used[pid] = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return used


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
    pages = sum(int(Path(f"/proc/{pid}/statm").read_text().split()[1]) for pid in pids)
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


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
    parser.add_argument("--kubelets", choices=KUBELETS, default=MODELLED_KUBELETS)
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
            pids = tree(int(json.loads(endpoints)["pid"]))
            time.sleep(args.settle)
            before, started = cpu_seconds(pids), time.monotonic()
            time.sleep(args.seconds)
            after, elapsed = cpu_seconds(pids), time.monotonic() - started
            memory = resident_mib(list(after))
            by_program: dict[str, float] = {}
            for pid, seconds in after.items():
                name = program(pid)
                by_program[name] = by_program.get(name, 0.0) + seconds - before.get(pid, 0.0)
            used = sum(by_program.values())
        finally:
            invoke(env, "lab.down", "--lab", LAB, "--destroy", "--yes")
        print(f"kubelets: {args.kubelets}")
        print(f"lab.up --sim (2 GPU nodes, operator ready, speed 60): {up:.1f} s")
        print(f"idle rehearsal, {len(pids)} processes, {elapsed:.1f} s:")
        print(f"  CPU {used:.2f} s = {100 * used / elapsed:.1f} % of one core (target < 10 %)")
        print(f"  resident memory {memory:.0f} MiB")
        print(f"  the busiest programs (% of one core), of {len(by_program)}:")
        for name, seconds in sorted(by_program.items(), key=lambda item: -item[1])[: args.top]:
            print(f"    {100 * seconds / elapsed:5.1f}  {name}", flush=True)
        demo = invoke(env, "demo")
    print(f"invoke demo (up, device-plugin-off run, down): {demo:.1f} s (target < 45 s)")


if __name__ == "__main__":
    main()
