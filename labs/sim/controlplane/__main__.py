"""`python -m labs.sim.controlplane`: build (or find) the control plane's programs, the node
endpoint and metrics-server ahead of use.

The README's set-up runs it so the first build's quarter of an hour show as progress there, not as
a silent wait inside the first rehearsal or test.
"""

from __future__ import annotations

import sys

from labs.sim.controlplane.build import (
    ControlPlaneUnavailable,
    binaries,
    metrics_server_binary,
    node_endpoint_binary,
)


def say(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    try:
        print(f"control plane programs: {binaries(say)}", flush=True)
        print(f"node endpoint: {node_endpoint_binary(say)}", flush=True)
        print(f"metrics-server: {metrics_server_binary(say)}")
    except ControlPlaneUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
