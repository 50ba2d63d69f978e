"""`invoke demo`: the whole lab story on the local rehearsal backend, in well under a minute.

It is the first thing a newcomer runs: a rehearsal lab comes up (with monitoring), the
reference scenario runs with its live timeline and the alerts it fires, the report's path is
printed, and the lab is torn down again (its report kept), even when the scenario fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from labs.console import Console
from labs.errors import LabError
from labs.run.contract import Scenario
from labs.settings import LabSettings


def run_demo(
    settings: LabSettings,
    scenario: Scenario,
    catalogue: Mapping[str, Scenario],
    console: Console,
) -> int:
    """Run the demo; return the process exit code (0 only when the scenario proved recovery)."""
    from labs.commands import down, up
    from labs.run.engine import revert_scenarios, run_scenario

    settings = replace(settings, gpus=max(settings.gpus, 2), operator=True, monitoring=True)
    if settings.paths.exists():
        raise LabError(
            f"lab {settings.lab!r} already exists; the demo only tears down a rehearsal lab it "
            f"created itself: run `invoke demo --lab <new name>`, or remove it first with "
            f"`invoke lab.down --lab {settings.lab} --destroy`"
        )
    console.say(f"eks-gpu-lab demo: rehearsal lab {settings.lab!r} (no AWS, nothing billed)")
    try:
        lab = up.up(settings, sim=True, dry_run=False, console=console)
        result = run_scenario(lab, scenario, out=console.say)
    finally:
        down.down(
            settings,
            destroy=True,
            confirm=lambda _question: True,
            revert=lambda lab, c: revert_scenarios(lab, catalogue, None, out=c.say),
            console=console,
        )
    return result.exit_code
