"""Invoke front of eks-gpu-lab: parse arguments, call into `labs`/`scenarios`, print.

Heavy libraries (boto3, kubernetes) are imported inside the tasks so that
`invoke --list` stays fast. Help for a task: `invoke --help lab.up`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from invoke import Collection, Context, Exit, task

from labs.errors import LabError
from labs.settings import flag_help

if TYPE_CHECKING:
    from labs.console import Console
    from labs.practice.record import Exercise
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
    """What lab.down reverts with: every journalled fault, then a practice exercise whose
    faults are gone is recorded as abandoned."""
    import scenarios
    from labs.commands.down import AfterRevert
    from labs.practice.exercise import settle
    from labs.run.engine import revert_scenarios

    catalogue = scenarios.all_scenarios()

    def revert(lab: Any, console: Console) -> list[str]:
        reverted = revert_scenarios(lab, catalogue, None, out=console.say)
        try:
            settle(lab)
        except LabError as error:
            raise AfterRevert(
                f"reverted {', '.join(reverted) or 'nothing'}, but the practice exercise could "
                f"not be recorded as abandoned: {error}"
            ) from error
        return reverted

    return revert


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
        "monitoring": flag_help()["monitoring"]
        + "; once on, it stays on through later lab.up runs and scenarios",
        "sim": "create a local rehearsal lab (moto + a Kubernetes control plane), no AWS needed",
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
    monitoring: bool = False,
    sim: bool = False,
    dry_run: bool = False,
    smoke: bool = False,
    ttl: str | None = None,
    yes: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    """Bring up the lab: infra (with --monitoring, Prometheus and the GPU alert rules),
    kubeconfig, GPU Operator, GPU time limit, GPU nodes, probe."""
    from labs.commands import up as up_command

    operator = False if no_operator else None
    settings = _settings(
        c, lab=lab, gpus=gpus, operator=operator, monitoring=True if monitoring else None,
        ttl=ttl, kubeconfig=kubeconfig, context=context,
    )  # fmt: skip
    made = up_command.up(
        settings, sim=sim, dry_run=dry_run, console=_console(), confirm=_confirmer(yes),
        keep_later=ttl is None,
    )  # fmt: skip
    if smoke and not dry_run:
        _smoke(made, nccl=True)


def _smoke(target: Any, nccl: bool) -> None:
    from labs.commands.smoke import render
    from labs.commands.smoke import smoke as run_smoke

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
    from labs.commands import scale as scale_command
    from labs.settings import SettingsError

    try:
        wanted = int(count)
    except ValueError:
        raise SettingsError(f"GPU count {count!r} is not a whole number; use e.g. 2") from None
    target = _open(c, lab, kubeconfig, context, ttl=ttl)
    scale_command.scale(target, wanted, _console(), confirm=_confirmer(yes), keep_later=ttl is None)


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


@task(name="list", help={"lab": "ignored: every lab of the state directory is listed"})
@_friendly
def list_labs(c: Context, lab: str | None = None) -> None:
    """Every lab under the state directory: backend, reachable, GPUs, cost, time limit, faults."""
    from labs.commands import status as lab_status

    settings = _settings(c)
    print(lab_status.render_list(lab_status.gather_all(settings), str(settings.state_dir)))


@task(help=LAB_HELP)
@_friendly
def status(
    c: Context, lab: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> None:
    """Show backend, node groups, nodes and GPUs, operator components, faults, cost per hour."""
    from labs.commands import status as lab_status

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
    from labs.commands.status import env_exports

    print(env_exports(_open(c, lab, kubeconfig, context)))


def _api_server(kubeconfig: str, context: str | None) -> str | None:
    """The API server a kubeconfig's context (--context, else its current one) points at."""
    import yaml

    try:
        config = yaml.safe_load(Path(kubeconfig).expanduser().read_text(encoding="utf-8"))
        name = context or config["current-context"]
        [ctx] = [c["context"] for c in config["contexts"] if c["name"] == name]
        [cluster] = [c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"]]
        return str(cluster["server"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None  # the doctor itself has said what is wrong with the file


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
    from labs.practice.exercise import doctor_ran

    settings = _settings(c, lab=lab)
    try:  # during an exercise the doctor counts as a hint, on any kubeconfig of the lab
        if kubeconfig is None:
            doctor_ran(settings.state_dir, lab_name=settings.lab)
        else:
            doctor_ran(settings.state_dir, server=_api_server(kubeconfig, context))
    except LabError as error:  # the report stands; a damaged record is only mentioned
        print(f"warning: {error}", file=sys.stderr)
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
    from labs.commands import down as down_command
    from labs.settings import SettingsError

    if all and (lab or kubeconfig):
        raise SettingsError(
            "--all takes every lab under the state directory; drop --lab/--kubeconfig"
        )
    settings = _settings(c, lab=lab, kubeconfig=kubeconfig, context=context)
    run_down = down_command.down_all if all else down_command.down
    run_down(
        settings,
        destroy=destroy,
        confirm=_confirmer(yes),
        revert=_reverter(),
        console=_console(),
    )


# --- scenario.* ------------------------------------------------------------------------


@task(name="list", help={"lab": "ignored: every lab has the same catalogue"})
@_friendly
def list_(c: Context, lab: str | None = None) -> None:
    """List the scenarios by where the fault lives: name, summary, needs, duration, risk."""
    import scenarios
    from labs.run.contract import AREA_TITLES

    width = max((len(name) for name in scenarios.all_scenarios()), default=0) + 1
    for area, group in scenarios.by_area().items():
        print(f"{area}: {AREA_TITLES[area]}")
        for info in group:
            print(f"  {info.name:<{width}} {info.summary}")
            print(f"  {'':<{width}} needs: {info.needs}; takes {info.duration}; risk: {info.risk}")
            if info.needs.rehearsal_only:
                print(f"  {'':<{width}} rehearsal only: {info.needs.rehearsal_only}")


@task(
    help={
        "name": "scenario name (see scenario.list)",
        "lab": "ignored: a runbook is the same on every lab",
    }
)
@_friendly
def show(c: Context, name: str, lab: str | None = None) -> None:
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

    scenario = _known_scenario(name, "scenario.inject")
    pace = _speed(speed)
    target = _open(c, lab, kubeconfig, context)
    inject_scenario(target, scenario, speed=pace, confirm=_confirmer(yes))


def _whole(text: str | None, flag: str) -> int | None:
    """A flag's whole number (None when not given)."""
    from labs.settings import SettingsError

    try:
        return None if text is None else int(text)
    except ValueError:
        raise SettingsError(f"{flag} {text!r} is not a whole number; use e.g. 2") from None


def _speed(speed: str | None) -> float | None:
    """--speed as a number in range (None: the default, real time)."""
    from labs.settings import parse_speed

    return None if speed is None else parse_speed(speed, "--speed")


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
    from labs.practice.exercise import settle
    from labs.run.engine import revert_scenarios
    from labs.settings import SettingsError

    if bool(name) == bool(all):
        raise SettingsError("name one scenario to revert, or pass --all (not both)")
    names = [_known_scenario(name, "scenario.revert").name] if name else None
    target = _open(c, lab, kubeconfig, context)
    reverted = revert_scenarios(target, scenarios.all_scenarios(), names)
    settle(target)
    print("reverted: " + (", ".join(reverted) if reverted else "nothing was injected"))


# --- practice.* ------------------------------------------------------------------------


def _who(who: str | None) -> str:
    """The learner whose record an exercise goes to: --who, or the user's login name."""
    from labs.practice.exercise import learner

    return learner(who)


PRACTICE_LAB_HELP = (
    "the lab of the exercise (default: the one where your exercise is going, else the "
    "configured lab)"
)


def _practice_lab(c: Context, lab: str | None, who: str | None = None) -> Any:
    """The lab an exercise runs on (a lab of this tool: exercises write to it): --lab, else
    the lab where the learner's exercise is going, so commands run as `practice.start`
    printed them."""
    if lab is None:
        from labs.practice.exercise import exercise_lab
        from labs.practice.record import Record

        lab = exercise_lab(Record(_settings(c).state_dir), _who(who))
    target = _open(c, lab, None, None)
    target.backend.check_writable(target, "practice")
    return target


@task(
    help={
        "lab": LAB_HELP["lab"],
        "who": "whose record this exercise goes to (default: your user name)",
        "area": "pick from this area only: operator, node, network, workload, capacity",
        "scenario": "practise these faults (comma-separated names, see scenario.list)",
        "faults": "how many faults at once: 1 (default) or 2 (a node and a workload fault)",
        "seed": "a whole number that makes the pick repeatable",
        "speed": "rehearsal only: the world's speed while you practise (default 1, real time)",
        "yes": "do not ask before a fault that changes the infrastructure",
    }
)
@_friendly
def start(
    c: Context,
    lab: str | None = None,
    who: str | None = None,
    area: str | None = None,
    scenario: str | None = None,
    faults: str | None = None,
    seed: str | None = None,
    speed: str | None = None,
    yes: bool = False,
) -> None:
    """Start a blind exercise: faults you have not seen lately go in unnamed; the clock runs."""
    import scenarios
    from labs.practice import exercise

    catalogue = scenarios.all_scenarios()
    names = [name.strip() for name in scenario.split(",")] if scenario else []
    pace, how_many, seeded = _speed(speed), _whole(faults, "--faults"), _whole(seed, "--seed")

    target = _practice_lab(c, lab)

    def chosen_by(history: Sequence[Exercise]) -> list[Scenario]:
        rehearsal = target.backend.simulated
        return exercise.choose(catalogue, history, area, names, how_many, seeded, rehearsal)

    exercise.start(target, _who(who), chosen_by, pace, _confirmer(yes))


@task(
    help={
        "lab": PRACTICE_LAB_HELP,
        "wait": "real-cluster seconds to watch a fix still in progress (default 0: read the "
        "lab as it is now and answer at once)",
        "rules": "instead: load your Prometheus alert rules from this file into the lab's "
        "Prometheus (lab.up --monitoring) and say whether they fire on the fault",
    }
)
@_friendly
def check(c: Context, lab: str | None = None, wait: float = 0.0, rules: str | None = None) -> None:
    """Check my fix (the faults' recovery checks; exit 0 when fixed), or with --rules my alert
    rules (exit 0 when one fires on the fault)."""
    import scenarios
    from labs.practice import exercise

    target = _practice_lab(c, lab)
    if rules is not None:
        from labs.practice.rules import check_rules

        if not check_rules(target, Path(rules)):
            raise Exit(code=1)
    elif not exercise.check(target, scenarios.all_scenarios(), wait):
        raise Exit(code=1)


WHO_HELP = "whose exercise (default: your user name)"


@task(
    help={
        "text": "what you think the cause is: in your own words, a doctor finding id or scenario "
        "name, or the number of a cause `practice.choices` listed",
        "lab": PRACTICE_LAB_HELP,
        "who": WHO_HELP,
    }
)
@_friendly
def answer(c: Context, text: str, lab: str | None = None, who: str | None = None) -> None:
    """Say what you think it is, graded on what it means; then the runbook and traps."""
    import scenarios
    from labs.practice import exercise

    target = _practice_lab(c, lab, who)
    exercise.answer(target, scenarios.all_scenarios(), text, _who(who))


@task(help={"lab": PRACTICE_LAB_HELP, "who": WHO_HELP})
@_friendly
def choices(c: Context, lab: str | None = None, who: str | None = None) -> None:
    """Every cause in plain words, numbered for this exercise: answer with its number."""
    import scenarios
    from labs.practice import exercise

    target = _practice_lab(c, lab, who)
    exercise.list_choices(target, scenarios.all_scenarios(), _who(who))


@task(help={"lab": PRACTICE_LAB_HELP, "who": WHO_HELP})
@_friendly
def dispute(c: Context, lab: str | None = None, who: str | None = None) -> None:
    """Dispute the grade of your latest answer, once: kept as disputed, left out of your means."""
    from labs.practice import exercise

    exercise.dispute(_practice_lab(c, lab, who), _who(who))


@task(help={"lab": PRACTICE_LAB_HELP, "who": WHO_HELP})
@_friendly
def hint(c: Context, lab: str | None = None, who: str | None = None) -> None:
    """The next step of the debugging path, without the cause (each hint is counted)."""
    import scenarios
    from labs.practice import exercise

    target = _practice_lab(c, lab, who)
    print(exercise.hint(target, scenarios.all_scenarios(), _who(who)))


@task(help={"lab": PRACTICE_LAB_HELP, "who": WHO_HELP})
@_friendly
def giveup(c: Context, lab: str | None = None, who: str | None = None) -> None:
    """Show what the faults were, revert them and record the exercise as given up."""
    import scenarios
    from labs.practice import exercise

    exercise.giveup(_practice_lab(c, lab, who), scenarios.all_scenarios(), _who(who))


@task(
    help={
        "who": "whose record (default: your user name); not with --all",
        "all": "every learner side by side (exercises, median times to diagnose and fix, hints, "
        "mean grade per area), and their per-area grades by week as a PNG: to --png, else "
        "practice-history.png in the state directory (the output names it)",
        "lab": "only the exercises on this lab (default: every lab)",
        "png": "also draw the per-area grades by week to this PNG file (its directory must exist)",
    }
)
@_friendly
def history(
    c: Context,
    who: str | None = None,
    all_: bool = False,
    lab: str | None = None,
    png: str | None = None,
) -> None:
    """Your exercises as a table (times, hints, grades) and, per area, the trend; --all: the
    whole group side by side, with a PNG of everyone's grades by week."""
    from pathlib import Path

    from labs.practice import history as view
    from labs.practice.record import Record

    if all_ and who is not None:
        raise Exit("error: --all shows every learner; drop --who (or --all)", code=1)
    state_dir = _settings(c).state_dir
    record = Record(state_dir)
    if all_:
        print(view.group(record, Path(png) if png else state_dir / view.PNG_NAME, lab))
    else:
        print(view.history(record, _who(who), lab, Path(png) if png else None))


# --- demo ------------------------------------------------------------------------------


@task(help={"lab": "rehearsal lab name (default demo)"})
@_friendly
def demo(c: Context, lab: str = "demo") -> None:
    """The whole story on the local rehearsal backend: up, device-plugin-off, report, down."""
    import scenarios
    from labs.commands.demo import run_demo

    catalogue = scenarios.all_scenarios()
    code = run_demo(_settings(c, lab=lab), catalogue[DEMO_SCENARIO], catalogue, _console())
    if code:
        raise Exit(code=code)


lab_tasks = Collection("lab", up, scale, smoke, extend, status, list_labs, env, doctor, down)
scenario_tasks = Collection("scenario", list_, show, run, inject, revert)
practice_tasks = Collection(
    "practice", start, check, answer, choices, dispute, hint, giveup, history
)
ns = Collection(demo, lab_tasks, scenario_tasks, practice_tasks)
