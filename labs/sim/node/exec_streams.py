"""`python -m labs.sim.node.exec_streams`: one exec or attach stream into a world's container.

The node endpoint (the kubelet API of the simulated nodes) starts this for each stream, its
stdin, stdout and stderr wired to kubectl's, and hands its exit code back as the command's:

    python -m labs.sim.node.exec_streams --api-url URL --pki DIR --logs DIR \\
        exec NAMESPACE POD CONTAINER [--tty] -- COMMAND...
    python -m labs.sim.node.exec_streams ... attach NAMESPACE POD CONTAINER [--tty]

The world's programs (`labs.sim.node.programs`) play the command; they read pods and nodes through
the API server with the world's own credentials.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labs.kube.api import KubeApi
from labs.kube.resources import KubeApiError
from labs.sim.controlplane.run import Credentials
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.container_runtime import ContainerRuntime
from labs.sim.node.terminal import StdioTerminal

NOT_RUNNABLE = 126


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labs.sim.node.exec_streams", description=__doc__
    )
    parser.add_argument("--api-url", required=True)
    parser.add_argument("--pki", type=Path, required=True, help="the control plane's pki dir")
    parser.add_argument("--logs", type=Path, required=True, help="the containers' log root")
    parser.add_argument("stream", choices=("exec", "attach"))
    parser.add_argument("namespace")
    parser.add_argument("pod")
    parser.add_argument("container")
    parser.add_argument("--tty", action="store_true")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args(argv)
    credentials = Credentials(
        args.api_url, args.pki / "ca.crt", args.pki / "admin.crt", args.pki / "admin.key"
    )
    runtime = ContainerRuntime(KubeApi(credentials.api_client()), ContainerLogs(args.logs))
    term = StdioTerminal(args.tty)
    try:
        process = runtime.check(args.namespace, args.pod, args.container)
    except KubeApiError as error:
        print(error.message, file=sys.stderr)
        return NOT_RUNNABLE
    if args.stream == "exec":
        return runtime.exec(process, args.command, term)
    runtime.attach(process, term, gone=lambda: False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
