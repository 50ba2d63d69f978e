"""Invoke front of eks-gpu-lab: parse arguments, call into `labs`/`scenarios`, print.

Heavy libraries (boto3, kubernetes) are imported inside the tasks so that
`invoke --list` stays fast. Help for a task: `invoke --help lab.up`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from invoke import Collection, Context, Exit, task

from labs.errors import LabError
from labs.settings import config_defaults, flag_help

if TYPE_CHECKING:
    from labs.console import Console
    from labs.run.contract import Scenario
    from labs.settings import LabSettings

# Every lab task takes --lab, or --kubeconfig/--context for a cluster that is not a lab
# (read-only: the mutating tasks refuse it and say why).
LAB_HELP = {key: flag_help()[key] for key in ("lab", "kubeconfig", "context")}
DEMO_SCENARIO = "device-plugin-off"


def _friendly(body: Callable[..., Any]) -> Callable[..., Any]:
    """Turn errors the user can act on into `error: ...` and exit code 1, without a traceback."""

    @functools.wraps(body)
    def run(c: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return body(c, *args, **kwargs)
        except LabError as exc:
            raise Exit(f"error: {exc}", code=1) from None
        except KeyboardInterrupt:
            raise Exit("interrupted", code=130) from None
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

    return load_settings(dict(c.config.get("lab", {})), flags)


def _console() -> Console:
    from labs.console import Console

    return Console()


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


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


def _open(c: Context, lab: str | None, kubeconfig: str | None, context: str | None) -> Any:
    """The lab named (or the existing cluster a kubeconfig names), as every lab task opens it."""
    from labs.lab import Lab

    return Lab.open(_settings(c, lab=lab, kubeconfig=kubeconfig, context=context))


# --- lab.* -----------------------------------------------------------------------------


@task(
    help={
        **LAB_HELP,
        "gpus": flag_help()["gpus"],
        "no-operator": "do not install the NVIDIA GPU Operator",
        "sim": "create a local rehearsal lab (moto + Kubernetes emulator), no AWS needed",
        "dry-run": "print the plan and the API calls it would make; change nothing",
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
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Bring up the lab: infra, kubeconfig, GPU Operator, GPU nodes, GPU probe."""
    from labs import lifecycle

    operator = False if no_operator else None
    settings = _settings(
        c, lab=lab, gpus=gpus, operator=operator, kubeconfig=kubeconfig, context=context
    )
    lifecycle.up(settings, sim=sim, dry_run=dry_run, console=_console())


@task(help={**LAB_HELP, "count": "GPU nodes to scale to (0 to the node group's max)"})
@_friendly
def scale(
    c: Context,
    count: str,
    lab: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Scale the GPU node group through the EKS API and wait until the nodes are there (or gone)."""
    from labs import lifecycle
    from labs.settings import SettingsError

    try:
        wanted = int(count)
    except ValueError:
        raise SettingsError(f"GPU count {count!r} is not a whole number; use e.g. 2") from None
    lifecycle.scale(_open(c, lab, kubeconfig, context), wanted, _console())


@task(help=LAB_HELP)
@_friendly
def status(
    c: Context, lab: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> None:
    """Show backend, node groups, nodes and GPUs, operator components, faults, cost per hour."""
    from labs import status as lab_status

    print(lab_status.render(lab_status.gather(_open(c, lab, kubeconfig, context))))


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
        "destroy": "also destroy everything (terraform destroy / stop the rehearsal backend)",
        "yes": "do not ask before destroying",
    }
)
@_friendly
def down(
    c: Context,
    lab: str | None = None,
    destroy: bool = False,
    yes: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Cost guard: revert injected faults, GPU nodes to 0 and wait; --destroy ends the week."""
    from labs import lifecycle

    lifecycle.down(
        _settings(c, lab=lab, kubeconfig=kubeconfig, context=context),
        destroy=destroy,
        confirm=(lambda _question: True) if yes else _confirm,
        revert=_reverter(),
        console=_console(),
    )


# --- scenario.* ------------------------------------------------------------------------


@task(name="list")
@_friendly
def list_(c: Context) -> None:
    """List the scenarios: name, summary, needs, duration, risk."""
    import scenarios

    known = scenarios.all_scenarios()
    width = max((len(name) for name in known), default=0) + 1
    for info in known.values():
        print(f"{info.name:<{width}} {info.summary}")
        print(f"{'':<{width}} needs: {info.needs}; takes {info.duration}; risk: {info.risk}")


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
    }
)
@_friendly
def run(
    c: Context,
    name: str,
    lab: str | None = None,
    keep_fault: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Inject one fault, record symptoms, diagnose, revert, prove recovery, write a report."""
    from labs.run.engine import run_scenario

    scenario = _known_scenario(name, "scenario.run")
    target = _open(c, lab, kubeconfig, context)
    result = run_scenario(target, scenario, keep_fault=keep_fault)
    if not result.ok:
        why = result.error or ", ".join(result.failed_checks)
        raise Exit(f"scenario {name} failed: {why}", code=result.exit_code)


@task(help={**LAB_HELP, "name": "scenario name (see scenario.list)"})
@_friendly
def inject(
    c: Context,
    name: str,
    lab: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Inject a fault and leave it, for hands-on debugging (undo: scenario.revert)."""
    from labs.run.engine import inject_scenario

    scenario = _known_scenario(name, "scenario.inject")
    inject_scenario(_open(c, lab, kubeconfig, context), scenario)


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


lab_tasks = Collection("lab", up, scale, status, env, down)
scenario_tasks = Collection("scenario", list_, show, run, inject, revert)
ns = Collection(demo, lab_tasks, scenario_tasks)
ns.configure({"lab": config_defaults()})
