"""The real GPU Operator's and helm's builds: seconds for each, cold or warm.

Run: `.venv/bin/python benchmarks/gpu_operator.py [--cold]`. `--cold` builds into an empty
binary cache with empty Go caches (a fresh machine: the module downloads and every package
compiled; on 2 idle cores expect a few minutes each); without it the figures are the warm
check (binaries already cached). The operator's figure includes unpacking its chart and
operand manifests from the module. The idle rehearsal's CPU and memory, the operator included,
are `benchmarks/rehearsal.py`'s.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labs.sim.controlplane import build  # noqa: E402
from labs.sim.controlplane.gpu_operator import release  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        if args.cold:
            os.environ[build.CACHE_ENV] = str(Path(scratch) / "cache")
            os.environ["GOMODCACHE"] = str(Path(scratch) / "gomod")
            os.environ["GOCACHE"] = str(Path(scratch) / "gobuild")
        kind = "cold" if args.cold else "warm"
        started = time.monotonic()
        build.pinned_binary(build.HELM_PROGRAM, print)
        print(f"helm {build.HELM_PROGRAM.version()} build ({kind}): "
              f"{time.monotonic() - started:.1f} s")  # fmt: skip
        started = time.monotonic()
        operator = release(print)
        print(f"gpu-operator {operator.version} build and unpack ({kind}): "
              f"{time.monotonic() - started:.1f} s")  # fmt: skip
        size = operator.binary.stat().st_size / 2**20
        print(f"gpu-operator binary: {size:.0f} MiB")


if __name__ == "__main__":
    main()
