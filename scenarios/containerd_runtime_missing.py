"""The ClusterPolicy names a runtime the nodes' containerd lacks: operand pods never get a sandbox.

`spec.operator.runtimeClass` is two things at once for GPU Operator v25.3.4: the
`runtimeClassName` it renders into every operand DaemonSet (device plugin, GFD, DCGM exporter,
validator: `setRuntimeClass`, controllers/object_controls.go:2424-2431), and the name *and
handler* of the RuntimeClass it creates (`transformRuntimeClass`, :4725-4736). Set it to
`nvidia-experimental` (a runtime name the toolkit once configured beside `nvidia`, copied from
an older cluster's values) and the operator creates RuntimeClass `nvidia-experimental` with
handler `nvidia-experimental`, which the API server admits, and rolls the operands to it. The
AL2023 NVIDIA AMI's containerd knows only `nvidia` (nodeadm's config) and runc (built in), so
kubelet's RunPodSandbox fails on each replaced pod, and keeps failing after its back-off:
`Failed to create pod sandbox: rpc error: code = Unknown desc = unable to get OCI runtime for
sandbox "<id>": no runtime for "nvidia-experimental" is configured` (containerd 2.x; the
k0s write-up's `failed to get sandbox runtime: ...` is containerd 1.7's wording). The pods stay
Pending (`Init:0/N` or ContainerCreating), the rollout stops at one node per DaemonSet
(maxUnavailable 1), so that node advertises 0 GPUs, and the ClusterPolicy goes `notReady`.
This is the k0s story from the other side: the RuntimeClass exists and looks right, the handler
is what containerd must know. Deleting the stuck pods changes nothing; naming a runtime the
nodes have (`nvidia`) rolls the operands back.
"""

from __future__ import annotations

import json
from typing import Any

from labs.errors import LabError
from labs.kube import gpu, probes, rest
from labs.kube.changes import patch_cluster_policy
from labs.kube.resources import CLUSTER_POLICIES, PODS, RUNTIME_CLASSES
from labs.kube.view import ClusterView, Objects, WatchedKind, standard_kinds
from labs.lab import Lab
from labs.run.contract import (
    ByHand,
    Cause,
    Check,
    Context,
    Facts,
    Finding,
    Needs,
    Step,
    Trap,
    Verdict,
)
from scenarios import _checks, _words
from scenarios.runtimeclass_missing import runtime_classes

PROBE = probes.probe_name()
HANDLER = "nvidia-experimental"  # a runtime the AL2023 NVIDIA AMI's containerd does not have
RUNTIME = "nvidia"  # the chart's operator.runtimeClass, and nodeadm's default runtime
BEFORE = "operator_runtime_class_before"  # the lab record's note of the value the fault replaced
SANDBOX = "FailedCreatePodSandBox"
NO_RUNTIME = f'no runtime for "{HANDLER}" is configured'
CLASS_LOOKS_FINE = f"RuntimeClass {HANDLER} exists with handler {HANDLER} (trap)"
RESTART_NO_HELP = "the stuck pod, deleted, comes back and fails the same way (trap)"
traps = [
    Trap("the RuntimeClass exists, so the runtime does", "`kubectl get runtimeclass` lists it: "
         "the runtime is there", f"{HANDLER} listed, handler {HANDLER}; containerd has no such "
         "runtime", "a RuntimeClass is only a name for a handler: the node's containerd config "
         "(`containerd config dump`) is what must have it", shown_by=CLASS_LOOKS_FINE),
    Trap("restarting the stuck pods helps", "a deleted pod comes back healthy",
         "the DaemonSet's new pod names the same RuntimeClass and fails the same way",
         "the pod is not broken, the spec the operator renders is: fix the ClusterPolicy",
         shown_by=RESTART_NO_HELP),
]  # fmt: skip


def watch(lab: Lab) -> list[WatchedKind]:
    """The lab's standard kinds and the RuntimeClasses."""
    classes = WatchedKind("runtimeclasses", lab.kube, RUNTIME_CLASSES)
    return [*standard_kinds(lab.kube, lab.operator_namespace), classes]


def runtime_class(policy: dict[str, Any] | None) -> str:
    """The operator's runtime class: spec.operator.runtimeClass, `nvidia` when unset."""
    operator = (((policy or {}).get("spec") or {}).get("operator")) or {}
    return str(operator.get("runtimeClass") or RUNTIME)


def rendered_classes(objects: Objects) -> dict[str, str]:
    """Operand DaemonSet -> the runtimeClassName its pod template names (those that name one)."""
    named = {gpu.name_of(d): gpu.pod_template_spec(d).get("runtimeClassName")
             for d in gpu.operand_daemonsets(objects)}  # fmt: skip
    return {name: str(value) for name, value in named.items() if value}


def sandbox_failures(objects: Objects) -> list[tuple[dict[str, Any], str]]:
    """(pod, latest message) of operator pods still Pending whose sandbox containerd refused
    for lack of the runtime, by pod name."""
    latest: dict[str, str] = {}
    for event in gpu.events_with_reason(objects, "operator_events", SANDBOX):
        uid = str((event.get("involvedObject") or {}).get("uid"))
        if NO_RUNTIME in str(event.get("message")):
            latest[uid] = str(event.get("message"))
    pods = [p for p in objects.objects("operator_pods") if p["metadata"]["uid"] in latest]
    stuck = [p for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
    return [(p, latest[p["metadata"]["uid"]]) for p in sorted(stuck, key=gpu.name_of)]


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the GPU nodes, the runtime class the
    operator uses and the operand DaemonSets' counts."""
    current = runtime_class(gpu.cluster_policy(view))
    if current == HANDLER:
        raise LabError(
            f"the ClusterPolicy already names runtimeClass {HANDLER}; set it back first: "
            f"kubectl patch clusterpolicy {gpu.CLUSTER_POLICY_NAME} --type=merge -p "
            f'\'{{"spec":{{"operator":{{"runtimeClass":"{RUNTIME}"}}}}}}\''
        )
    run = probes.run_probe(lab, view, lab.settings.probe_timeout)
    return {
        "probe_output": run.gpu_line,
        "gpu_nodes": [gpu.name_of(n) for n in gpu.gpu_nodes(view)],
        "runtime_class": current,
        "operands": {n: c[0] for n, c in gpu.operand_counts(view).items()},
    }


def inject(lab: Lab) -> None:
    """Delete the baseline probe, note the ClusterPolicy's spec.operator.runtimeClass in the
    lab's record, then merge-patch it to nvidia-experimental (a runtime the nodes' containerd
    does not have).

    The probe goes first: the one the recovery runs is then a new one, never the baseline's.
    """
    probes.delete_probe(lab, lab.settings.probe_timeout)
    policy = rest.read(lab.kube, CLUSTER_POLICIES.path(name=gpu.CLUSTER_POLICY_NAME))
    current = runtime_class(policy)
    if current != HANDLER:  # a second injection keeps the first one's note
        lab.update(**{BEFORE: current})
    patch_cluster_policy(lab, {"spec": {"operator": {"runtimeClass": HANDLER}}})


def _class_back(lab: Lab) -> str:
    """The runtime class the fault replaced (the lab's note), else the chart's `nvidia`."""
    noted = str(lab.record.get(BEFORE) or RUNTIME)
    return RUNTIME if noted == HANDLER else noted


def reset(lab: Lab) -> None:
    """Delete RuntimeClass nvidia-experimental, which the operator created for the fault and
    never removes (safe to repeat; kept while the ClusterPolicy still names it)."""
    policy = rest.read(lab.kube, CLUSTER_POLICIES.path(name=gpu.CLUSTER_POLICY_NAME))
    if runtime_class(policy) != HANDLER:
        rest.delete(lab.kube, RUNTIME_CLASSES.path(name=HANDLER))


def revert(lab: Lab) -> None:
    """Merge-patch spec.operator.runtimeClass back to the noted value (nvidia without a note),
    then delete the RuntimeClass the fault made the operator create (safe to repeat)."""
    patch_cluster_policy(lab, {"spec": {"operator": {"runtimeClass": _class_back(lab)}}})
    reset(lab)


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while the ClusterPolicy's runtime class is nvidia-experimental."""
    return runtime_class(gpu.cluster_policy(view)) == HANDLER


def state(ctx: Context) -> dict[str, str]:
    """The summary rows, compared between baseline, fault and recovery."""
    policy = gpu.cluster_policy(ctx.view)
    classes = runtime_classes(ctx.view)
    return {
        "ClusterPolicy spec.operator.runtimeClass": runtime_class(policy),
        "ClusterPolicy status.state": gpu.policy_state(policy),
        "RuntimeClasses": ", ".join(f"{n} ({h})" for n, h in sorted(classes.items())),
        "operand DaemonSets (ready/desired)": gpu.describe_operands(ctx.view),
        "allocatable nvidia.com/gpu": gpu.describe_allocatable(ctx.view),
    }


# --- symptoms (T+ from the injection) --------------------------------------------------------


def operands_rendered(ctx: Context) -> Verdict:
    rendered = rendered_classes(ctx.view)
    held = bool(rendered) and set(rendered.values()) == {HANDLER}
    return held, f"runtimeClassName: {json.dumps(rendered)}"


def class_looks_fine(ctx: Context) -> Verdict:
    classes = runtime_classes(ctx.view)
    return classes.get(HANDLER) == HANDLER, f"RuntimeClasses (name: handler): {json.dumps(classes)}"


def sandbox_refused(ctx: Context) -> Verdict:
    failures = sandbox_failures(ctx.view)
    if not failures:
        return False, f"no Pending operand pod with a {SANDBOX} Event naming {HANDLER} yet"
    pod, message = failures[0]
    return True, f"{gpu.name_of(pod)} Pending on {pod['spec'].get('nodeName')}: {message}"


def delete_stuck_pod(ctx: Context) -> None:
    """Do what a person tries first: delete a stuck pod (its DaemonSet makes a new one)."""
    failures = sandbox_failures(ctx.view)
    if not failures:
        return
    pod = failures[0][0]
    owner = next(o["name"] for o in pod["metadata"].get("ownerReferences") or [{"name": ""}])
    ctx.notes["deleted"] = {"name": gpu.name_of(pod), "uid": pod["metadata"]["uid"],
                            "node": pod["spec"].get("nodeName"), "owner": owner}  # fmt: skip
    namespace = ctx.lab.operator_namespace
    rest.delete(ctx.lab.kube, PODS.path(namespace, gpu.name_of(pod)))


def restart_no_help(ctx: Context) -> Verdict:
    deleted = ctx.notes.get("deleted")
    if not deleted:
        return False, "no stuck pod deleted yet"
    again = [
        (pod, message)
        for pod, message in sandbox_failures(ctx.view)
        if pod["metadata"]["uid"] != deleted["uid"]
        and pod["spec"].get("nodeName") == deleted["node"]
        and any(o.get("name") == deleted["owner"] for o in pod["metadata"]["ownerReferences"])
    ]
    if not again:
        return False, f"deleted {deleted['name']}; no new pod of {deleted['owner']} refused yet"
    successor, message = again[0]
    return True, f"deleted {deleted['name']}; its successor {gpu.name_of(successor)}: {message}"


def rollout_stopped(ctx: Context) -> Verdict:
    values = gpu.allocatable_by_node(ctx.view)
    gpus = sorted(str(values.get(n)) for n in ctx.baseline["gpu_nodes"])
    return gpus == ["0", "1"], gpu.describe_allocatable(ctx.view)


def policy_not_ready(ctx: Context) -> Verdict:
    policy = gpu.cluster_policy(ctx.view) or {}
    conditions = (policy.get("status") or {}).get("conditions") or []
    error: dict[str, Any] = next((c for c in conditions if c.get("type") == "Error"), {})
    state = gpu.policy_state(policy)
    return state == "notReady", f"status.state {state}; {error.get('message') or 'no Error yet'}"


symptoms = [
    Check(f"the operator renders runtimeClassName {HANDLER} into every operand DaemonSet",
          operands_rendered, 60),
    Check(CLASS_LOOKS_FINE, class_looks_fine, 60),
    Check(f"an operand pod Pending: {SANDBOX} `... {NO_RUNTIME}`", sandbox_refused, 90,
          then=delete_stuck_pod),
    Check(RESTART_NO_HELP, restart_no_help, 120),
    Check("the rollout stops at one node: it advertises 0 GPUs, the other still 1",
          rollout_stopped, 120),
    Check("ClusterPolicy status.state notReady", policy_not_ready, 120),
]  # fmt: skip


# --- diagnosis: pods -> their events -> RuntimeClasses -> DaemonSets -> ClusterPolicy -> node -


def diagnose(ctx: Context) -> list[Finding]:
    """Stuck operand pods -> their sandbox Events -> the RuntimeClasses -> what the DaemonSets
    name -> the ClusterPolicy that renders it -> containerd's runtimes on the node."""
    view, ns = ctx.view, ctx.lab.operator_namespace
    failures = sandbox_failures(view)
    policy = gpu.cluster_policy(view)
    deleted = ctx.notes.get("deleted") or {}
    stuck = ", ".join(f"{gpu.name_of(p)} on {p['spec'].get('nodeName')}" for p, _ in failures)
    first = failures[0] if failures else None
    return [
        Finding("1. Pods: which operands do not start?", f"kubectl -n {ns} get pods -o wide",
                f"Pending: {stuck or 'none'}; {gpu.describe_operands(view)}",
                "one pod per operand DaemonSet is stuck before its containers, each on a node "
                "whose other pods run"),
        Finding("2. Their events", f"kubectl -n {ns} describe pod "
                f"{gpu.name_of(first[0]) if first else '<stuck pod>'}",
                first[1] if first else f"no {SANDBOX} Event",
                "kubelet cannot create the pod's sandbox: containerd has no runtime by the "
                "handler's name. Not an image, not a crash: nothing of the pod ever ran"),
        Finding("3. Restart it?", f"kubectl -n {ns} delete pod {deleted.get('name', '<pod>')}",
                restart_no_help(ctx)[1],
                "the DaemonSet's new pod fails the same way: the spec is wrong, not the pod",
                trap="restarting the stuck pods helps"),
        Finding("4. Which RuntimeClasses exist?", "kubectl get runtimeclass",
                json.dumps(runtime_classes(view)),
                f"{HANDLER} exists, so admission took the pods; its handler is the name "
                "containerd must know", trap="the RuntimeClass exists, so the runtime does"),
        Finding("5. What do the operands name?", f"kubectl -n {ns} get ds -o custom-columns="
                "NAME:.metadata.name,RUNTIMECLASS:.spec.template.spec.runtimeClassName",
                json.dumps(rendered_classes(view)),
                "every operand but NFD names it: the operator rendered it, from one setting"),
        Finding("6. The ClusterPolicy", "kubectl get clusterpolicy cluster-policy -o "
                "jsonpath='{.spec.operator.runtimeClass} {.status.state}'",
                f"runtimeClass {runtime_class(policy)}, status.state {gpu.policy_state(policy)}",
                "spec.operator.runtimeClass is the smoking gun: the operator creates the "
                "RuntimeClass with that name as its handler and puts it on every operand"),
        Finding("7. containerd's runtimes on a GPU node", "on the node (SSM): containerd config "
                "dump | grep -E 'default_runtime_name|runtimes\\.'",
                "default_runtime_name = \"nvidia\"; runtimes.nvidia, runtimes.runc",
                "nodeadm configures nvidia (and containerd keeps runc): name one of those. Fix: "
                f"kubectl patch clusterpolicy cluster-policy --type=merge -p "
                f'\'{{"spec":{{"operator":{{"runtimeClass":"{RUNTIME}"}}}}}}\'',
                real_cluster_only=True),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------


def class_known(ctx: Context) -> Verdict:
    named = runtime_class(gpu.cluster_policy(ctx.view))
    return named != HANDLER, f"spec.operator.runtimeClass {named}"


def operands_back(ctx: Context) -> Verdict:
    rendered = rendered_classes(ctx.view)
    counts = gpu.operand_counts(ctx.view)
    wanted = ctx.baseline["operands"]
    ready = {n: c[0] for n, c in counts.items()} == wanted and all(
        c[2] == c[0] for c in counts.values()
    )
    held = ready and HANDLER not in rendered.values() and not sandbox_failures(ctx.view)
    return held, f"{gpu.describe_operands(ctx.view)}; runtimeClassName: {json.dumps(rendered)}"


def probe_again(ctx: Context) -> None:
    probes.recreate_probe(ctx.lab, ctx.lab.settings.probe_timeout)


def class_gone(ctx: Context) -> Verdict:
    classes = runtime_classes(ctx.view)
    return HANDLER not in classes, f"RuntimeClasses: {json.dumps(classes)}"


recovery = [
    Check(f"ClusterPolicy spec.operator.runtimeClass names a runtime the nodes have, not "
          f"{HANDLER}", class_known, 60, names_cause=True),
    Check("every operand DaemonSet rolled back, all ready, no pod refused a sandbox",
          operands_back, 180),
    Check("allocatable nvidia.com/gpu back to 1 on every GPU node",
          _checks.allocatable_everywhere("1"), 120),
    Check("ClusterPolicy status.state ready", _checks.policy_ready_again, 180, then=probe_again),
    Check(f"RuntimeClass {HANDLER}, left by the operator, removed", class_gone, 60, tool=True),
    Check("gpu-probe, run again, prints the baseline's GPU line",
          _checks.probe_output_as_baseline(PROBE), 420, tool=True),
]  # fmt: skip


POLICY_PATCH = "kubectl patch clusterpolicy cluster-policy --type=merge -p "
RUNTIME_CLASS = '\'{"spec":{"operator":{"runtimeClass":"%s"}}}\''
by_hand = ByHand(
    inject=[POLICY_PATCH + RUNTIME_CLASS % HANDLER],
    look=[
        Step("kubectl -n $GPU_OPERATOR_NS get events "
             "--field-selector reason=FailedCreatePodSandBox",
             NO_RUNTIME, "kubelet cannot create the operand pods' sandboxes"),
        Step("kubectl get runtimeclass", HANDLER,
             "the RuntimeClass exists (trap): containerd is what lacks the handler"),
        Step("kubectl -n $GPU_OPERATOR_NS get ds nvidia-device-plugin-daemonset "
             "-o jsonpath='{.spec.template.spec.runtimeClassName}{\"\\n\"}'", HANDLER,
             "the operator rendered it into the operands"),
        Step("kubectl get clusterpolicy cluster-policy -o jsonpath='{.spec.operator.runtimeClass}"
             " {.status.state}{\"\\n\"}'", f"{HANDLER} notReady", "the smoking gun, and the state"),
    ],
    revert=[POLICY_PATCH + RUNTIME_CLASS % RUNTIME, f"kubectl delete runtimeclass {HANDLER}"],
)  # fmt: skip


FACTS = Facts(
    summary=f"ClusterPolicy spec.operator.runtimeClass {HANDLER}: operand pods never get a "
    "sandbox (FailedCreatePodSandBox, no runtime configured), the ClusterPolicy notReady",
    area="operator",
    needs=Needs(gpu_nodes=2, operator=True),
    risk="medium: on each GPU node one operand pod per DaemonSet is replaced by one that never "
    "starts, so one node stops advertising its GPU (running GPU pods keep theirs); one "
    "reversible ClusterPolicy field, its old value noted in the lab's record",
    duration="about 3 minutes on EKS (sandbox failures within 30 s, rollback < 1 minute)",
    doctor_finding="containerd-runtime-missing",
    cause=Cause(
        plain=f"The ClusterPolicy's spec.operator.runtimeClass names a runtime ({HANDLER}) "
        "that the nodes' containerd is not configured with, so no operand pod gets a sandbox.",
        names=(("containerd", "runtime handler", "handler", "sandbox", "no runtime configured",
                "container runtime"),),
        clues=(
            ("RuntimeClass", "runtimeClassName"),
            _words.CLUSTER_POLICY,
            _words.OPERANDS,
            (HANDLER, "experimental"),
            ("FailedCreatePodSandBox", "ContainerCreating", "sandbox"),
            ("not configured", "config", "config.toml", "runtime handler", "handler"),
        ),
    ),
    alerts=("GpuAllocatableZeroOnGpuNode", "GpuOperandDaemonSetUnavailable",
            "GpuClusterPolicyNotReady"),
    state=state,
    gauges=gpu.gpu_gauges(PROBE),
    watch=watch,
    by_hand=by_hand,
    reset=reset,
)  # fmt: skip
