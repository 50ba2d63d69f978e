"""What the faults in a pod spec share: the wrong pods from one manifest, and the way back.

Nothing in the cluster is broken in these scenarios, only a workload is wrong, so each one
ships its pods as `scenarios/manifests/<scenario>.yaml` (what a learner applies by hand too),
every pod labelled `eks-gpu-lab/scenario: <tag>`, the tag a digest of the scenario's name so
that a blind exercise's pods do not say which fault they are. A `gpu-probe` in that file stands for
the lab's probe written wrong, so it takes the probe's place; the revert deletes every
labelled pod and applies the lab's own probe again: the corrected pod is the probe, and the
lab ends as it began.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

import labs
from labs.kube import gpu, probes, rest
from labs.kube.resources import DEPLOYMENTS, PODS
from labs.kube.view import WORKLOAD_NAMESPACE, ClusterView, Objects, WatchedKind
from labs.lab import Lab
from labs.run.contract import (
    Baseline,
    ByHand,
    Cause,
    Check,
    Context,
    Diagnosis,
    Mutation,
    Needs,
    Scenario,
    StateRows,
    Step,
    Trap,
    Verdict,
)
from scenarios import _checks

SCENARIO_LABEL = "eks-gpu-lab/scenario"
NEEDS = Needs(gpu_nodes=2, operator=True)
PROBE = probes.probe_name()
MANIFESTS = Path(__file__).resolve().parent / "manifests"
REPO = Path(labs.__file__).resolve().parent.parent
PROBE_MANIFEST = probes.PROBE_MANIFEST.relative_to(REPO)
# What of a scenario's workload is still written wrong, one line per object (none: fixed).
Wrong = Callable[[Objects], list[str]]


def fault_tag(scenario: str) -> str:
    """The value of SCENARIO_LABEL on the scenario's pods (in its manifest too): a short digest
    of the name, so `kubectl get -o yaml` during a blind exercise does not name the fault."""
    return "f" + hashlib.sha256(scenario.encode()).hexdigest()[:8]


def manifest(scenario: str) -> Path:
    """The scenario's pods, as a file a person applies with kubectl."""
    return MANIFESTS / f"{scenario}.yaml"


def objects_of(scenario: str) -> list[dict[str, Any]]:
    """The objects of the scenario's manifest, pods or Deployments (fresh copies)."""
    text = manifest(scenario).read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc]


def by_hand_inject(scenario: str) -> list[str]:
    """The kubectl lines that inject it: free the probe's name, apply the manifest."""
    return [
        f"kubectl delete pod {PROBE} --ignore-not-found",
        f"kubectl apply -f {manifest(scenario).relative_to(REPO)}",
    ]


def by_hand_revert(scenario: str) -> list[str]:
    """The kubectl lines that undo it: its Deployments and pods go, the lab's probe comes back."""
    return [
        f"kubectl delete deployment,pod -l {SCENARIO_LABEL}={fault_tag(scenario)} "
        "--ignore-not-found",
        f"kubectl apply -f {PROBE_MANIFEST}",
    ]


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the GPU nodes and how many nodes the
    scheduler judges (GPU and system)."""
    run = probes.run_probe(lab, view, lab.settings.probe_timeout)
    nodes = [gpu.name_of(n) for n in gpu.gpu_nodes(view)]
    total = len(view.objects("nodes"))
    return {
        "probe_output": run.gpu_line,
        "gpu_nodes": nodes,
        "node_count": total,
        "system_nodes": total - len(nodes),
    }


def submit(lab: Lab, scenario: str) -> None:
    """Delete the lab's probe (the name must be free), then create the scenario's pods and
    Deployments."""
    probes.delete_probe(lab, lab.settings.probe_timeout)
    for obj in objects_of(scenario):
        kind = DEPLOYMENTS if obj["kind"] == "Deployment" else PODS
        rest.create(lab.kube, kind.path(WORKLOAD_NAMESPACE), obj)


def reset(lab: Lab, scenario: str) -> None:
    """The tool's part after a learner's fix: the scenario's objects (and whatever gpu-probe the
    learner ran) go, and the lab's own probe runs again as the lab writes it."""
    for pod in workload_pods(lab.snapshot("pods"), scenario):
        probes.delete_probe(lab, lab.settings.probe_timeout, name=gpu.name_of(pod))
    probes.delete_probe(lab, lab.settings.probe_timeout)
    undo(lab, scenario)


def undo(lab: Lab, scenario: str) -> None:
    """Delete the scenario's Deployments and pods (waiting until the pods are gone), then
    apply the lab's probe unless a gpu-probe is there already. Safe to repeat."""
    selector = {"labelSelector": f"{SCENARIO_LABEL}={fault_tag(scenario)}"}
    deployments = DEPLOYMENTS.path(WORKLOAD_NAMESPACE)
    for deployment in rest.get_items(lab.kube, deployments, query=selector):
        rest.delete(lab.kube, DEPLOYMENTS.path(WORKLOAD_NAMESPACE, gpu.name_of(deployment)))
    labelled = rest.get_items(lab.kube, PODS.path(WORKLOAD_NAMESPACE), query=selector)
    for pod in labelled:
        probes.delete_probe(lab, lab.settings.probe_timeout, name=gpu.name_of(pod))
    if gpu.pod(lab.snapshot("pods"), PROBE) is None:
        probes.create_probe(lab)


def scenario_pods(objects: Objects, scenario: str) -> list[dict[str, Any]]:
    return [
        p
        for p in objects.objects("pods")
        if (p["metadata"].get("labels") or {}).get(SCENARIO_LABEL) == fault_tag(scenario)
    ]


def workload_pods(objects: Objects, scenario: str) -> list[dict[str, Any]]:
    """The scenario's pods as a learner may have left them: labelled with its tag, or bearing a
    name its manifest gives (a pod written again by hand, without the label)."""
    names = {gpu.name_of(obj) for obj in objects_of(scenario) if obj["kind"] == "Pod"}
    return [
        p
        for p in objects.objects("pods")
        if gpu.name_of(p) in names
        or (p["metadata"].get("labels") or {}).get(SCENARIO_LABEL) == fault_tag(scenario)
    ]


def requested(pod: dict[str, Any]) -> dict[str, str]:
    """What a pod's containers ask for, limits over requests, by resource name."""
    asked: dict[str, str] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for field in ("requests", "limits"):
            asked |= {str(k): str(v) for k, v in (resources.get(field) or {}).items()}
    return asked


def fixed(scenario: str, wrong: Wrong) -> Check:
    """The learner's part, first half: nothing of the scenario's workload is still written
    wrong (each object `wrong` names is the cause still in)."""

    def condition(ctx: Context) -> Verdict:
        left = wrong(ctx.view)
        return not left, "; ".join(left) or "nothing written wrong"

    return Check(f"no workload of {scenario} still written wrong", condition, 60, names_cause=True)


def runs_again(scenario: str) -> Check:
    """The learner's part, second half: a gpu-probe ran (the learner's own counts) and none of
    the scenario's pods is stuck Pending or Failed. A controller's pod the kubelet refused at
    admission is not stuck: its ReplicaSet made another at once (a GPU pod created while the
    device plugin re-registers is refused so, as on any cluster)."""

    def condition(ctx: Context) -> Verdict:
        phases = {gpu.name_of(p): gpu.pod_phase(ctx.view, gpu.name_of(p))
                  for p in ctx.view.objects("pods")
                  if (p["metadata"].get("labels") or {}).get("app") == PROBE}  # fmt: skip
        pods = workload_pods(ctx.view, scenario)
        replaced = [gpu.name_of(p) for p in pods if _refused_and_replaced(p)]
        stuck = [
            f"{gpu.name_of(p)} {gpu.pod_phase(ctx.view, gpu.name_of(p))}"
            for p in pods
            if gpu.pod_phase(ctx.view, gpu.name_of(p)) in ("Pending", "Failed")
            and gpu.name_of(p) not in replaced
        ]
        ran = [name for name, phase in phases.items() if phase in ("Running", "Succeeded")]
        shown = ", ".join(
            f"{name} {phase}" for name, phase in phases.items() if name not in replaced
        )
        refused = f"; refused at admission and replaced: {len(replaced)}" if replaced else ""
        held = bool(ran) and not stuck
        return (
            held,
            f"{PROBE} pods: {shown or 'none'}{refused}; stuck: {', '.join(stuck) or 'none'}",
        )

    return Check(
        f"the workload runs again: a {PROBE} ran, no pod of {scenario} Pending or Failed",
        condition,
        180,
    )


def _refused_and_replaced(pod: dict[str, Any]) -> bool:
    """A controller's pod the kubelet failed at admission (UnexpectedAdmissionError, or
    OutOf<resource>), which its controller replaces rather than retries."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    owned = any(o.get("controller") for o in pod["metadata"].get("ownerReferences") or [])
    admission = reason == "UnexpectedAdmissionError" or reason.startswith("OutOf")
    return owned and status.get("phase") == "Failed" and admission


def resources_of(objects: Objects, name: str) -> str:
    """Pod `name`'s containers' resources as the API holds them (what a fix step quotes)."""
    containers = ((gpu.pod(objects, name) or {}).get("spec") or {}).get("containers") or []
    return json.dumps([c.get("resources") or {} for c in containers])


def log_of(lab: Lab, objects: Objects, name: str) -> str:
    """What pod `name` printed so far ("" while it does not exist or has not started)."""
    found = gpu.pod(objects, name)
    if found is None or gpu.pod_phase(objects, name) == "Pending":
        return ""
    return probes.read_probe_log(lab, name)


def pending_with(name: str, expected: Callable[[Context], str]) -> _checks.Condition:
    """Pod `name` is Pending and its latest FailedScheduling message begins with `expected`."""

    def condition(ctx: Context) -> Verdict:
        phase, events = gpu.pod_story(ctx.view, name)
        message = gpu.scheduling_failure(events) or ""
        held = phase == "Pending" and message.startswith(expected(ctx))
        return held, f"{name} {phase}: {message or 'no FailedScheduling event yet'}"

    return condition


def ran_with_baseline_output(name: str, scenario: str | None) -> _checks.Condition:
    """Pod `name` Succeeded and printed the baseline probe's GPU line; with `scenario`, only a
    pod of that scenario counts, with None only one of no scenario (the lab's own probe)."""

    def condition(ctx: Context) -> Verdict:
        found = gpu.pod(ctx.view, name) or {}
        owner = (found.get("metadata", {}).get("labels") or {}).get(SCENARIO_LABEL)
        phase, expected = gpu.pod_phase(ctx.view, name), ctx.baseline["probe_output"]
        if phase != "Succeeded" or owner != (fault_tag(scenario) if scenario else None):
            return False, f"{name} {phase}" + (f" ({SCENARIO_LABEL}={owner})" if owner else "")
        output = probes.gpu_summary(probes.read_probe_log(ctx.lab, name))
        return output == expected, f"{output!r} (baseline {expected!r})"

    return condition


def recovery(scenario: str, wrong: Wrong) -> list[Check]:
    """What every workload fault ends with: the learner's part (nothing written wrong, the
    workload runs), then the tool's (its pods gone, the lab's probe ran as before)."""

    def gone(ctx: Context) -> Verdict:
        left = [gpu.name_of(p) for p in scenario_pods(ctx.view, scenario)]
        return (
            not left,
            f"pods labelled {SCENARIO_LABEL}={fault_tag(scenario)}: {', '.join(left) or 'none'}",
        )

    return [
        fixed(scenario, wrong),
        runs_again(scenario),
        Check(f"no pod of {scenario} left", gone, 60, tool=True),
        Check("gpu-probe as the lab writes it ran with the baseline output",
              ran_with_baseline_output(PROBE, None), 180, tool=True),
    ]  # fmt: skip


def state(ctx: Context) -> dict[str, str]:
    """The summary rows, compared between baseline, fault and recovery."""
    pods = sorted(ctx.view.objects("pods"), key=gpu.name_of)
    return {
        f"pods in {WORKLOAD_NAMESPACE}": ", ".join(
            f"{gpu.name_of(p)} {gpu.pod_phase(ctx.view, gpu.name_of(p))}" for p in pods
        ),
        "allocatable nvidia.com/gpu": gpu.describe_allocatable(ctx.view),
    }


def describe_step(name: str, message: str) -> Step:
    """The by-hand look at a Pending pod's FailedScheduling event."""
    return Step(
        f"kubectl describe pod {name}",
        message,
        "the scheduler's verdict, one reason per node: the first branch of the debugging path",
    )


def scenario(
    *,
    name: str,
    summary: str,
    about: str,
    risk: str,
    inject: Mutation,
    revert: Mutation,
    symptoms: Sequence[Check],
    diagnose: Diagnosis,
    traps: Sequence[Trap],
    look: Sequence[Step],
    doctor_finding: str | None,
    wrong: Wrong,
    cause: Cause,
    alerts: Sequence[str] = (),
    baseline: Baseline = baseline,
    state: StateRows = state,
    watch: Callable[[Lab], list[WatchedKind]] | None = None,
) -> Scenario:
    """A workload fault: its own facts, and what every one shares (the lab it needs, the
    baseline probe, the recovery, the by-hand inject and revert around its `look`).
    `wrong` names what of its workload is still written wrong: the cause, as `detect` reads it
    and as a learner's fix must leave none of it."""

    def detect(lab: Lab, view: ClusterView) -> bool:
        """In while any of its workload is written wrong."""
        return bool(wrong(view))

    def tool_part(lab: Lab) -> None:
        """Its pods go and the lab's probe runs again, as the lab writes it."""
        reset(lab, name)

    return Scenario(
        name=name,
        summary=summary,
        area="workload",
        doctor_finding=doctor_finding,
        cause=cause,
        alerts=alerts,
        detect=detect,
        about=about,
        needs=NEEDS,
        risk=risk,
        duration="about 1 minute on EKS",
        baseline=baseline,
        inject=inject,
        revert=revert,
        symptoms=symptoms,
        recovery=recovery(name, wrong),
        reset=tool_part,
        diagnose=diagnose,
        traps=traps,
        state=state,
        gauges=gpu.gpu_gauges(PROBE),
        watch=watch,
        by_hand=ByHand(by_hand_inject(name), look, by_hand_revert(name)),
    )
