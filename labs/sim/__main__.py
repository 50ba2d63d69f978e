"""`python -m labs.sim serve --state-dir DIR --speed S`: run one rehearsal world until signalled.

The process writes DIR/endpoints.json (with its pid) and DIR/kubeconfig once both servers
listen, runs until SIGTERM or SIGINT, then stops cleanly (exit 0) and removes only its
pid marker from endpoints.json, leaving the files for post-mortems.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from labs.errors import LabError
from labs.interrupts import signal_pipe
from labs.settings import DEFAULT_KUBELETS, KUBELETS
from labs.sim.process import ENDPOINTS, recorded_endpoints
from labs.sim.timings import DEFAULT_SPEED
from labs.sim.world import start_world
from labs.state import atomic_write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.sim", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a rehearsal world until SIGTERM/SIGINT")
    serve.add_argument("--state-dir", type=Path, required=True)
    serve.add_argument("--speed", type=float, default=DEFAULT_SPEED)
    serve.add_argument("--cluster-name", default="myeks")
    serve.add_argument("--region", default="ap-northeast-2")
    serve.add_argument(
        "--kubelets",
        choices=KUBELETS,
        default=DEFAULT_KUBELETS,
        help="who runs the nodes: the real kubelet behind the lab's container runtime (Linux, "
        "with mount, network and user namespaces; root or rootless), or the world's model",
    )
    args = parser.parse_args(argv)
    if not args.speed > 0:
        parser.error(f"--speed must be positive (1 = real time), got {args.speed}")

    signalled = signal_pipe()  # one that comes during the start stops the world after it
    try:
        world = start_world(
            args.state_dir, args.speed, args.cluster_name, args.region, kubelets=args.kubelets
        )
    except LabError as error:  # the log's last line, which lab.up quotes: no traceback above it
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    print(f"rehearsal world up: {world.endpoints['kube_url']}", flush=True)
    try:
        os.read(signalled, 1)
    finally:
        world.stop()
        endpoints = recorded_endpoints(args.state_dir)
        endpoints.pop("pid", None)
        atomic_write_json(args.state_dir / ENDPOINTS, endpoints)
    return 0


if __name__ == "__main__":
    sys.exit(main())
