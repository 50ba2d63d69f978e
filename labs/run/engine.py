"""Run a scenario end to end: guard, baseline, inject, watch, diagnose, revert, prove, report.

The engine owns the order and the safety net; scenarios own only their facts. The
journal entry is written before the mutation, so a crash at any later point leaves
a record that `revert_scenarios` can act on; any exception, Ctrl-C, SIGTERM or SIGHUP
after the injection reverts first and reports afterwards, and a second signal cannot cut
that short. Each command holds the lab's lock from its first check to its last write.
"""

from __future__ import annotations

import inspect
import io
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack, redirect_stdout
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labs.errors import LabError
from labs.guard import check_lab_target
from labs.interrupts import describe, shielded
from labs.journal import INJECTED, KEPT, REVERTED
from labs.kube import gpu
from labs.kube.alerts import MonitoringUnavailable
from labs.kube.view import ClusterView, WaitTimeout
from labs.lock import lab_lock
from labs.run.alerts import ALERT_SLACK, AlertWatch
from labs.run.contract import ByHand, CheckResult, Context, Finding, Needs, Scenario
from labs.run.doctor_check import DOCTOR_PHASE, doctor_names
from labs.run.report import RunRecord, write_report
from labs.run.timeline import Timeline
from labs.run.watch import checks_now, wait_floor, wall_seconds, watch_checks
from labs.state import StateWriteError, utc_now

if TYPE_CHECKING:
    from labs.lab import Lab

Out = Callable[[str], None]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
# Real-cluster seconds a reverted fault has to leave the cluster (pods terminating).
REVERT_GONE_SECONDS = 120.0
# Real seconds a recovered lab may take to show the baseline's state (a controller's next pass).
SETTLE = 60.0
ALERT_PHASE = "alert"


class ScenarioError(LabError):
    """The scenario cannot run (or could not be reverted); the message says what to do."""


@dataclass(frozen=True)
class RunResult:
    """How a run ended: exit code 0 only when every symptom and recovery check held."""

    exit_code: int
    failed_checks: list[str]
    report_dir: Path | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK


def _doc(function: Callable[..., Any]) -> str:
    return inspect.getdoc(function) or ""


def _first_line(function: Callable[..., Any]) -> str:
    """A docstring's first paragraph as one line: its opening sentence, never cut mid-way."""
    return " ".join(_doc(function).split("\n\n", 1)[0].split())


def describe_scenario(scenario: Scenario) -> str:
    """The runbook of one scenario: what it does, what to expect, the traps, how it is undone."""
    lines = [f"{scenario.name}: {scenario.summary}", ""]
    if scenario.about:
        lines += [inspect.cleandoc(scenario.about), ""]
    lines += [
        f"needs:    {scenario.needs}",
        f"risk:     {scenario.risk}",
        f"duration: {scenario.duration}",
        "",
        f"baseline: {_doc(scenario.baseline)}",
        f"inject:   {_doc(scenario.inject)}",
        "",
        "symptoms to expect (real-cluster time limits):",
        *(f"  - {c.name} (within {c.timeout:g} s)" for c in scenario.symptoms),
        "",
        f"debugging path: {_doc(scenario.diagnose)}",
        "",
        "traps:",
        *(
            f"  - {t.name}: expected {t.expected}; actually {t.actual}. {t.why}"
            for t in scenario.traps
        ),
        "",
        f"alerts that fire (monitoring/gpu-alerts.yaml): {', '.join(scenario.alerts) or 'none'}",
        "",
        f"revert:   {_doc(scenario.revert)}",
        "recovery to expect:",
        *(f"  - {c.name} (within {c.timeout:g} s)" for c in scenario.recovery),
    ]
    if scenario.by_hand:
        lines += ["", *by_hand_lines(scenario.by_hand)]
    return "\n".join(lines) + "\n"


def by_hand_lines(by_hand: ByHand) -> list[str]:
    """The kubectl runbook: `$ command` lines, each look followed by what it shows."""
    lines = [
        "by hand with kubectl, in one shell at the repository root after "
        'eval "$(invoke lab.env --lab LAB)" (it sets KUBECONFIG, and GPU_OPERATOR_NS to the '
        "lab's GPU Operator namespace):",
        "  inject:",
        *(f"    $ {command}" for command in by_hand.inject),
        "  look (while the fault is in):",
    ]
    for step in by_hand.look:
        lines += [f"    $ {step.command}", f"      shows: {step.shows}"]
        lines += [f"      means: {step.means}"] if step.means else []
    lines += ["  revert:", *(f"    $ {command}" for command in by_hand.revert)]
    return lines


# --- before anything changes -------------------------------------------------------------------


def check_prerequisites(lab: Lab, needs: Needs) -> None:
    """Raise ScenarioError, naming the command that fixes it, when the lab lacks what is needed."""
    fix_up = f"run `invoke lab.up --lab {lab.name}` and try again. Nothing was changed."
    if needs.rehearsal_only and not lab.backend.simulated:
        raise ScenarioError(
            f"this fault runs only on a rehearsal lab (`invoke lab.up --sim`), and lab "
            f"{lab.name!r} is not one: {needs.rehearsal_only}. Nothing was changed."
        )
    if needs.gpu_nodes:
        ready = gpu.ready_gpu_nodes(lab.snapshot("nodes"))
        if len(ready) < needs.gpu_nodes:
            raise ScenarioError(
                f"lab {lab.name!r} has {len(ready)} Ready GPU node(s) and this scenario needs "
                f"{needs.gpu_nodes}: run `invoke lab.scale {needs.gpu_nodes} --lab {lab.name}` "
                "and try again. Nothing was changed."
            )
    if needs.operator:
        if gpu.cluster_policy(lab.snapshot("clusterpolicies")) is None:
            raise ScenarioError(
                f"the GPU Operator is not installed in lab {lab.name!r} (no ClusterPolicy "
                f"{gpu.CLUSTER_POLICY_NAME!r}): {fix_up}"
            )
        operator = gpu.operator_deployment(lab.snapshot("deployments"))
        if not gpu.operator_available(operator):
            raise ScenarioError(
                f"the GPU Operator controller of lab {lab.name!r} is not running (deployment "
                f"{lab.operator_namespace}/{gpu.OPERATOR_DEPLOYMENT}: "
                f"{gpu.describe_deployment(operator)}): {fix_up}"
            )


def check_ready(lab: Lab, scenario: Scenario) -> None:
    """Before any change: the lab is the lab's own, holds no other fault, and has what it needs."""
    check_lab_target(lab, cluster=True, account=False)
    outstanding = lab.journal.shown()
    if outstanding:
        raise ScenarioError(
            f"lab {lab.name!r} still has {', '.join(outstanding)} injected (journal); one fault at "
            f"a time: undo it with `invoke scenario.revert --all --lab {lab.name}` first"
        )
    check_prerequisites(lab, scenario.needs)


def _open_view(lab: Lab, scenario: Scenario) -> ClusterView:
    return ClusterView(scenario.watch(lab)) if scenario.watch else lab.view()


def _state(scenario: Scenario, ctx: Context) -> dict[str, str]:
    return dict(scenario.state(ctx)) if scenario.state else {}


def _recovered_state(
    scenario: Scenario, ctx: Context, baseline: dict[str, str], scale: float
) -> dict[str, str]:
    """The state once recovery settles: an operator writes its status a pass after the objects
    it reads, so the comparison waits (up to SETTLE) for the baseline instead of racing it."""
    if not baseline:
        return _state(scenario, ctx)

    def settled(_view: ClusterView) -> dict[str, str] | None:
        state = _state(scenario, ctx)
        return state if state == baseline else None

    try:
        return ctx.view.wait_for(settled, wall_seconds(SETTLE, scale), "recovered state")
    except WaitTimeout:
        return _state(scenario, ctx)


def _new_run_dir(lab: Lab, name: str) -> Path:
    """A fresh folder for one run's report (the lock already proved the lab dir writable)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = lab.paths.runs_dir / f"{stamp}-{name}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    candidate.mkdir(parents=True)
    return candidate


def _differences(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    return [
        f"{key}: baseline {before[key]!r}, recovered {after.get(key)!r}"
        for key in before
        if after.get(key) != before[key]
    ]


# --- telling the story ------------------------------------------------------------------------


class _Story:
    """The live terminal lines of a run (and the check marks on its timeline)."""

    def __init__(self, out: Out, scale: float, timeline: Timeline) -> None:
        self.out = out
        self.scale = scale
        self.timeline = timeline

    def check_reporter(self, started: float) -> Callable[[CheckResult], None]:
        def report(result: CheckResult) -> None:
            if result.held and result.t is not None:
                kind = "alert" if result.phase == ALERT_PHASE else "check"
                self.timeline.mark(result.name, kind, at=started + result.t)
                real = f" (~{result.t * self.scale:.0f} s real)" if self.scale != 1 else ""
                if kind == "alert" and self.scale != 1:  # Prometheus keeps its own pace
                    real = " (on EKS: the rule's for: after its condition, + up to 60 s)"
                self.out(f"  T+{result.t:6.2f}s{real}  {result.phase}: {result.name}")
                self.out(f"             {result.seen}")
            else:
                self.out(f"  NOT SEEN   {result.phase}: {result.name}")
                self.out(f"             last seen: {result.seen}")

        return report

    def findings(self, run: RunRecord) -> None:
        self.out("diagnose (top-down):")
        for finding in run.findings:
            tag = " [real cluster only]" if finding.real_cluster_only else ""
            trap = f" [trap: {finding.trap}]" if finding.trap else ""
            self.out(f"  {finding.step}{tag}{trap}: {finding.look}")
            self.out(f"     saw:   {finding.saw}")
            self.out(f"     means: {finding.means}")


# --- the run ------------------------------------------------------------------------------------


def _revert_or_explain(lab: Lab, scenario: Scenario, entry: str, out: Out) -> str | None:
    """Revert after an error; on failure return what the user must do (journal unchanged)."""
    try:
        out(f"reverting first: {_first_line(scenario.revert)}")
        scenario.revert(lab)
    except BaseException as error:  # a failed revert must be reported, not lost
        return (
            f"the revert failed too ({type(error).__name__}: {error}); the fault may still be in "
            f"the lab: run `invoke scenario.revert --name {scenario.name} --lab {lab.name}`"
        )
    return _record_reverted(lab, scenario, entry)


def _wait_gone(lab: Lab, scenario: Scenario) -> None:
    """A revert counts once the scenario's own detection no longer sees the fault (pods take
    a moment to go); WaitTimeout when it still does."""
    timeout = max(REVERT_GONE_SECONDS / lab.speed, wait_floor(lab))
    with _open_view(lab, scenario) as view:
        view.wait_for(
            lambda seen: not scenario.detect(lab, seen), timeout,
            f"{scenario.name}'s fault gone after its revert (read by its detection)",
        )  # fmt: skip


def _record_reverted(lab: Lab, scenario: Scenario, entry: str) -> str | None:
    """Mark the entry reverted once the fault is gone; a journal that cannot be written is
    reported, not fatal."""
    try:
        _wait_gone(lab, scenario)
    except LabError as error:
        return (
            f"the revert ran, but the fault is still there ({error}); the journal still lists "
            f"it: run `invoke scenario.revert --name {scenario.name} --lab {lab.name}`"
        )
    try:
        lab.journal.mark(entry, REVERTED)
    except StateWriteError as error:
        return (
            f"the fault was reverted, but the journal could not record it ({error}); it still "
            f"lists the fault, and `invoke scenario.revert --all --lab {lab.name}` is safe to run"
        )
    return None


Confirm = Callable[[str], bool]


def confirm_plan(lab: Lab, scenario: Scenario, confirm: Confirm | None, out: Out) -> list[str]:
    """Show what the injection changes in the infrastructure and ask; [] when it changes none.

    ScenarioError when the person says no (or nobody can be asked): nothing is injected.
    """
    if scenario.preview is None:
        return []
    plan = scenario.preview(lab)
    out(f"{scenario.name} changes the infrastructure ({len(plan)} change(s)):")
    for line in plan:
        out(f"    {line}")
    out(f"risk: {scenario.risk}")
    if confirm is None or not confirm(f"Inject {scenario.name} on lab {lab.name}?"):
        raise ScenarioError(
            f"{scenario.name} was not confirmed, nothing was injected; answer y, or pass --yes"
        )
    return plan


def run_scenario(
    lab: Lab,
    scenario: Scenario,
    keep_fault: bool = False,
    out: Out = print,
    confirm: Confirm | None = None,
) -> RunResult:
    """Run `scenario` on `lab` from baseline to proven recovery and write its report.

    With `keep_fault` the fault is left in place after the diagnosis (journal "kept").
    `confirm` answers the question before an infrastructure change (None: nobody to ask).
    Raises ScenarioError/GuardError before anything changes when the lab is not ready.
    The lab's world runs at the program's pace meanwhile, and at its own pace again after.
    """
    with lab_lock(lab, f"scenario.run {scenario.name}"):
        check_ready(lab, scenario)
        plan = confirm_plan(lab, scenario, confirm, out)
        with lab.backend.program_pace(lab):
            return _run(lab, scenario, keep_fault, out, plan)


def _run(lab: Lab, scenario: Scenario, keep_fault: bool, out: Out, plan: list[str]) -> RunResult:
    name = scenario.name
    scale = lab.speed
    run = RunRecord(
        scenario=name,
        summary=scenario.summary,
        lab=lab.name,
        backend=lab.backend.name,
        backend_label=lab.backend.describe(lab),
        proof=lab.backend.proof(),
        speed=scale,
        started_at=utc_now(),
        traps=list(scenario.traps),
        plan=plan,
    )
    timeline = Timeline(scenario.gauges)
    story = _Story(out, scale, timeline)
    out(f"{name} on lab {lab.name} ({run.backend_label}): {scenario.summary}")
    finishing = ExitStack()  # from an error on: revert, close the view, report, whatever comes
    with finishing:
        with _open_view(lab, scenario) as view:
            view.on_change(timeline.sample)
            timeline.sample(view)
            ctx = Context(lab, view)
            _take_baseline(scenario, ctx, run, out)
            run_dir, entry = _record_injecting(lab, name)
            run.journal_id = entry
            try:
                _inject_observe_revert(lab, scenario, ctx, run, story, entry, keep_fault)
            except BaseException as error:
                finishing.enter_context(shielded())
                _stopped(lab, scenario, run, entry, error, out)
            run.timeline = timeline.to_dict()
        with shielded():
            return _finish(run, run_dir, out)


def _take_baseline(scenario: Scenario, ctx: Context, run: RunRecord, out: Out) -> None:
    """Before anything changes: the fault is not in already, and the lab reads healthy."""
    lab = ctx.lab
    _ready_for_baseline(lab, scenario, ctx.view)
    out(f"baseline: {_first_line(scenario.baseline)}")
    try:
        ctx.baseline = run.baseline = dict(scenario.baseline(lab, ctx.view))
    except Exception as error:
        raise ScenarioError(
            f"the baseline of {scenario.name} failed, so the lab is not healthy and nothing was "
            f"injected: {error}. Check it with `invoke lab.status --lab {lab.name}`."
        ) from error
    # the baseline's probe takes a while, and an operator's pass begun meanwhile (a rollout
    # the last scenario's revert started) writes notReady for a moment: the state waits it out
    _policy_ready(lab, scenario, ctx.view)
    run.states["baseline"] = _state(scenario, ctx)
    for key, value in run.states["baseline"].items():
        out(f"  {key}: {value}")


def _record_injecting(lab: Lab, name: str) -> tuple[Path, str]:
    """The run's folder and its journal entry, written before the injection."""
    run_dir = _new_run_dir(lab, name)
    try:
        return run_dir, lab.journal.record_injecting(name, str(run_dir))
    except StateWriteError:
        run_dir.rmdir()  # nothing was injected: leave no empty run folder behind
        raise


def _ready_for_baseline(lab: Lab, scenario: Scenario, view: ClusterView) -> None:
    """Without a whole journal, look at the cluster: is this fault in already? And a scenario
    on the operator's side waits for a ClusterPolicy that settles to ready (a lab just up, or
    just recovered, may still be reconciling): a baseline of a lab not ready proves nothing."""
    why = lab.journal.incomplete()
    if why and scenario.detect(lab, view):
        raise ScenarioError(
            f"{why}, and {scenario.name}'s fault is in the cluster already: undo it with "
            f"`invoke scenario.revert --all --lab {lab.name}` first. Nothing was changed."
        )
    _policy_ready(lab, scenario, view)


def _policy_ready(lab: Lab, scenario: Scenario, view: ClusterView) -> None:
    """For a scenario on the operator's side: wait for the ClusterPolicy to read ready."""
    if not scenario.needs.operator:
        return

    def state(objects: ClusterView) -> str:
        return gpu.policy_state(gpu.cluster_policy(objects)) or "missing"

    try:
        # the operator's own requeues keep wall time, as the control plane's do
        settle = max(wall_seconds(SETTLE, lab.speed), 2 * wait_floor(lab))
        view.wait_for(lambda v: state(v) == "ready" or None, settle,
                      "the ClusterPolicy to be ready", describe=state)  # fmt: skip
    except WaitTimeout:
        raise ScenarioError(
            f"the ClusterPolicy of lab {lab.name!r} is {state(view)!r}, not ready, so there is "
            f"no healthy baseline and nothing was injected: see `invoke lab.status --lab "
            f"{lab.name}` (its operand lines) and try again once it is ready"
        ) from None


def _stopped(
    lab: Lab, scenario: Scenario, run: RunRecord, entry: str, error: BaseException, out: Out
) -> None:
    """The run stopped with the fault perhaps in: say why, and revert unless it already was."""
    interrupted = isinstance(error, KeyboardInterrupt)
    run.error = describe(error) if interrupted else f"{type(error).__name__}: {error}"
    run.exit_code = EXIT_INTERRUPTED if interrupted else EXIT_ERROR
    out(f"run stopped: {run.error}")
    if run.reverted_at is None:
        problem = _revert_or_explain(lab, scenario, entry, out)
        if problem:
            run.error += f"; {problem}"
            out(problem)


def _finish(run: RunRecord, run_dir: Path, out: Out) -> RunResult:
    """Write the report and say the verdict; a report that cannot be written is an error."""
    run.finished_at = utc_now()
    if not run.exit_code and run.failed_checks:
        run.exit_code = EXIT_CHECK_FAILED
    try:
        report = write_report(run, run_dir)
    except StateWriteError as error:
        run.exit_code, run.error = EXIT_ERROR, f"the report could not be written: {error}"
        out(f"result: FAILED (exit {EXIT_ERROR}): {run.error}")
        return RunResult(run.exit_code, run.failed_checks, run_dir, run.error)
    verdict = "OK" if run.exit_code == EXIT_OK else f"FAILED (exit {run.exit_code})"
    out(f"result: {verdict}" + (f": {'; '.join(run.failed_checks)}" if run.failed_checks else ""))
    out(f"report: {report}")
    return RunResult(run.exit_code, run.failed_checks, run_dir, run.error)


def _inject_observe_revert(
    lab: Lab,
    scenario: Scenario,
    ctx: Context,
    run: RunRecord,
    story: _Story,
    entry: str,
    keep_fault: bool,
) -> None:
    """The part of a run that happens with the fault in the lab (T+0: the inject returned)."""
    out = story.out
    scale = story.scale
    alerts = _alert_watch(lab, run, out, scale)
    out(f"inject: {_first_line(scenario.inject)} (journal entry {entry})")
    injected_at = _injected(scenario, lab)
    story.timeline.origin = injected_at
    story.timeline.mark("inject", at=injected_at)
    lab.journal.mark(entry, INJECTED)
    _watch_fault(scenario, ctx, run, story, alerts, injected_at)
    run.states["fault"] = _state(scenario, ctx)
    run.findings = list(scenario.diagnose(ctx))
    story.findings(run)
    _ask_the_doctor(scenario, ctx, run, story)
    if keep_fault:
        lab.journal.mark(entry, KEPT)
        run.kept = True
        undo = f"invoke scenario.revert --name {scenario.name} --lab {lab.name}"
        out(f"fault kept: undo it with `{undo}`")
        return
    out(f"revert: {_first_line(scenario.revert)}")
    reverted_at = time.monotonic()
    story.timeline.mark("revert", at=reverted_at)
    with shielded(reraise=True):  # a signal now waits until the revert is recorded
        scenario.revert(lab)
        run.reverted_at = reverted_at - injected_at  # from here on no second revert
        problem = _record_reverted(lab, scenario, entry)
    if problem:
        raise ScenarioError(problem)
    report = story.check_reporter(reverted_at)
    run.checks += watch_checks(ctx, scenario.recovery, "recovery", reverted_at, scale, report)
    _clean_up(lab, scenario, out)
    run.states["recovered"] = _recovered_state(scenario, ctx, run.states["baseline"], scale)
    run.differences = _differences(run.states["baseline"], run.states["recovered"])
    if run.differences:
        out("recovered state differs from the baseline: " + "; ".join(run.differences))
    else:
        out("recovered state equals the baseline")


def _watch_fault(
    scenario: Scenario,
    ctx: Context,
    run: RunRecord,
    story: _Story,
    alerts: AlertWatch | None,
    injected_at: float,
) -> None:
    """The symptoms, then (with monitoring) the alerts the scenario expects, from T+0."""
    report, scale = story.check_reporter(injected_at), story.scale
    with ExitStack() as watching:
        if alerts is not None:
            alerts.start(injected_at)
            watching.callback(alerts.stop)
        run.checks += watch_checks(ctx, scenario.symptoms, "symptom", injected_at, scale, report)
        if alerts is not None:
            checks = [alerts.check(name) for name in scenario.alerts]
            run.checks += watch_checks(ctx, checks, ALERT_PHASE, injected_at, scale, report)
            run.alerts = [moment.to_dict() for moment in alerts.moments(scenario.alerts)]


def _ask_the_doctor(scenario: Scenario, ctx: Context, run: RunRecord, story: _Story) -> None:
    """`lab.doctor` on the fault, which must name the scenario's declared finding; a fault that
    leaves nothing to read (no declared finding) gives the doctor nothing to name."""
    if scenario.doctor_finding is None:
        return
    story.out("lab.doctor, while the fault is in:")
    asked_at = time.monotonic()
    report = story.check_reporter(asked_at)
    checks = [doctor_names(scenario.doctor_finding)]
    run.checks += watch_checks(ctx, checks, DOCTOR_PHASE, asked_at, story.scale, report)


def _alert_watch(lab: Lab, run: RunRecord, out: Out, scale: float) -> AlertWatch | None:
    """A watch of the lab's Prometheus alerts, started from a quiet Prometheus where it gets
    quiet; None when there is none to read, and why in the run's record (a dead Prometheus is
    not "no monitoring")."""
    try:
        watch = AlertWatch.open(lab.kube)
        if watch is not None and (still := watch.quiet(wall_seconds(ALERT_SLACK, scale))):
            out(f"alerts: already pending or firing before the injection: {', '.join(still)}")
    except MonitoringUnavailable as error:
        run.alerts_unrecorded = f"the lab's monitoring is installed but did not answer: {error}"
        out(f"alerts: not recorded: {run.alerts_unrecorded}")
        return None
    if watch is None:
        out(f"alerts: not recorded: lab {lab.name} has no monitoring (invoke lab.up --monitoring)")
    return watch


# --- practice and clean-up ----------------------------------------------------------------------


def inject_scenario(
    lab: Lab,
    scenario: Scenario,
    out: Out = print,
    speed: float | None = None,
    confirm: Confirm | None = None,
) -> str:
    """Inject `scenario` and leave it for a learner to debug by hand; returns the entry id.

    The symptoms are watched (and printed) at the program's pace, so the fault is fully in
    place before this returns; then the world runs at a person's pace (`speed`, default
    real time) until a program speeds it up again. An error after the injection reverts it.
    """
    person = lab.backend.person_speed(lab, speed)
    with lab_lock(lab, f"scenario.inject {scenario.name}"):
        check_ready(lab, scenario)
        confirm_plan(lab, scenario, confirm, out)
        with lab.backend.program_pace(lab):
            entry = _inject_and_watch(lab, scenario, out)
    lab.backend.set_speed(lab, person)
    out(
        f"the fault is in place; the lab now runs at {lab.backend.describe(lab)}. Debug it by "
        f"hand (kubectl --kubeconfig {lab.paths.kubeconfig}); when done: "
        f"`invoke scenario.revert --name {scenario.name} --lab {lab.name}`"
    )
    return entry


def _injected(scenario: Scenario, lab: Lab) -> float:
    """Inject; the moment the fault is in, T+0 of its symptoms. An inject may wait first (for
    a rollout, for a pod to exit): the symptoms' time limits must not be spent on that."""
    scenario.inject(lab)
    return time.monotonic()


def _inject_and_watch(lab: Lab, scenario: Scenario, out: Out) -> str:
    baseline = _healthy_baseline(lab, scenario, out)
    return _inject_watched(lab, scenario, baseline, out, hidden=False)


def _healthy_baseline(lab: Lab, scenario: Scenario, out: Out) -> dict[str, Any]:
    """The scenario's baseline on the lab as it is (the fault must not be in already)."""
    with _open_view(lab, scenario) as view:
        _ready_for_baseline(lab, scenario, view)
        out(f"baseline: {_first_line(scenario.baseline)}")
        return dict(scenario.baseline(lab, view))


def _inject_watched(
    lab: Lab, scenario: Scenario, baseline: dict[str, Any], out: Out, hidden: bool
) -> str:
    """Journal, inject and watch the symptoms (their actions done), so the fault is fully in
    place on return; any error reverts it. Returns the journal entry id."""
    scale = lab.speed
    story = _Story(out, scale, Timeline({}))
    with _open_view(lab, scenario) as view:
        ctx = Context(lab, view, baseline)
        entry = lab.journal.record_injecting(scenario.name, None, hidden=hidden)
        try:
            out(f"inject: {_first_line(scenario.inject)} (journal entry {entry})")
            injected_at = _injected(scenario, lab)
            lab.journal.mark(entry, KEPT)
            report = story.check_reporter(injected_at)
            watch_checks(ctx, scenario.symptoms, "symptom", injected_at, scale, report)
        except BaseException:
            with shielded():
                problem = _revert_or_explain(lab, scenario, entry, out)
                if problem:
                    out(problem)
            raise
    return entry


# --- blind practice -------------------------------------------------------------------------


def _silent(_line: str) -> None:
    """The story of a blind injection: nothing a learner could read the fault from."""


def inject_blind(
    lab: Lab,
    chosen: Sequence[Scenario],
    speed: float | None = None,
    confirm: Confirm | None = None,
    progress: Out = _silent,
) -> list[dict[str, Any]]:
    """Inject `chosen` for practice without naming them anywhere a learner looks: every
    baseline on the healthy lab first, then each fault (journalled as hidden) with its
    symptoms watched in silence. Returns the baselines, in `chosen` order; an error reverts
    what was injected. Then the lab runs at a person's pace (`speed`, default real time).
    `progress` hears only numbered steps (this takes minutes on real kubelets), never a name.
    """
    person = lab.backend.person_speed(lab, speed)
    with lab_lock(lab, "practice.start"):
        check_ready(lab, chosen[0])
        for scenario in chosen[1:]:
            check_prerequisites(lab, scenario.needs)
        changes = any(scenario.preview for scenario in chosen)
        question = f"This exercise changes the infrastructure of lab {lab.name}; go on?"
        if changes and (confirm is None or not confirm(question)):
            raise ScenarioError("the exercise was not confirmed, nothing was injected; pass --yes")
        step = _Steps(progress, len(chosen))
        # What a scenario's own steps print (a terraform plan) would name the fault too.
        with lab.backend.program_pace(lab), redirect_stdout(io.StringIO()):
            baselines = []
            for number, scenario in enumerate(chosen, 1):
                baselines.append(_healthy_baseline(lab, scenario, _silent))
                step(f"baseline {number} of {step.total} read from the healthy lab")
            _inject_all(lab, chosen, baselines, step)
    lab.backend.set_speed(lab, person)
    return baselines


class _Steps:
    """Numbered progress lines with the seconds since these steps began, written to the stdout
    that was current then (a blind injection silences stdout around the scenarios' steps)."""

    def __init__(self, out: Out, total: int) -> None:
        self._out, self._stdout, self._start = out, sys.stdout, time.monotonic()
        self.total = total

    def __call__(self, line: str) -> None:
        with redirect_stdout(self._stdout):
            self._out(f"  {line} ({time.monotonic() - self._start:.0f} s)")


def _inject_all(
    lab: Lab, chosen: Sequence[Scenario], baselines: list[dict[str, Any]], step: _Steps
) -> None:
    """Inject each fault in turn; when one fails, the ones already in are reverted too."""
    done: list[tuple[Scenario, str]] = []
    try:
        for number, (scenario, baseline) in enumerate(zip(chosen, baselines, strict=True), 1):
            step(f"fault {number} of {step.total}: injecting, then waiting for its symptoms")
            done.append((scenario, _inject_watched(lab, scenario, baseline, _silent, True)))
            step(f"fault {number} of {step.total}: in, its symptoms showing")
    except BaseException:
        with shielded():
            for scenario, entry in reversed(done):
                problem = _revert_or_explain(lab, scenario, entry, _silent)
                if problem:
                    print(problem, file=sys.stderr)  # stdout is silenced here
        raise


@dataclass(frozen=True)
class HandFix:
    """A learner's fix as `practice.check` found it: the learner's part of the recovery, the
    tool's part (run only once the learner's part holds and the cause is gone) and whether
    the cause (`detect`) is still in: checks that hold while it is in mean a workaround."""

    learner: list[CheckResult]
    tool: list[CheckResult]
    cause_in: bool

    @property
    def learners_part_done(self) -> bool:
        return all(r.held for r in self.learner) and not self.cause_in

    @property
    def fixed(self) -> bool:
        return self.learners_part_done and all(r.held for r in self.tool)


def check_hand_fix(
    lab: Lab, scenario: Scenario, baseline: Mapping[str, Any], wait: float
) -> HandFix:
    """The learner's part of the scenario's recovery on the lab as it is now (read once, or
    watched for up to `wait` real-cluster seconds when a fix is still in progress); when it
    holds with the cause gone, the tool does its own part (`reset`, then its checks)."""
    learner = [check for check in scenario.recovery if not check.tool]
    with lab_lock(lab, "practice.check"), _open_view(lab, scenario) as view:
        ctx = Context(lab, view, dict(baseline))
        if wait > 0:  # what a check starts once it holds (the tool's probes) waits for the reset
            limited = [
                replace(check, timeout=min(check.timeout, wait), then=None) for check in learner
            ]
            with lab.backend.program_pace(lab):
                results = watch_checks(ctx, limited, "recovery", time.monotonic(), lab.speed,
                                       _ignore)  # fmt: skip
        else:
            results = checks_now(ctx, learner, "recovery")
        fix = HandFix(results, [], scenario.detect(lab, view))
        if not fix.learners_part_done:
            return fix
        tool = [check for check in scenario.recovery if check.tool]
        # What a reset prints (a plan naming the stack's settings) is the tool's business.
        with lab.backend.program_pace(lab), redirect_stdout(io.StringIO()):
            if scenario.reset is not None:
                scenario.reset(lab)
            for check in learner:  # the tool's probes run on the lab as the reset left it
                if check.then is not None:
                    check.then(ctx)
            done = watch_checks(ctx, tool, "recovery", time.monotonic(), lab.speed, _ignore)
        return replace(fix, tool=done)


def _ignore(_result: CheckResult) -> None:
    """No live story: practice.check prints its results at the end."""


def fixed_by_hand(lab: Lab, names: Sequence[str]) -> None:
    """A learner undid these faults (their recovery holds and `detect` finds them gone, the
    tool's reset done): their journal entries are marked reverted."""
    with lab_lock(lab, "practice.check"):
        for entry in lab.journal.outstanding():
            if entry["scenario"] in names:
                lab.journal.mark(entry["id"], REVERTED)


def debugging_path(lab: Lab, scenario: Scenario) -> list[Finding]:
    """The scenario's look/saw/means steps, read off the lab as it is now."""
    with _open_view(lab, scenario) as view:
        return list(scenario.diagnose(Context(lab, view)))


def revert_scenarios(
    lab: Lab,
    catalogue: Mapping[str, Scenario],
    names: list[str] | None = None,
    out: Out = print,
) -> list[str]:
    """Undo faults; None means every fault the journal says may still be in the lab.

    Needs only the journal and each scenario's idempotent `revert` (looked up by name in
    `catalogue`), so it works after a crash. Named scenarios are reverted even without a
    journal entry (a hand-made fault). Returns the names reverted; raises ScenarioError
    naming any revert that failed.
    """
    lab.backend.check_writable(lab, "scenario.revert")
    with lab_lock(lab, "scenario.revert"):
        return _revert(lab, catalogue, names, out)


def _revert(
    lab: Lab, catalogue: Mapping[str, Scenario], names: list[str] | None, out: Out
) -> list[str]:
    outstanding = lab.journal.outstanding()
    lost = lab.journal.incomplete() if names is None else None
    if names is None:
        # Undo in reverse order of injection, each scenario once.
        targets = list(dict.fromkeys(e["scenario"] for e in reversed(outstanding)))
    else:
        targets = list(names)
    if lost:
        found = detect_faults(lab, catalogue)
        out(f"{lost}: looked in the cluster: {', '.join(found) or 'no fault found'}")
        targets += [name for name in found if name not in targets]
    if not targets:
        out(f"nothing to revert: the journal of lab {lab.name} records no injected fault")
        if lost:
            lab.journal.cleared()
        return []
    check_lab_target(lab, cluster=True, account=False)
    reverted: list[str] = []
    failures: list[str] = []
    for target in targets:
        try:
            scenario = _lookup(catalogue, target)
            out(f"revert {target}: {_first_line(scenario.revert)}")
            scenario.revert(lab)
            _wait_gone(lab, scenario)  # marked reverted only once the fault is gone
            _clean_up(lab, scenario, out)
        except Exception as error:  # try every fault, then report all failures
            failures.append(f"{target}: {type(error).__name__}: {error}")
            continue
        for entry in outstanding:
            if entry["scenario"] == target:
                lab.journal.mark(entry["id"], REVERTED)
        reverted.append(target)
    if failures:
        raise ScenarioError(
            "could not revert " + "; ".join(failures) + ". The journal still lists them; fix the "
            f"cause and run `invoke scenario.revert --all --lab {lab.name}` again."
        )
    if lost:
        lab.journal.cleared()
    return reverted


def _clean_up(lab: Lab, scenario: Scenario, out: Out) -> None:
    if scenario.clean_up is not None:
        out(f"clean up: {_first_line(scenario.clean_up)}")
        scenario.clean_up(lab)


def detect_faults(lab: Lab, catalogue: Mapping[str, Scenario]) -> list[str]:
    """The scenarios whose fault the cluster shows now (each read through its own view)."""
    try:
        with lab.view() as standard:
            return [
                name for name, scenario in catalogue.items() if _detected(lab, scenario, standard)
            ]
    except LabError:
        raise
    except Exception as error:
        raise ScenarioError(
            f"could not read the cluster of lab {lab.name!r} to look for faults "
            f"({type(error).__name__}: {error}); is it up? `invoke lab.status --lab {lab.name}`"
        ) from error


def _detected(lab: Lab, scenario: Scenario, standard: ClusterView) -> bool:
    if scenario.watch is None:
        return scenario.detect(lab, standard)
    with ClusterView(scenario.watch(lab)) as own:
        return scenario.detect(lab, own)


def _lookup(catalogue: Mapping[str, Scenario], name: str) -> Scenario:
    if name not in catalogue:
        raise ScenarioError(
            f"the journal names {name!r}, which this version does not know "
            f"(known: {', '.join(catalogue) or 'none'})"
        )
    return catalogue[name]
