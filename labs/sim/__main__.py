"""`python -m labs.sim serve --state-dir DIR --speed S`: run one rehearsal world until signalled.

The process writes DIR/endpoints.json (with its pid) and DIR/kubeconfig once both servers
listen, runs until SIGTERM or SIGINT, then stops cleanly (exit 0) and removes only its
pid marker from endpoints.json, leaving the files for post-mortems.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from labs.errors import LabError
from labs.settings import KUBELETS, MODELLED_KUBELETS
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
        default=MODELLED_KUBELETS,
        help="who runs the nodes: the world's model, or the real kubelet behind the lab's "
        "container runtime (needs root on Linux, with mount, network and user namespaces)",
    )
    args = parser.parse_args(argv)
    if not args.speed > 0:
        parser.error(f"--speed must be positive (1 = real time), got {args.speed}")

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        world = start_world(
            args.state_dir, args.speed, args.cluster_name, args.region, kubelets=args.kubelets
        )
    except LabError as error:  # the log's last line, which lab.up quotes: no traceback above it
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    print(f"rehearsal world up: {world.endpoints['kube_url']}", flush=True)
    try:
        stop.wait()
    finally:
        world.stop()
        endpoints_path = args.state_dir / ENDPOINTS
        endpoints = recorded_endpoints(args.state_dir)
        endpoints.pop("pid", None)
        atomic_write_json(endpoints_path, endpoints)
    return 0


if __name__ == "__main__":
    sys.exit(main())
