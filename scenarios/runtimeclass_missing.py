"""A pod naming a RuntimeClass that does not exist: refused at create time, not Pending.

`runtimeClassName: nvidia-container-runtime` (the runtime binary's name, not a RuntimeClass)
meets the RuntimeClass admission plugin, which EKS runs on every cluster: the API server
answers `kubectl apply` with 403 Forbidden, `pods "gpu-probe" is forbidden: pod rejected:
RuntimeClass "nvidia-container-runtime" not found`. No pod object is made, so there is
nothing Pending, no FailedScheduling and nothing for `kubectl describe pod`: the error goes
to whoever created the pod (kubectl here; a Deployment's ReplicaSet would show it as
FailedCreate events). `kubectl get runtimeclass` lists what exists: the operator's `nvidia`,
and `nvidia-cdi` and `nvidia-legacy` while its CDI support is on (the chart's default). On
the AL2023 NVIDIA AMI `nvidia` is containerd's default runtime anyway, so the fix is to drop
`runtimeClassName` (or name `nvidia`).
"""

from __future__ import annotations

import json
from typing import Any

from labs.errors import LabError
from labs.kube import gpu
from labs.kube.view import ClusterView, Objects, WatchedKind, standard_kinds
from labs.lab import Lab
from labs.run.contract import Check, Context, Finding, Step, Trap, Verdict
from scenarios import _workload
from scenarios._workload import PROBE

NAME = "runtimeclass-missing"
RUNTIME_CLASS = str(_workload.pods_of(NAME)[0]["spec"]["runtimeClassName"])
REFUSAL = f'pods "{PROBE}" is forbidden: pod rejected: RuntimeClass "{RUNTIME_CLASS}" not found'
REFUSED = f"kubectl apply is refused: 403 Forbidden, {REFUSAL}"
NO_POD = "no gpu-probe object 30 s after the refusal: nothing Pending, no event to describe (trap)"
GRACE = 30.0  # real seconds
traps = [
    Trap("a bad pod spec shows up as a Pending pod", "a Pending pod whose events say why",
         "no pod at all: the API server refused the create; only its caller saw the error",
         "look where the create came from: the apply's output, or FailedCreate events on a "
         "ReplicaSet, Job or DaemonSet", shown_by=NO_POD),
]  # fmt: skip


def watch(lab: Lab) -> list[WatchedKind]:
    """The lab's standard kinds and the RuntimeClasses."""
    from kubernetes import client as k8s

    node = k8s.NodeV1Api(lab.kube)
    classes = WatchedKind("runtimeclasses", node.list_runtime_class)
    return [*standard_kinds(lab.kube, lab.operator_namespace), classes]


def runtime_classes(objects: Objects) -> dict[str, str]:
    """RuntimeClass name -> handler."""
    return {gpu.name_of(r): str(r.get("handler")) for r in objects.objects("runtimeclasses")}


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output and the RuntimeClasses there are."""
    if RUNTIME_CLASS in runtime_classes(view):
        raise LabError(
            f"lab {lab.name!r} has a RuntimeClass {RUNTIME_CLASS!r}, so a pod naming it would be "
            "admitted: this scenario cannot show the refusal here"
        )
    return _workload.baseline(lab, view) | {"runtime_classes": runtime_classes(view)}


def answer(lab: Lab) -> str:
    """Apply the scenario's manifest and return the API server's answer (status, reason and
    message; "created" when it took the pod)."""
    from kubernetes.client.exceptions import ApiException

    try:
        _workload.submit(lab, NAME)
    except ApiException as error:
        body = json.loads(error.body or "{}")
        return f"{error.status} {body.get('reason')}, {body.get('message')}"
    return "created"


def inject(lab: Lab) -> None:
    """Replace gpu-probe by scenarios/manifests/runtimeclass-missing.yaml (kubectl apply).

    Its gpu-probe names runtimeClassName nvidia-container-runtime; the API server refuses it
    (403 Forbidden), which is the fault showing, not an error of the run.
    """
    said = answer(lab)
    if REFUSAL not in said:
        raise LabError(f"the API server answered {said!r}, not the refusal {REFUSAL!r}")


def revert(lab: Lab) -> None:
    """Delete any pod of the scenario and apply the lab's gpu-probe again (safe to repeat).

    The lab's probe names no RuntimeClass: nvidia is the AMI's default runtime.
    """
    _workload.undo(lab, NAME)


# --- symptoms (T+ from the injection) --------------------------------------------------------


def class_missing(ctx: Context) -> Verdict:
    present = runtime_classes(ctx.view)
    held = RUNTIME_CLASS not in present
    return held, f"RuntimeClasses: {json.dumps(present)}"


def apply_again(ctx: Context) -> None:
    """What a learner does next: run the apply again and read its answer."""
    ctx.notes["answer"] = answer(ctx.lab)
    ctx.mark("refused")


def refused(ctx: Context) -> Verdict:
    said = str(ctx.notes.get("answer", "not applied yet"))
    return said.startswith("403 Forbidden") and REFUSAL in said, f"the API server: {said}"


def no_pod(ctx: Context) -> Verdict:
    later = (ctx.seconds_since("refused") or 0.0) >= GRACE
    found = gpu.pod(ctx.view, PROBE)
    return later and found is None, f"{PROBE}: {'absent' if found is None else 'exists'}"


symptoms = [
    Check(f"no RuntimeClass {RUNTIME_CLASS} in the cluster", class_missing, 60, then=apply_again),
    Check(REFUSED, refused, 60),
    Check(NO_POD, no_pod, 120),
]  # fmt: skip


# --- diagnosis: the apply's answer -> no pod -> the RuntimeClasses -> the node's runtime ------


def diagnose(ctx: Context) -> list[Finding]:
    """The apply's own answer -> no pod to describe -> which RuntimeClasses exist -> which
    runtime the GPU nodes use by default -> the fix."""
    lab, view = ctx.lab, ctx.view
    manifest = _workload.manifest(NAME).relative_to(_workload.REPO)
    return [
        Finding("1. The apply's answer", f"kubectl apply -f {manifest}", answer(lab),
                "refused by admission at create time: an API error, nothing was made"),
        Finding("2. Pod: anything to describe?", f"kubectl get pod {PROBE}",
                "exists" if gpu.pod(view, PROBE) else f'pods "{PROBE}" not found',
                "no pod, so no Pending and no events: the error is only where the create came "
                "from", trap="a bad pod spec shows up as a Pending pod"),
        Finding("3. Which RuntimeClasses exist?", "kubectl get runtimeclass",
                json.dumps(runtime_classes(view)),
                f"the operator's nvidia (nvidia-cdi, nvidia-legacy while CDI is on); "
                f"{RUNTIME_CLASS} is the runtime binary's name, not a RuntimeClass"),
        Finding("4. Which runtime do GPU nodes use?", "on a GPU node: grep default_runtime_name "
                "/etc/containerd/config.toml", 'default_runtime_name = "nvidia"',
                "nodeadm makes nvidia the default on the AL2023 NVIDIA AMI: GPU pods need no "
                "runtimeClassName", real_cluster_only=True),
        Finding("5. The fix", "the pod spec", f"runtimeClassName: {RUNTIME_CLASS}",
                "drop runtimeClassName (or name nvidia, which exists)"),
    ]  # fmt: skip


def state(ctx: Context) -> dict[str, str]:
    """The workload rows and the RuntimeClasses, compared between baseline, fault, recovery."""
    classes = ", ".join(sorted(runtime_classes(ctx.view)))
    return _workload.state(ctx) | {"RuntimeClasses": classes}


look = [
    Step(f"kubectl apply -f {_workload.manifest(NAME).relative_to(_workload.REPO)}", REFUSAL,
         "refused at create time: an API error, not a Pending pod"),
    Step(f"kubectl get pod {PROBE}", f'pods "{PROBE}" not found',
         "no pod: nothing Pending, nothing to describe"),
    Step("kubectl get runtimeclass", "nvidia",
         f"what exists: the operator's RuntimeClasses, and no {RUNTIME_CLASS}"),
]  # fmt: skip


SCENARIO = _workload.scenario(
    # The refused create leaves no object behind (the doctor sees a RuntimeClass only where a
    # Deployment, Job or DaemonSet template names it): a read-only check finds nothing here.
    doctor_finding=None,
    name=NAME,
    summary=f"a pod naming RuntimeClass {RUNTIME_CLASS}, which does not exist: refused at "
    "create time (403), no pod, nothing Pending",
    about=__doc__ or "",
    risk="none: the API server refuses the pod; nothing is made",
    inject=inject,
    revert=revert,
    symptoms=symptoms,
    diagnose=diagnose,
    traps=traps,
    look=look,
    baseline=baseline,
    state=state,
    watch=watch,
)
