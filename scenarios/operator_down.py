"""Scale the GPU Operator's controller to 0: nothing looks wrong while nothing is managed.

Operands keep running and every GPU stays advertised. But nobody reconciles: a ClusterPolicy
edit is never rendered into its DaemonSet, a deleted operand DaemonSet is not re-created, the
ClusterPolicy's status stays at the last `ready` the controller wrote (and new GPU nodes would
never get their `nvidia.com/gpu.deploy.*` labels). The evidence is on the controller:
Deployment `gpu-operator` wants 0 replicas and has no pod, so no fresh log lines. Scaling it
back to 1 makes the pending work happen: edit rendered, DaemonSet re-created, status live.

Why scale to 0 rather than an OOMKilled crash loop: one field on the scale subresource, set
back by the revert, is idempotent and leaves the chart's Deployment spec as helm wrote it. A
too small memory limit changes the pod template (a rollout, helm drift, an old limit to
remember), OOMs only if the operator's footprint on this cluster exceeds it, and backs off up
to 5 minutes, so fault and recovery would be slow and uncertain. The ClusterPolicy side looks
the same; the diagnosis shows where a crash loop would differ.
"""

from __future__ import annotations

import json
from typing import Any

from labs.errors import LabError
from labs.kube import gpu
from labs.kube.changes import delete_daemonset, scale_deployment, set_component_env
from labs.kube.logs import operator_log, operator_step
from labs.kube.view import ClusterView
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
from scenarios import _checks

# The harmless edit: GFD relabels its node every 30 s instead of the 60 s its asset sets (the
# operator's DaemonSet carries GFD_SLEEP_INTERVAL=60s already, so the edit must differ from it).
ENV, VALUE, COMPONENT = "GFD_SLEEP_INTERVAL", "30s", "gfd"
GONE = gpu.DCGM_EXPORTER_DAEMONSET  # monitoring only: deleting it costs no GPU
GRACE = 30.0  # real seconds; a running operator acts within 10 s
# Ready for this long before the scale-down: the operator may still be writing what it saw
# mid-rollout, and a scale-down then would freeze a `notReady`.
SETTLE = 5.0
LOOKS_FINE = "operands keep running and every GPU node still offers nvidia.com/gpu 1 (trap)"
EDIT_IGNORED = f"ClusterPolicy edit ignored: {gpu.GFD_DAEMONSET} keeps {ENV} 30 s after it left"
FROZEN = "ClusterPolicy status frozen at ready though an enabled operand is gone (trap)"
traps = [
    Trap("everything looks fine", "a dead operator shows up as missing GPUs",
         "GPUs advertised, GPU pods run, every operand Ready",
         "operands run without their controller; only changes go unhandled. Alert on the "
         "gpu-operator Deployment's available replicas", shown_by=LOOKS_FINE),
    Trap("status.state ready means the operator is healthy", "a live status",
         "the last `ready` the controller wrote, while an enabled DaemonSet is missing",
         "nobody writes the status any more: check the controller, not the ClusterPolicy",
         shown_by=FROZEN),
    Trap("edits take effect within seconds", "the operator renders a ClusterPolicy edit in < 10 s",
         "nothing happens until a controller runs again", "edits queue up silently",
         shown_by=EDIT_IGNORED),
]  # fmt: skip


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Keep the GPU nodes, the operand DaemonSets' counts and uids, and the operator's pods."""
    missing = [n for n in (gpu.GFD_DAEMONSET, GONE) if gpu.daemonset(view, n) is None]
    if missing:
        raise LabError(
            f"operator-down edits {gpu.GFD_DAEMONSET} and deletes {GONE}, but "
            f"{', '.join(missing)} does not exist: enable it in the ClusterPolicy (spec.gfd, "
            "spec.dcgmExporter) and wait for the operator, or pick another scenario"
        )
    return {
        "gpu_nodes": [gpu.name_of(n) for n in gpu.gpu_nodes(view)],
        "operands": gpu.operand_counts(view),
        "uids": {gpu.name_of(d): d["metadata"]["uid"] for d in gpu.operand_daemonsets(view)},
        "operator_pods": [gpu.name_of(p) for p in gpu.operator_pods(view)],
    }


def _rendered(view: ClusterView) -> bool:
    """The marker is rolled out in the GFD DaemonSet and the operator reports ready."""
    ds = gpu.daemonset(view, gpu.GFD_DAEMONSET)
    return (
        gpu.daemonset_env(ds).get(ENV) == VALUE
        and gpu.daemonset_rolled_out(ds)
        and gpu.policy_state(gpu.cluster_policy(view)) == "ready"
        and gpu.operator_available(gpu.operator_deployment(view))
    )


def inject(lab: Lab) -> None:
    """Add GFD_SLEEP_INTERVAL=30s (GFD relabels more often: harmless) to spec.gfd.env, wait
    until the operator has rolled it out and reported ready for 5 s, then scale Deployment
    gpu-operator to 0 replicas (kubectl scale) and wait until its pod is gone (its graceful
    deletion takes a moment). Once it is down, the run takes the edit back
    and deletes nvidia-dcgm-exporter, to show that neither is acted on."""
    set_component_env(lab, COMPONENT, ENV, VALUE)
    with lab.view() as view:
        view.wait_for(_rendered, lab.settings.operator_ready_timeout,
                      f"the operator to roll {ENV} out in {gpu.GFD_DAEMONSET}",
                      steady=SETTLE)  # fmt: skip
    scale_deployment(lab, lab.operator_namespace, gpu.OPERATOR_DEPLOYMENT, 0)
    with lab.view() as view:  # down means its pod is gone, not only its replicas at 0
        view.wait_for(lambda v: not gpu.operator_pods(v), lab.settings.operator_ready_timeout,
                      "the operator's pod to stop")  # fmt: skip


def revert(lab: Lab) -> None:
    """Take GFD_SLEEP_INTERVAL out of spec.gfd.env again, then scale Deployment gpu-operator
    back to 1 replica (safe to repeat)."""
    set_component_env(lab, COMPONENT, ENV, None)
    scale_deployment(lab, lab.operator_namespace, gpu.OPERATOR_DEPLOYMENT, 1)


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while Deployment gpu-operator wants 0 replicas, or spec.gfd.env still holds the
    harmless edit (an injection stopped between its two steps)."""
    scaled_down = gpu.wanted_replicas(gpu.operator_deployment(view)) == 0
    return scaled_down or ENV in gpu.component_env(gpu.cluster_policy(view), COMPONENT)


# --- symptoms (T+ from the injection) --------------------------------------------------------


def operator_gone(ctx: Context) -> Verdict:
    deployment = gpu.operator_deployment(ctx.view)
    held = gpu.wanted_replicas(deployment) == 0 and not gpu.operator_pods(ctx.view)
    return held, f"{gpu.describe_operator(ctx.view)}: no pod, so no log lines"


def note_status(ctx: Context) -> None:
    ctx.notes["status"] = (gpu.cluster_policy(ctx.view) or {}).get("status")


def looks_fine(ctx: Context) -> Verdict:
    advertised = gpu.allocatable_by_node(ctx.view)
    held = (
        operator_gone(ctx)[0]
        and gpu.operand_counts(ctx.view) == ctx.baseline["operands"]
        and all(advertised.get(n) == "1" for n in ctx.baseline["gpu_nodes"])
    )
    return held, f"{gpu.describe_operands(ctx.view)}; {gpu.describe_allocatable(ctx.view)}"


def edit_and_delete(ctx: Context) -> None:
    """What a learner tries next: take the edit back, delete a DaemonSet."""
    set_component_env(ctx.lab, COMPONENT, ENV, None)
    delete_daemonset(ctx.lab, ctx.lab.operator_namespace, GONE)
    ctx.mark("edited")


def _later(ctx: Context) -> bool:
    return (ctx.seconds_since("edited") or 0.0) >= GRACE


def edit_ignored(ctx: Context) -> Verdict:
    spec = gpu.component_env(gpu.cluster_policy(ctx.view), COMPONENT)
    rendered = gpu.daemonset_env(gpu.daemonset(ctx.view, gpu.GFD_DAEMONSET))
    held = _later(ctx) and ENV not in spec and rendered.get(ENV) == VALUE
    return held, f"spec.gfd.env {json.dumps(spec)}; {gpu.GFD_DAEMONSET} env {json.dumps(rendered)}"


def not_recreated(ctx: Context) -> Verdict:
    seen = gpu.describe_daemonset(ctx.view, GONE)
    return _later(ctx) and seen == "NotFound", f'daemonsets.apps "{GONE}": {seen}'


def status_frozen(ctx: Context) -> Verdict:
    policy = gpu.cluster_policy(ctx.view) or {}
    same = "status" in ctx.notes and policy.get("status") == ctx.notes["status"]
    state = gpu.policy_state(policy)
    held = same and state == "ready" and not_recreated(ctx)[0]
    return held, f"status.state {state!r}, unchanged since the scale-down: {same}"


symptoms = [
    Check("Deployment gpu-operator at 0 replicas: no operator pod, no fresh log lines",
          operator_gone, 60, then=note_status),
    Check(LOOKS_FINE, looks_fine, 60, then=edit_and_delete),
    Check(EDIT_IGNORED, edit_ignored, 120),
    Check(f"deleted DaemonSet {GONE} not re-created 30 s later", not_recreated, 120),
    Check(FROZEN, status_frozen, 120),
]  # fmt: skip


# --- diagnosis: GPUs (fine) -> operands vs spec -> status -> the controller ------------------


def diagnose(ctx: Context) -> list[Finding]:
    """GPUs (fine) -> operand DaemonSets against the ClusterPolicy spec -> its status -> the
    controller's Deployment, its pods' last termination reason and its log."""
    lab, view = ctx.lab, ctx.view
    ns = lab.operator_namespace
    policy = gpu.cluster_policy(view) or {}
    conditions = (policy.get("status") or {}).get("conditions") or []
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    pods = gpu.operator_pods(view)
    log = operator_log(lab, view)
    policy_get = "kubectl get clusterpolicy cluster-policy -o jsonpath="
    return [
        Finding("1. GPUs: advertised?", "kubectl get nodes -o custom-columns=NAME:.metadata.name,"
                "GPU:.status.allocatable.nvidia\\.com/gpu", gpu.describe_allocatable(view),
                "every GPU node offers its GPU: workloads are fine, look at the management",
                trap="everything looks fine"),
        Finding("2. Operands against the spec", f"kubectl -n {ns} get ds",
                f"present: {gpu.describe_operands(view)}",
                f"{GONE} is missing though spec.dcgmExporter.enabled is "
                f"{json.dumps(gpu.component_enabled(policy, 'dcgmExporter'))}: nobody re-made it"),
        Finding("2b. An edit not rendered", policy_get + "'{.spec.gfd.env}' && kubectl -n "
                f"{ns} get ds {gpu.GFD_DAEMONSET} -o jsonpath='{{.spec.template.spec."
                "containers[0].env}'",
                f"spec {json.dumps(gpu.component_env(policy, COMPONENT))}, DaemonSet "
                f"{json.dumps(gpu.daemonset_env(gpu.daemonset(view, gpu.GFD_DAEMONSET)))}",
                "the DaemonSet still carries what the spec dropped: edits are not reconciled",
                trap="edits take effect within seconds"),
        Finding("3. ClusterPolicy status", policy_get + "'{.status.state} {.status.conditions"
                "[?(@.type==\"Ready\")].lastTransitionTime}'",
                f"{gpu.policy_state(policy)} since {ready.get('lastTransitionTime')}",
                "ready, dated before the trouble: a frozen status, not a live one",
                trap="status.state ready means the operator is healthy"),
        Finding("4. The controller", f"kubectl -n {ns} get deploy {gpu.OPERATOR_DEPLOYMENT} "
                "-o jsonpath='{.spec.replicas} {.status.availableReplicas}'",
                gpu.describe_operator(view),
                "spec.replicas 0: scaled down on purpose (or by an automation), not crashing"),
        Finding("4b. Crash or scale?", f"kubectl -n {ns} get pods -l {gpu.OPERATOR_POD_SELECTOR} "
                "-o jsonpath='{range .items[*]}{.metadata.name} {.status.containerStatuses[0]"
                ".lastState.terminated.reason}{\"\\n\"}{end}'",
                "; ".join(f"{gpu.name_of(p)}: {', '.join(gpu.last_terminations(p)) or '-'}"
                          for p in pods) or f"{len(pods)} pod(s) -l {gpu.OPERATOR_POD_SELECTOR}",
                "no pod at all. A crash loop shows a pod in CrashLoopBackOff with "
                "lastState.terminated.reason OOMKilled: raise operator.resources.limits.memory"),
        Finding("4c. Fresh log lines?", f"kubectl -n {ns} logs deploy/{gpu.OPERATOR_DEPLOYMENT} "
                "--tail=20", log[-1] if log else f"no log line: {gpu.describe_operator(view)}",
                "no `ClusterPolicy step completed` lines since the scale-down: nothing reconciles"),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------


def operator_back(ctx: Context) -> Verdict:
    up = gpu.operator_available(gpu.operator_deployment(ctx.view))
    return up, gpu.describe_operator(ctx.view)


def pending_change_applied(ctx: Context) -> Verdict:
    """The spec's env is rendered and the edit's value is gone (the operator's asset has env of
    its own, GFD_SLEEP_INTERVAL=60s among it)."""
    rendered = gpu.daemonset_env(gpu.daemonset(ctx.view, gpu.GFD_DAEMONSET))
    wanted = gpu.component_env(gpu.cluster_policy(ctx.view), COMPONENT)
    applied = rendered.get(ENV) != VALUE and wanted.items() <= rendered.items()
    return applied, f"{gpu.GFD_DAEMONSET} env {json.dumps(rendered)}"


def recreated(ctx: Context) -> Verdict:
    ds = gpu.daemonset(ctx.view, GONE)
    uid = ds["metadata"]["uid"] if ds else None
    held = (
        uid not in (None, ctx.baseline["uids"].get(GONE))
        and gpu.operand_counts(ctx.view).get(GONE) == ctx.baseline["operands"][GONE]
    )
    return held, f"{gpu.describe_daemonset(ctx.view, GONE)}, uid {uid}"


def fresh_log(ctx: Context) -> Verdict:
    pods = [gpu.name_of(p) for p in gpu.operator_pods(ctx.view)]
    if not pods or set(pods) & set(ctx.baseline["operator_pods"]):
        return False, f"operator pods: {', '.join(pods) or 'none'}"
    line = operator_step(ctx.lab, ctx.view, "state-dcgm-exporter", "ready")
    return line is not None, line or "no state-dcgm-exporter/ready line from the new pod yet"


def policy_live(ctx: Context) -> Verdict:
    state = gpu.policy_state(gpu.cluster_policy(ctx.view))
    every = gpu.operand_counts(ctx.view) == ctx.baseline["operands"]
    return every and state == "ready", f"status.state {state!r}; {gpu.describe_operands(ctx.view)}"


recovery = [
    Check("Deployment gpu-operator available again", operator_back, 120),
    Check(f"the pending edit took effect: {gpu.GFD_DAEMONSET} env matches the spec again",
          pending_change_applied, 120),
    Check(f"{GONE} re-created (new uid) and ready on every GPU node", recreated, 120),
    Check("fresh operator log lines from a new pod: state-dcgm-exporter ready", fresh_log, 120),
    Check("ClusterPolicy status.state ready with every operand as in the baseline", policy_live,
          120),
]  # fmt: skip


def state(ctx: Context) -> dict[str, str]:
    """The summary rows, compared between baseline, fault and recovery."""
    return {
        "gpu-operator": gpu.describe_operator_replicas(ctx.view),
        "ClusterPolicy status.state": gpu.policy_state(gpu.cluster_policy(ctx.view)),
        "operand DaemonSets (ready/desired)": gpu.describe_operands(ctx.view),
        f"{gpu.GFD_DAEMONSET} env":
            json.dumps(gpu.daemonset_env(gpu.daemonset(ctx.view, gpu.GFD_DAEMONSET))),
        "allocatable nvidia.com/gpu": gpu.describe_allocatable(ctx.view),
    }  # fmt: skip


BY_HAND_TAKE_BACK = (  # the chart renders no spec.gfd.env: null removes the one added
    'kubectl patch clusterpolicy cluster-policy --type=merge -p \'{"spec":{"gfd":{"env":null}}}\''
)
by_hand = ByHand(
    inject=[
        "kubectl patch clusterpolicy cluster-policy --type=merge "
        f"-p '{{\"spec\":{{\"gfd\":{{\"env\":[{{\"name\":\"{ENV}\",\"value\":\"{VALUE}\"}}]}}}}}}'",
        f"kubectl -n $GPU_OPERATOR_NS wait ds/{gpu.GFD_DAEMONSET} --timeout=120s "
        f"--for=jsonpath='{{.spec.template.spec.containers[0].env[0].value}}'={VALUE}",
        f"kubectl -n $GPU_OPERATOR_NS rollout status ds/{gpu.GFD_DAEMONSET} --timeout=300s",
        "kubectl -n $GPU_OPERATOR_NS scale deploy gpu-operator --replicas=0",
        BY_HAND_TAKE_BACK,
        f"kubectl -n $GPU_OPERATOR_NS delete ds {GONE}",
    ],
    look=[
        Step("kubectl -n $GPU_OPERATOR_NS get deploy gpu-operator "
             "-o jsonpath='{.spec.replicas}{\"\\n\"}'", "0", "scaled to 0 replicas"),
        Step(f"kubectl -n $GPU_OPERATOR_NS get pods -l {gpu.OPERATOR_POD_SELECTOR}",
             "No resources found", "no operator pod, so no log lines and no crash to read"),
        Step("kubectl get nodes -l nvidia.com/gpu.present=true "
             "-o jsonpath='{.items[*].status.allocatable.nvidia\\.com/gpu}{\"\\n\"}'",
             "1 1", "GPUs still advertised (trap)"),
        Step(f"kubectl -n $GPU_OPERATOR_NS get ds {gpu.GFD_DAEMONSET} "
             "-o jsonpath='{.spec.template.spec.containers[0].env}{\"\\n\"}'",
             f'"value":"{VALUE}"', "the edit you took back is still rendered: nobody reconciles"),
        Step(f"kubectl -n $GPU_OPERATOR_NS get ds {GONE}", "NotFound", "and nobody re-creates it"),
        _checks.policy_state_step("a frozen status (trap)"),
    ],
    revert=[
        BY_HAND_TAKE_BACK,
        "kubectl -n $GPU_OPERATOR_NS scale deploy gpu-operator --replicas=1",
    ],
)  # fmt: skip


FACTS = Facts(
    summary="GPU Operator controller scaled to 0: GPUs keep working, but edits, deleted "
    "DaemonSets and the status are left unhandled",
    area="operator",
    needs=Needs(gpu_nodes=2, operator=True),
    risk="low: nothing running is touched; the deleted DaemonSet is DCGM's metrics exporter",
    duration="about 3 minutes on EKS (30 s to show that nothing happens, ~30 s to come back)",
    doctor_finding="operator-scaled-to-zero",
    cause=Cause(
        plain="The GPU Operator's controller Deployment is scaled to 0 replicas, so nothing "
        "reconciles the ClusterPolicy or its operands.",
        names=(
            ("GPU Operator", "operator"),
            (
                "down",
                "scaled to zero",
                "scaled to 0",
                "0 replicas",
                "zero replicas",
                "replicas 0",
                "not running",
                "stopped",
                "dead",
                "missing",
                "gone",
                "crashed",
                "no pod",
                "nothing reconciles",
                "nobody reconciles",
                "not reconcile",
                "0/0",
            ),
        ),
        clues=(("controller", "reconcile"), ("deployment", "replicas")),
    ),
    alerts=("GpuOperatorDown",),
    state=state,
    gauges={
        "gpu-operator pods": lambda objects: len(gpu.operator_pods(objects)),
        "operand DaemonSets": lambda objects: len(gpu.operand_daemonsets(objects)),
        "allocatable nvidia.com/gpu (all GPU nodes)": gpu.total_allocatable,
    },
    by_hand=by_hand,
)
