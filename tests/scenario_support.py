"""A ready rehearsal lab for scenario tests: 2 GPU nodes, the GPU Operator ready, lab record saved.

Built the way `lab.up --sim` leaves a lab, but in-process (so a test can also reach the
world's store) and without the background process: the world serves on loopback, so a
subprocess opening the same lab (same state directory) reaches it too.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lab_support import TEST_TTL, pause
from tool_support import require_tool, require_venv_tool

import scenarios
from labs.aws.cloud import scale_gpu_nodegroup
from labs.backends import REHEARSAL
from labs.commands import status as lab_status
from labs.journal import INJECTED, REVERTED
from labs.kube import rest, workloads
from labs.kube.gpu import (
    CLUSTER_POLICY_NAME,
    DCGM_EXPORTER_DAEMONSET,
    DEVICE_PLUGIN_DAEMONSET,
    GFD_DAEMONSET,
    OPERATOR_DEPLOYMENT,
    daemonset,
    daemonset_counts,
    daemonset_rolled_out,
    operand_counts,
    operand_daemonsets,
    operator_available,
    operator_deployment,
    policy_state,
    schedulable_gpu_nodes,
)
from labs.kube.resources import CLUSTER_POLICIES, DEPLOYMENTS, PODS
from labs.kube.view import WORKLOAD_NAMESPACE
from labs.lab import Lab
from labs.run.contract import Step
from labs.run.engine import (
    describe_scenario,
    inject_scenario,
    revert_scenarios,
    run_scenario,
)
from labs.settings import MODELLED_KUBELETS, load_settings
from labs.sim.infra import SimInfra
from labs.sim.world import World, start_world

LAB_NAME = "myeks"


def YES(_question: str) -> bool:  # noqa: N802 - the answer `--yes` gives
    return True


GPU_NODES = 2
# A fast world; the engine never gives a check under labs.run.watch.MIN_TIMEOUT seconds.
SCENARIO_SPEED = 600.0
READY_TIMEOUT = 60.0
SETTLE = 2.0  # wall seconds a ready lab must stay ready before a test starts from it
# Operands the lab's values enable and scenarios take away (a ready lab has them all).
LAB_OPERANDS = {DEVICE_PLUGIN_DAEMONSET, DCGM_EXPORTER_DAEMONSET, GFD_DAEMONSET}


@dataclass
class SimLab:
    lab: Lab
    world: World


def lab_ready(view) -> bool:
    """GPU nodes advertise a GPU each, the device plugin runs on each, every operand is fully
    ready and rolled out, the operator controller runs and the policy is ready."""
    plugin = daemonset(view)
    policies = view.objects("clusterpolicies")
    return (
        len(schedulable_gpu_nodes(view)) == GPU_NODES
        and plugin is not None
        and daemonset_counts(plugin) == (GPU_NODES,) * 3
        and LAB_OPERANDS <= set(operand_counts(view))
        and all(counts[2] == counts[0] for counts in operand_counts(view).values())
        # the DaemonSet controller has seen each spec and rolled it out (its status lags)
        and all(daemonset_rolled_out(d) for d in operand_daemonsets(view))
        and operator_available(operator_deployment(view))
        and bool(policies)
        and policy_state(policies[0]) == "ready"
    )


def own_world(state_dir: Path, **options: Any) -> World:
    """`start_world` for a test that needs a world of its own: the worker's shared one stops
    first (moto's state is per process, so a process runs one world at a time). Its nodes are
    modelled unless `kubelets` says otherwise (`invoke_env`'s reason)."""
    release_shared_world()
    return start_world(state_dir, **{"kubelets": MODELLED_KUBELETS, **options})


@contextmanager
def ready_sim_lab(state_dir: Path, speed: float = SCENARIO_SPEED) -> Iterator[SimLab]:
    """Start a world under `state_dir`'s lab, install the operator, scale GPUs, wait for ready."""
    ready = _bring_up(state_dir, speed)
    try:
        yield ready
    finally:
        ready.world.stop()


def _bring_up(state_dir: Path, speed: float) -> SimLab:
    """`ready_sim_lab`'s world, which the caller stops: with monitoring (the real Prometheus and
    kube-state-metrics), so every scenario run there records the alerts its fault fires."""
    settings = load_settings(
        None,
        {"lab": LAB_NAME, "state_dir": str(state_dir), "speed": speed, "ttl": TEST_TTL,
         "monitoring": True},
    )  # fmt: skip
    lab = Lab.create(settings, REHEARSAL)
    world = own_world(lab.paths.sim_dir, speed=speed, cluster_name=LAB_NAME)
    try:
        variables = settings.stack_variables(operator_enabled=True)
        outputs = SimInfra(world.endpoints).apply(variables)
        lab.update(variables=variables, outputs=outputs)
        lab.journal.start()
        shutil.copyfile(world.kubeconfig_path, lab.paths.kubeconfig)
        scale_gpu_nodegroup(
            lab.aws_client("eks"), LAB_NAME, outputs["gpu_node_group_name"], GPU_NODES, GPU_NODES
        )
        wait_ready(lab)
    except BaseException:
        world.stop()
        raise
    return SimLab(lab, world)


@dataclass
class _Shared:
    ready: SimLab | None = None
    started: float = 0.0


# A test process's ready world, handed from one module to the next (a world costs half a minute
# to bring up on a busy machine) without the GPU time limits the module before set, and while
# it is young: a time limit (TEST_TTL, 168 h) fires 17 minutes after it is set at SCENARIO_SPEED.
SHARE_FOR = 600.0  # wall seconds after its start that a world is still handed on
_shared = _Shared()


def shared_ready_world(state_dir: Path) -> SimLab:
    """This process's ready world, on a fresh lab record under `state_dir` (empty journal, no
    runs); a new world when there is none, it is too old, or it does not come back to ready at
    the tests' speed (a module left it so)."""
    if _shared.ready is not None and time.monotonic() - _shared.started < SHARE_FOR:
        fresh = another_lab_record(_shared.ready, state_dir)
        fresh.lab.backend.set_speed(fresh.lab, SCENARIO_SPEED)
        scheduler = fresh.lab.aws_client("scheduler")
        for schedule in scheduler.list_schedules()["Schedules"]:
            scheduler.delete_schedule(Name=schedule["Name"], GroupName=schedule["GroupName"])
        clear_workloads(fresh.lab)
        try:
            wait_ready(fresh.lab)
            return fresh
        except TimeoutError:
            pass
    release_shared_world()
    _shared.started = time.monotonic()
    _shared.ready = _bring_up(state_dir / "world", SCENARIO_SPEED)
    return another_lab_record(_shared.ready, state_dir / "lab")


def clear_workloads(lab: Lab) -> None:
    """Delete every pod the last module left in the workload namespace (a scenario leaves its
    recovered probe, as on EKS), so the next module's world holds only what a new lab does."""
    left = rest.get_items(lab.kube, PODS.path(WORKLOAD_NAMESPACE))
    workloads.delete_pods(lab, [p["metadata"]["name"] for p in left], READY_TIMEOUT)


def release_shared_world() -> None:
    """Stop this process's shared world, if it runs."""
    if _shared.ready is not None:
        ready, _shared.ready = _shared.ready, None
        ready.world.stop()


def quiet(_line: str) -> None:
    """An `out` for engine calls whose story a test does not read."""


def wait_ready(lab: Lab) -> None:
    """Ready and staying so for a moment: the operator acts on a revert after its own delay,
    and a rollout it starts then would show in the next test's baseline."""
    with lab.view() as view:
        view.wait_for(lab_ready, READY_TIMEOUT, "rehearsal lab ready with 2 GPUs", steady=SETTLE)


def restore_healthy(sim: SimLab) -> None:
    """Undo what an earlier test may have left outside any journal (the device plugin switched
    off, the operator scaled to 0), then wait until the lab is ready and stays so: no test
    depends on another's clean-up."""
    store = sim.world.store
    store.patch(
        CLUSTER_POLICIES, CLUSTER_POLICY_NAME, {"spec": {"devicePlugin": {"enabled": True}}}
    )
    store.patch(DEPLOYMENTS, OPERATOR_DEPLOYMENT, {"spec": {"replicas": 1}},
                sim.lab.operator_namespace)  # fmt: skip
    wait_ready(sim.lab)


def another_lab_record(ready: SimLab, state_dir: Path) -> SimLab:
    """A fresh lab record (own journal and runs/) for the same running world.

    Saves a world start per test; each test still begins from a ready lab.
    """
    source = ready.lab
    settings = load_settings(
        None,
        {"lab": source.name, "state_dir": str(state_dir), "speed": source.settings.speed,
         "ttl": TEST_TTL},
    )  # fmt: skip
    lab = Lab.create(settings, REHEARSAL)
    lab.update(variables=source.variables, outputs=source.outputs)
    lab.journal.start()
    lab.paths.sim_dir.mkdir(parents=True)
    for name in ("endpoints.json", "kubeconfig"):
        shutil.copy(source.paths.sim_dir / name, lab.paths.sim_dir / name)  # 0600 kept
    shutil.copy(source.paths.kubeconfig, lab.paths.kubeconfig)
    return SimLab(lab, ready.world)


def read_until(stream: Any, marker: str, timeout: float) -> list[str]:
    """Lines of `stream` up to one containing `marker`; fails the test after `timeout`."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no {marker!r} within {timeout} s; output: {''.join(seen)}")
        seen.append(line)
        if marker in line:
            return seen


def status_facts(lab: Lab) -> dict[str, Any]:
    """What `invoke lab.status` shows, as data, less what moves with the clock (the GPU time
    limit and session); nodes without their names (a scenario may replace GPU nodes with new
    ones) and sorted by what they are."""
    facts = lab_status.gather(lab)
    nodes = [{k: v for k, v in n.items() if k != "name"} for n in facts["nodes"] or []]
    # Alerts follow the cluster a scrape and an evaluation later (and `for:` after that).
    steady = {k: v for k, v in facts.items() if k not in ("time_limit", "gpu_session", "alerts")}
    return steady | {"nodes": sorted(nodes, key=lambda n: json.dumps(n, sort_keys=True))}


def ready_status_facts(lab: Lab) -> dict[str, Any]:
    """`status_facts` of the lab at rest, every operand DaemonSet's pods ready: what a revert
    must bring back. An operand pod the operator restarts just after the lab read ready (a
    rollout it starts after its own delay) would make a baseline no revert returns to."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        facts = status_facts(lab)
        if all(d["ready"] == d["desired"] for d in facts["daemonsets"] or []):
            return facts
        if time.monotonic() > deadline:
            pytest.fail(f"the lab's operand DaemonSets never all read ready: {facts['daemonsets']}")
        wait_ready(lab)


def status_returns_to(lab: Lab, before: dict[str, Any]) -> None:
    """Wait (bounded) until lab.status reads as `before`; fail showing both."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        asked = time.monotonic()
        if (after := status_facts(lab)) == before:
            return
        if time.monotonic() > deadline:
            changed = {k: (before.get(k), after.get(k)) for k in before | after
                       if before.get(k) != after.get(k)}  # fmt: skip
            pytest.fail(f"lab.status did not return to what it was; (before, after): {changed}")
        pause(asked)


def shown_steps(name: str) -> list[Step]:
    """The `$ command` / `shows:` pairs of the look section `scenario.show NAME` prints."""
    lines = describe_scenario(scenarios.get(name)).splitlines()
    look = lines[lines.index("  look (while the fault is in):") + 1 : lines.index("  revert:")]
    commands = [line.strip().removeprefix("$ ") for line in look if line.strip().startswith("$ ")]
    shows = [line.strip().removeprefix("shows: ") for line in look if "shows: " in line]
    assert len(commands) == len(shows) >= 3, look
    return [Step(command, shown) for command, shown in zip(commands, shows, strict=True)]


CHILD = """
import sys, time
import scenarios
from labs.run.engine import run_scenario
from labs.lab import Lab
from labs.settings import load_settings

settings = load_settings(None, {"lab": sys.argv[1], "state_dir": sys.argv[2], "speed": sys.argv[3],
                                "ttl": sys.argv[5]})

def out(line):
    print(line, flush=True)
    if "symptom:" in line:  # the fault is in: hang here until killed
        print("INJECTED", flush=True)
        time.sleep(600)

run_scenario(Lab.open(settings), scenarios.get(sys.argv[4]), out=out, confirm=lambda _q: True)
"""


def killed_run_is_reverted_from_the_journal(lab: Lab, name: str, repo: Path) -> None:
    """Run scenario `name` in a child process, kill -9 it once the fault is in, then
    `scenario.revert --all` must undo it from the journal and lab.status read as before."""
    before = ready_status_facts(lab)
    _kill_run_after_injection(lab, name, repo)
    assert [e["state"] for e in lab.journal.entries()] == [INJECTED]
    assert revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet) == [name]
    wait_ready(lab)
    status_returns_to(lab, before)
    assert [e["state"] for e in lab.journal.entries()] == [REVERTED]


def _kill_run_after_injection(lab: Lab, name: str, repo: Path) -> None:
    args = [lab.name, str(lab.settings.state_dir), str(SCENARIO_SPEED), name, TEST_TTL]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        read_until(child.stdout, "INJECTED", timeout=90)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)


def by_hand_env(lab: Lab, cache: Path) -> dict[str, str]:
    """The shell `eval "$(invoke lab.env)"` leaves: kubectl and this venv's aws at the lab."""
    exports = dict(
        shlex.split(line.removeprefix("export "))[0].split("=", 1)
        for line in lab_status.env_exports(lab).splitlines()
        if line.startswith("export ")
    )
    path = f"{Path(require_venv_tool('aws')).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, **exports, "PATH": path, "KUBECACHEDIR": str(cache)}


def shows_by_hand(step: Step, repo: Path, env: dict[str, str], patience: float = 30.0) -> None:
    """Run a look step in a shell until it prints what it says it shows, as a person runs a
    command again when a log line is not there yet (a loaded machine writes it seconds late);
    fail with its last output after `patience` seconds."""
    deadline = time.monotonic() + patience
    while True:
        run = subprocess.run(["bash", "-c", step.command], cwd=repo, env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        if step.shows in run.stdout + run.stderr:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"`{step.command}` never showed {step.shows!r} in {patience:.0f} s; "
                        f"it printed:\n{run.stdout}{run.stderr}")  # fmt: skip
        time.sleep(2)


def revert_what_is_left(lab: Lab) -> None:
    """Revert the faults a test's journal still records (a test that failed half-way), so that
    the next test on the shared world does not begin inside its fault."""
    if lab.journal.outstanding():
        revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet)


def look_by_hand_then_revert_all(lab: Lab, name: str, repo: Path, cache: Path) -> None:
    """Inject `name`, run every look step `scenario.show` prints in a shell as a person would
    (each must print what it says it shows), then `scenario.revert --all` and wait until
    lab.status reads as before."""
    require_tool("kubectl")  # the steps run plain `kubectl` from PATH
    before = ready_status_facts(lab)
    inject_scenario(lab, scenarios.get(name), out=quiet, speed=lab.speed, confirm=YES)
    env = by_hand_env(lab, cache)
    for step in shown_steps(name):
        shows_by_hand(step, repo, env)
    assert status_facts(lab)["injected"] == [name]
    assert revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet) == [name]
    wait_ready(lab)
    status_returns_to(lab, before)


def full_run_report(lab: Lab, name: str) -> dict[str, Any]:
    """Run scenario `name` from baseline to proven recovery; it must end OK, recovered equal to
    its baseline, every trap seen, every finding observed and its journal entry reverted.
    Returns its report.json."""
    result = run_scenario(lab, scenarios.get(name), out=quiet, confirm=YES)
    assert result.ok, result.failed_checks
    assert result.report_dir is not None
    report = json.loads((result.report_dir / "report.json").read_text())
    assert report["states"]["recovered"] == report["states"]["baseline"]
    assert all(trap["observed"] for trap in report["traps"]), report["traps"]
    assert_findings_observed(report, name)
    assert_alerts_as_declared(report, name)
    assert [e["state"] for e in lab.journal.entries()] == [REVERTED]
    return report


def assert_alerts_as_declared(report: dict[str, Any], name: str) -> None:
    """The lab's Prometheus fired exactly the alerts the scenario declares, each with its T+,
    and the trap rule stayed silent unless declared (it fires only with no GPU node)."""
    declared = set(scenarios.get(name).alerts)
    assert report["alerts"] is not None, "the test lab runs with monitoring"
    fired = {a["name"]: a["firing_at"] for a in report["alerts"] if a["firing_at"] is not None}
    assert set(fired) == declared, (name, report["alerts"])
    assert all(t > 0 for t in fired.values()), report["alerts"]
    traps = [a for a in report["alerts"] if a["trap"]]
    assert traps and all((a["firing_at"] is not None) == a["expected"] for a in traps), traps


def assert_findings_observed(report: dict[str, Any], name: str) -> None:
    """Every finding the run could observe quotes the run: its "saw" is no sentence the
    scenario's code holds ready (only steps marked real-cluster-only say what a real cluster
    shows). A one-word value ("ready") may be both observed and spelled in code."""
    fixed = fixed_texts(name)
    for finding in report["findings"]:
        if finding["real_cluster_only"]:
            continue
        assert finding["saw"].strip(), finding
        assert " " not in finding["saw"] or finding["saw"] not in fixed, (
            f"{name} step {finding['step']!r} prints a fixed text, not what the run saw: "
            f"{finding['saw']!r}"
        )


def _scenario_trees() -> dict[str, ast.Module]:
    """Every scenario module's syntax tree, parsed when this module is imported, before any
    world runs: CPython 3.11's ast.parse can fail with "AST constructor recursion depth
    mismatch" while another thread compiles (python/cpython#106905), and a world's threads run
    beside the tests."""
    scenarios.all_scenarios()  # imports every scenario module and the helpers they use
    return {
        name: ast.parse(Path(str(module.__file__)).read_text())
        for name, module in sorted(sys.modules.items())
        if name.startswith("scenarios.") and getattr(module, "__file__", None)
    }


SCENARIO_TREES = _scenario_trees()


def fixed_texts(name: str) -> set[str]:
    """The texts a scenario's code (its module and the shared scenarios/_*.py helpers) holds as
    is: string constants, and f-strings made only of module constants."""
    module = sys.modules[scenarios.get(name).diagnose.__module__]
    helpers = [sys.modules[m] for m in sorted(sys.modules) if m.startswith("scenarios._")]
    sources = [module, *helpers]
    texts: set[str] = set()
    for source in sources:
        for node in ast.walk(SCENARIO_TREES[source.__name__]):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.add(node.value)
            elif isinstance(node, ast.JoinedStr) and (text := _constant_fstring(node, source)):
                texts.add(text)
    return texts


def _constant_fstring(node: ast.JoinedStr, module: Any) -> str | None:
    parts = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            parts.append(str(part.value))
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
            value = getattr(module, part.value.id, None)
            if not isinstance(value, str | int):
                return None
            parts.append(str(value))
        else:
            return None
    return "".join(parts)
