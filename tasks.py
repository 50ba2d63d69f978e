"""Invoke front of eks-gpu-lab: parse arguments, call into `labs`/`scenarios`, print.

Heavy libraries (boto3, kubernetes) are imported inside the tasks so that
`invoke --list` stays fast. Help for a task: `invoke --help lab.up`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from invoke import Collection, Context, Exit, task

from labs.errors import LabError
from labs.settings import flag_help

if TYPE_CHECKING:
    from labs.console import Console
    from labs.run.contract import Scenario
    from labs.settings import LabSettings

# Every lab task takes --lab, or --kubeconfig/--context for a cluster that is not a lab
# (read-only: the mutating tasks refuse it and say why).
LAB_HELP = {key: flag_help()[key] for key in ("lab", "kubeconfig", "context")}
DEMO_SCENARIO = "device-plugin-off"


def _friendly(body: Callable[..., Any]) -> Callable[..., Any]:
    """Turn errors the user can act on into `error: ...` and exit code 1, without a traceback;
    SIGTERM and SIGHUP stop a task like Ctrl-C, and a closed pipe or terminal silences it
    instead of aborting it half-way."""

    @functools.wraps(body)
    def run(c: Any, *args: Any, **kwargs: Any) -> Any:
        from labs.console import resilient_stdio
        from labs.interrupts import describe, handled_signals

        try:
            with handled_signals(), resilient_stdio():
                return body(c, *args, **kwargs)
        except LabError as exc:
            raise Exit(f"error: {exc}", code=1) from None
        except KeyboardInterrupt as interrupt:
            raise Exit(describe(interrupt), code=130) from None
        except Exception as exc:
            if not _unreachable(exc):
                raise
            raise Exit(
                f"error: cannot reach the lab ({type(exc).__name__}: {exc}). Is it up? "
                "`invoke lab.status` shows it; `invoke lab.up` starts a stopped rehearsal backend.",
                code=1,
            ) from None

    return run


def _unreachable(error: Exception) -> bool:
    """The lab's API server or AWS endpoint did not answer (a stopped rehearsal, a dead VPN)."""
    from botocore.exceptions import EndpointConnectionError
    from urllib3.exceptions import MaxRetryError

    return isinstance(error, EndpointConnectionError | MaxRetryError | ConnectionError)


def _settings(c: Context, **flags: Any) -> LabSettings:
    from labs.settings import load_settings

    return load_settings(c.config.get("lab"), flags, os.environ)


def _console() -> Console:
    from labs.console import Console

    return Console()


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _confirmer(yes: bool) -> Callable[[str], bool]:
    """--yes answers every question; otherwise ask on a terminal (and refuse without one)."""
    return (lambda _question: True) if yes else _confirm


def _known_scenario(name: str, task_name: str) -> Scenario:
    """Look a scenario up before touching any lab (and catch `--help` typed after a task)."""
    import scenarios
    from labs.settings import SettingsError

    if name.startswith("-"):
        raise SettingsError(
            f"{name!r} is not a scenario name; for help run: invoke --help {task_name}"
        )
    return scenarios.get(name)


def _reverter() -> Callable[..., list[str]]:
    import scenarios
    from labs.run.engine import revert_scenarios

    catalogue = scenarios.all_scenarios()
    return lambda lab, console: revert_scenarios(lab, catalogue, None, out=console.say)


def _open(
    c: Context, lab: str | None, kubeconfig: str | None, context: str | None, **flags: Any
) -> Any:
    """The lab named (or the existing cluster a kubeconfig names), as every lab task opens it."""
    from labs.lab import Lab

    return Lab.open(_settings(c, lab=lab, kubeconfig=kubeconfig, context=context, **flags))


# --- lab.* -----------------------------------------------------------------------------


@task(
    help={
        **LAB_HELP,
        "gpus": flag_help()["gpus"],
        "no-operator": "do not install the NVIDIA GPU Operator",
        "sim": "create a local rehearsal lab (moto + Kubernetes emulator), no AWS needed",
        "dry-run": "print the plan and the API calls it would make; change nothing",
        "smoke": "end with lab.smoke (probe, CUDA check, NCCL all-reduce on the GPU nodes)",
        "ttl": flag_help()["ttl"],
        "yes": "do not ask before running GPUs with --ttl off",
    }
)
@_friendly
def up(
    c: Context,
    lab: str | None = None,
    gpus: str | None = None,
    no_operator: bool = False,
    sim: bool = False,
    dry_run: bool = False,
    smoke: bool = False,
    ttl: str | None = None,
    yes: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Bring up the lab: infra, kubeconfig, GPU Operator, GPU time limit, GPU nodes, probe."""
    from labs import lifecycle

    operator = False if no_operator else None
    settings = _settings(
        c, lab=lab, gpus=gpus, operator=operator, ttl=ttl, kubeconfig=kubeconfig, context=context
    )
    made = lifecycle.up(
        settings, sim=sim, dry_run=dry_run, console=_console(), confirm=_confirmer(yes)
    )
    if smoke and not dry_run:
        _smoke(made, nccl=True)


def _smoke(target: Any, nccl: bool) -> None:
    from labs.smoke import render
    from labs.smoke import smoke as run_smoke

    result = run_smoke(target, _console(), nccl=nccl)
    print("\n".join(render(result, simulated=target.backend.simulated)))
    if not result.ok:
        raise Exit(code=1)


@task(
    help={
        **LAB_HELP,
        "nccl": "run the two-node NCCL all-reduce too (default; --no-nccl skips it)",
    }
)
@_friendly
def smoke(
    c: Context,
    lab: str | None = None,
    nccl: bool = True,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Probe on every GPU node, PyTorch CUDA check, NCCL all-reduce; a table; exit 0 if all pass."""
    _smoke(_open(c, lab, kubeconfig, context), nccl)


@task(
    help={
        **LAB_HELP,
        "count": "GPU nodes to scale to (0 to the node group's max), right after the task name",
        "ttl": flag_help()["ttl"],
        "yes": "do not ask before running GPUs with --ttl off",
    }
)
@_friendly
def scale(
    c: Context,
    count: str,
    lab: str | None = None,
    ttl: str | None = None,
    yes: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Scale the GPU node group (EKS API), setting or removing the GPU time limit, and wait."""
    from labs import lifecycle
    from labs.settings import SettingsError

    try:
        wanted = int(count)
    except ValueError:
        raise SettingsError(f"GPU count {count!r} is not a whole number; use e.g. 2") from None
    target = _open(c, lab, kubeconfig, context, ttl=ttl)
    lifecycle.scale(target, wanted, _console(), confirm=_confirmer(yes))


@task(help={**LAB_HELP, "ttl": flag_help()["ttl"], "yes": "do not ask before --ttl off"})
@_friendly
def extend(
    c: Context,
    lab: str | None = None,
    ttl: str | None = None,
    yes: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Move the GPU time limit to now + TTL (default 4h) while GPU nodes run."""
    from labs import time_limit

    time_limit.extend(_open(c, lab, kubeconfig, context, ttl=ttl), _console(), _confirmer(yes))


@task(name="list")
@_friendly
def list_labs(c: Context) -> None:
    """Every lab under the state directory: backend, reachable, GPUs, cost, time limit, faults."""
    from labs import status as lab_status

    settings = _settings(c)
    print(lab_status.render_list(lab_status.gather_all(settings), str(settings.state_dir)))


@task(help=LAB_HELP)
@_friendly
def status(
    c: Context, lab: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> None:
    """Show backend, node groups, nodes and GPUs, operator components, faults, cost per hour."""
    from labs import status as lab_status

    facts = lab_status.gather(_open(c, lab, kubeconfig, context))
    print(lab_status.render(facts))
    if facts["problems"]:  # something it shows is unknown: not a clean bill of health
        raise Exit(code=1)


@task(help=LAB_HELP)
@_friendly
def env(
    c: Context, lab: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> None:
    """Print shell exports for kubectl/aws by hand: eval "$(invoke lab.env)"."""
    from labs.status import env_exports

    print(env_exports(_open(c, lab, kubeconfig, context)))


@task(
    help={
        **LAB_HELP,
        "json": "print the report as JSON (schema eks-gpu-lab/doctor/v1, see the README)",
        "pod": "NAMESPACE/NAME: triage this one pod (the rest of the flowchart still runs)",
    }
)
def doctor(
    c: Context,
    lab: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    json: bool = False,
    pod: str | None = None,
) -> None:
    """Read-only: walk the GPU debugging flowchart, name the probable cause with its evidence.

    Exit 0: no problem found; 1: problems found; 2: could not check (unreachable, forbidden).
    """
    from labs.doctor.render import as_json, as_text
    from labs.doctor.run import doctor as examine

    report = examine(lambda: _open(c, lab, kubeconfig, context), pod)
    print(as_json(report) if json else as_text(report))
    if report.exit_code:
        raise Exit(code=report.exit_code)


@task(
    help={
        **LAB_HELP,
        "destroy": "also destroy everything (terraform destroy / stop the rehearsal backend)",
        "yes": "do not ask before destroying",
        "all": "every lab under the state directory (one failing does not stop the others)",
    }
)
@_friendly
def down(
    c: Context,
    lab: str | None = None,
    destroy: bool = False,
    yes: bool = False,
    all: bool = False,  # noqa: A002 - the flag users type is --all
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Cost guard: revert injected faults, GPU nodes to 0 and wait; --destroy ends the week."""
    from labs import lifecycle
    from labs.settings import SettingsError

    if all and (lab or kubeconfig):
        raise SettingsError(
            "--all takes every lab under the state directory; drop --lab/--kubeconfig"
        )
    settings = _settings(c, lab=lab, kubeconfig=kubeconfig, context=context)
    run_down = lifecycle.down_all if all else lifecycle.down
    run_down(
        settings,
        destroy=destroy,
        confirm=_confirmer(yes),
        revert=_reverter(),
        console=_console(),
    )


# --- scenario.* ------------------------------------------------------------------------


@task(name="list")
@_friendly
def list_(c: Context) -> None:
    """List the scenarios by where the fault lives: name, summary, needs, duration, risk."""
    import scenarios
    from labs.run.contract import AREA_TITLES

    width = max((len(name) for name in scenarios.all_scenarios()), default=0) + 1
    for area, group in scenarios.by_area().items():
        print(f"{area}: {AREA_TITLES[area]}")
        for info in group:
            print(f"  {info.name:<{width}} {info.summary}")
            print(f"  {'':<{width}} needs: {info.needs}; takes {info.duration}; risk: {info.risk}")


@task(help={"name": "scenario name (see scenario.list)"})
@_friendly
def show(c: Context, name: str) -> None:
    """Show a scenario's runbook: what it does, what to expect, how to debug it."""
    from labs.run.engine import describe_scenario

    print(describe_scenario(_known_scenario(name, "scenario.show")))


@task(
    help={
        **LAB_HELP,
        "name": "scenario name (see scenario.list)",
        "keep-fault": "leave the fault in place at the end, for practice",
        "yes": "do not ask before a scenario that changes the infrastructure",
    }
)
@_friendly
def run(
    c: Context,
    name: str,
    lab: str | None = None,
    keep_fault: bool = False,
    yes: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Inject one fault, record symptoms, diagnose, revert, prove recovery, write a report."""
    from labs.run.engine import run_scenario

    scenario = _known_scenario(name, "scenario.run")
    target = _open(c, lab, kubeconfig, context)
    result = run_scenario(target, scenario, keep_fault=keep_fault, confirm=_confirmer(yes))
    if not result.ok:
        why = result.error or ", ".join(result.failed_checks)
        raise Exit(f"scenario {name} failed: {why}", code=result.exit_code)


@task(
    help={
        **LAB_HELP,
        "name": "scenario name (see scenario.list)",
        "yes": "do not ask before a scenario that changes the infrastructure",
        "speed": "rehearsal only: the world's speed while you practise (default 1, real time)",
    }
)
@_friendly
def inject(
    c: Context,
    name: str,
    lab: str | None = None,
    yes: bool = False,
    speed: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Inject a fault and leave it for hands-on debugging; a rehearsal then runs in real time."""
    from labs.run.engine import inject_scenario
    from labs.settings import parse_speed

    scenario = _known_scenario(name, "scenario.inject")
    pace = None if speed is None else parse_speed(speed, "--speed")
    target = _open(c, lab, kubeconfig, context)
    inject_scenario(target, scenario, speed=pace, confirm=_confirmer(yes))


@task(
    help={
        **LAB_HELP,
        "name": "scenario to revert (invoke takes it as --name NAME)",
        "all": "revert every fault the journal says is injected",
    }
)
@_friendly
def revert(
    c: Context,
    name: str | None = None,
    lab: str | None = None,
    all: bool = False,  # noqa: A002 - the flag users type is --all
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Undo injected faults from the journal (works after a crash); safe to repeat."""
    import scenarios
    from labs.run.engine import revert_scenarios
    from labs.settings import SettingsError

    if bool(name) == bool(all):
        raise SettingsError("name one scenario to revert, or pass --all (not both)")
    names = [_known_scenario(name, "scenario.revert").name] if name else None
    target = _open(c, lab, kubeconfig, context)
    reverted = revert_scenarios(target, scenarios.all_scenarios(), names)
    print("reverted: " + (", ".join(reverted) if reverted else "nothing was injected"))


# --- demo ------------------------------------------------------------------------------


@task(help={"lab": "rehearsal lab name (default demo)"})
@_friendly
def demo(c: Context, lab: str = "demo") -> None:
    """The whole story on the local rehearsal backend: up, device-plugin-off, report, down."""
    import scenarios
    from labs.demo import run_demo

    catalogue = scenarios.all_scenarios()
    code = run_demo(_settings(c, lab=lab), catalogue[DEMO_SCENARIO], catalogue, _console())
    if code:
        raise Exit(code=code)


lab_tasks = Collection("lab", up, scale, smoke, extend, status, list_labs, env, doctor, down)
scenario_tasks = Collection("scenario", list_, show, run, inject, revert)
ns = Collection(demo, lab_tasks, scenario_tasks)
