"""A Deployment whose pods name a RuntimeClass that does not exist: no pod, only events.

`runtimeClassName: nvidia-container-runtime` (the runtime binary's name, not a RuntimeClass)
meets the RuntimeClass admission plugin, which EKS runs on every cluster. `kubectl apply`
succeeds, since the Deployment itself is fine; its ReplicaSet's pod creates are refused,
403 Forbidden, and the ReplicaSet controller records each refusal as a Warning
`FailedCreate` event on the ReplicaSet: `Error creating: pods "gpu-probe-<hash>-" is
forbidden: pod rejected: RuntimeClass "nvidia-container-runtime" not found` (the pod is
named by its generateName: admission runs before the name is made). So there is no pod,
nothing Pending, no FailedScheduling and nothing for `kubectl describe pod`: the Deployment
stays 0/1 and the reason is on its ReplicaSet (`kubectl describe rs -l app=gpu-probe`).
`kubectl get runtimeclass` lists what exists: the operator's `nvidia`, and `nvidia-cdi`
and `nvidia-legacy` while its CDI support is on (the chart's default). On the AL2023 NVIDIA
AMI `nvidia` is containerd's default runtime anyway, so the fix is to drop
`runtimeClassName` (or name `nvidia`).
"""

from __future__ import annotations

import json
from typing import Any

from labs.errors import LabError
from labs.kube import gpu
from labs.kube.resources import DEPLOYMENTS, RUNTIME_CLASSES
from labs.kube.view import WORKLOAD_NAMESPACE, ClusterView, Objects, WatchedKind, standard_kinds
from labs.lab import Lab
from labs.run.contract import Cause, Check, Context, Finding, Step, Trap, Verdict
from scenarios import _workload
from scenarios._workload import PROBE

NAME = "runtimeclass-missing"
DEPLOYMENT = _workload.objects_of(NAME)[0]
RUNTIME_CLASS = str(DEPLOYMENT["spec"]["template"]["spec"]["runtimeClassName"])
REFUSAL = f'is forbidden: pod rejected: RuntimeClass "{RUNTIME_CLASS}" not found'
FAILED_CREATE = "FailedCreate"
REFUSED = f"the ReplicaSet's pod creates are refused: {FAILED_CREATE} events, {REFUSAL}"
NO_POD = f"no {PROBE} pod 30 s after the refusal: nothing Pending, no pod to describe (trap)"
GRACE = 30.0  # real seconds
WORKLOADS = "workload_deployments"  # the watched kind: Deployments where the workloads run
traps = [
    Trap("a bad pod spec shows up as a Pending pod", "a Pending pod whose events say why",
         "no pod at all: the API server refused every create; only the ReplicaSet that asked "
         "records why, as FailedCreate events",
         "look where the create came from: FailedCreate events on a ReplicaSet, Job or "
         "DaemonSet (kubectl describe rs), or a bare pod's apply output", shown_by=NO_POD),
]  # fmt: skip


def watch(lab: Lab) -> list[WatchedKind]:
    """The lab's standard kinds, the RuntimeClasses and the workloads' Deployments."""
    return [
        *standard_kinds(lab.kube, lab.operator_namespace),
        WatchedKind("runtimeclasses", lab.kube, RUNTIME_CLASSES),
        WatchedKind(WORKLOADS, lab.kube, DEPLOYMENTS, WORKLOAD_NAMESPACE),
    ]


def runtime_classes(objects: Objects) -> dict[str, str]:
    """RuntimeClass name -> handler."""
    return {gpu.name_of(r): str(r.get("handler")) for r in objects.objects("runtimeclasses")}


def deployment(objects: Objects) -> dict[str, Any] | None:
    return objects.find(WORKLOADS, gpu.name_of(DEPLOYMENT))


def refusals(objects: Objects) -> list[str]:
    """The FailedCreate messages the ReplicaSet controller recorded, oldest first."""
    events = gpu.events_with_reason(objects, "events", FAILED_CREATE)
    return [str(e.get("message")) for e in events if REFUSAL in str(e.get("message"))]


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output and the RuntimeClasses there are."""
    if RUNTIME_CLASS in runtime_classes(view):
        raise LabError(
            f"lab {lab.name!r} has a RuntimeClass {RUNTIME_CLASS!r}, so pods naming it would be "
            "admitted: this scenario cannot show the refusal here"
        )
    return _workload.baseline(lab, view) | {"runtime_classes": runtime_classes(view)}


def inject(lab: Lab) -> None:
    """Replace the gpu-probe pod by the Deployment in
    scenarios/manifests/runtimeclass-missing.yaml (kubectl apply), whose pods name
    runtimeClassName nvidia-container-runtime.

    The API server takes the Deployment; it refuses the pods its ReplicaSet creates.
    """
    _workload.submit(lab, NAME)


def revert(lab: Lab) -> None:
    """Delete the scenario's Deployment (its ReplicaSet goes with it) and apply the lab's
    gpu-probe again (safe to repeat).

    The lab's probe names no RuntimeClass: nvidia is the AMI's default runtime.
    """
    _workload.undo(lab, NAME)


def wrong(objects: Objects) -> list[str]:
    """Its Deployment while its pods name a RuntimeClass the cluster does not have."""
    found = deployment(objects)
    template = ((found or {}).get("spec") or {}).get("template") or {}
    named = (template.get("spec") or {}).get("runtimeClassName")
    if found is None or named is None or named in runtime_classes(objects):
        return []
    return [f"Deployment {gpu.name_of(found)}: runtimeClassName {named}, no such RuntimeClass"]


# --- symptoms (T+ from the injection) --------------------------------------------------------


def class_missing(ctx: Context) -> Verdict:
    present = runtime_classes(ctx.view)
    held = RUNTIME_CLASS not in present
    return held, f"RuntimeClasses: {json.dumps(present)}"


def refused(ctx: Context) -> Verdict:
    seen = refusals(ctx.view)
    if seen:
        ctx.mark("refused")
    return bool(seen), f"{FAILED_CREATE}: {seen[-1]}" if seen else f"no {FAILED_CREATE} event yet"


def no_pod(ctx: Context) -> Verdict:
    later = (ctx.seconds_since("refused") or 0.0) >= GRACE
    pods = [gpu.name_of(p) for p in _workload.scenario_pods(ctx.view, NAME)]
    shown = gpu.describe_deployment(deployment(ctx.view))
    return later and not pods, f"{PROBE} pods: {', '.join(pods) or 'none'}; Deployment {shown}"


symptoms = [
    Check(f"no RuntimeClass {RUNTIME_CLASS} in the cluster", class_missing, 60),
    Check(REFUSED, refused, 60),
    Check(NO_POD, no_pod, 120),
]  # fmt: skip


# --- diagnosis: the Deployment -> no pod -> the ReplicaSet's events -> the RuntimeClasses ----


def diagnose(ctx: Context) -> list[Finding]:
    """The Deployment's readiness -> no pod to describe -> the ReplicaSet's FailedCreate
    events -> which RuntimeClasses exist -> which runtime the GPU nodes use -> the fix."""
    view = ctx.view
    found = deployment(view)
    template = gpu.pod_template_spec(found) if found else {}
    pods = [gpu.name_of(p) for p in _workload.scenario_pods(view, NAME)]
    return [
        Finding("1. The Deployment", f"kubectl get deploy {gpu.name_of(DEPLOYMENT)}",
                gpu.describe_deployment(found),
                "the apply succeeded, yet no replica is available"),
        Finding("2. Pods: anything to describe?", f"kubectl get pods -l app={PROBE}",
                f"{len(pods)} pod(s) of {NAME}: {', '.join(pods) or 'none'}",
                "no pod, so no Pending and no pod events: the error is with whoever creates "
                "the pods", trap="a bad pod spec shows up as a Pending pod"),
        Finding("3. The ReplicaSet's events", f"kubectl describe rs -l app={PROBE}",
                "; ".join(sorted(set(refusals(view)))) or f"no {FAILED_CREATE} event",
                "admission refuses every pod the ReplicaSet makes: the RuntimeClass it names "
                "does not exist"),
        Finding("4. Which RuntimeClasses exist?", "kubectl get runtimeclass",
                json.dumps(runtime_classes(view)),
                f"the operator's nvidia (nvidia-cdi, nvidia-legacy while CDI is on); "
                f"{RUNTIME_CLASS} is the runtime binary's name, not a RuntimeClass"),
        Finding("5. Which runtime do GPU nodes use?", "on a GPU node: grep default_runtime_name "
                "/etc/containerd/config.toml", 'default_runtime_name = "nvidia"',
                "nodeadm makes nvidia the default on the AL2023 NVIDIA AMI: GPU pods need no "
                "runtimeClassName", real_cluster_only=True),
        Finding("6. The fix", f"kubectl get deploy {gpu.name_of(DEPLOYMENT)} -o jsonpath="
                "'{.spec.template.spec.runtimeClassName}'",
                str(template.get("runtimeClassName")),
                "drop runtimeClassName (or name nvidia, which exists)"),
    ]  # fmt: skip


def state(ctx: Context) -> dict[str, str]:
    """The workload rows, the Deployment and the RuntimeClasses, compared between baseline,
    fault and recovery."""
    classes = ", ".join(sorted(runtime_classes(ctx.view)))
    shown = gpu.describe_deployment(deployment(ctx.view))
    return _workload.state(ctx) | {"RuntimeClasses": classes, "Deployment gpu-probe": shown}


look = [
    Step(f"kubectl get deploy {gpu.name_of(DEPLOYMENT)}", "0/1",
         "taken by the API server, but no replica is ready"),
    Step(f"kubectl get pods -l app={PROBE}", "No resources found",
         "no pod: nothing Pending, nothing to describe"),
    Step(f"kubectl describe rs -l app={PROBE}", REFUSAL,
         "FailedCreate: the ReplicaSet's pod creates are refused at admission"),
    Step("kubectl get runtimeclass", "nvidia",
         f"what exists: the operator's RuntimeClasses, and no {RUNTIME_CLASS}"),
]  # fmt: skip


SCENARIO = _workload.scenario(
    doctor_finding="runtimeclass-missing",
    cause=Cause(
        plain="The Deployment's pods name a RuntimeClass that does not exist "
        "(runtimeClassName: nvidia-container-runtime), so the API server refuses every pod.",
        names=(("RuntimeClass", "runtimeClassName"),),
        clues=(
            ("not found", "not exist", "missing", "no such", "wrong", "nonexistent"),
            ("forbidden", "refused", "rejected", "admission", "FailedCreate", "403"),
            ("nvidia-container-runtime",),
            ("deployment", "replicaset"),
        ),
    ),
    alerts=("DeploymentPodsRefused",),
    name=NAME,
    summary=f"a Deployment whose pods name RuntimeClass {RUNTIME_CLASS}, which does not exist: "
    "every pod create refused (403), FailedCreate events, no pod",
    about=__doc__ or "",
    risk="none: the API server refuses the pods; only the Deployment and its ReplicaSet exist",
    inject=inject,
    revert=revert,
    symptoms=symptoms,
    diagnose=diagnose,
    traps=traps,
    look=look,
    baseline=baseline,
    state=state,
    watch=watch,
    wrong=wrong,
)
