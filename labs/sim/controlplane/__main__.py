"""`python -m labs.sim.controlplane`: build (or find) the control plane's programs ahead of use.

The README's set-up runs it so the first build's 20-35 minutes show as progress there, not as
a silent wait inside the first rehearsal or test.
"""

from __future__ import annotations

import sys

from labs.sim.controlplane.build import ControlPlaneUnavailable, binaries


def main() -> int:
    try:
        print(f"control plane programs: {binaries(lambda line: print(line, flush=True))}")
    except ControlPlaneUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
