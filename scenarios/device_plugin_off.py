"""Switch the device plugin off in the ClusterPolicy and watch GPU scheduling stop.

One field, `spec.devicePlugin.enabled`, makes the GPU Operator delete the device-plugin
DaemonSet outright (not scale it to 0); kubelet then advertises `nvidia.com/gpu: 0` on
every GPU node (the key stays; capacity still says 1 for 5 minutes: kubelet keeps a
stopped plugin's GPUs in capacity for its grace period, then shows 0), and a new GPU pod
stays Pending with
`0/4 nodes are available: 4 Insufficient nvidia.com/gpu.` while the ClusterPolicy still
says `ready`. Reverting the field brings a new DaemonSet, the GPUs come back, and the
same Pending pod runs with the baseline's output.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import labs
from labs.kube import gpu, probes
from labs.kube.changes import patch_cluster_policy
from labs.kube.logs import operator_step
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
from scenarios import _checks, _words
from scenarios._node_internals import NVML_TRAP, node_internals

# The operator reads its operands again 5 s of wall time after it wrote notReady
# (gpu-operator v25.3.4 controllers/clusterpolicy_controller.go:193), whatever a rehearsal's pace.
OPERATOR_REQUEUE_SECONDS = 5.0

PROBE = probes.probe_name()
REPO = Path(labs.__file__).resolve().parent.parent
gauges = gpu.gpu_gauges(PROBE)
STATE_STAYS_READY = "ClusterPolicy status.state stays ready (trap)"
ALLOCATABLE_ZERO = 'allocatable nvidia.com/gpu is "0" on every GPU node (key kept)'
traps = [
    Trap("status.state stays ready", "notReady once a component is off", "`ready`",
         "a deliberate disable is a successful reconcile: watch DaemonSets and allocatable",
         shown_by=STATE_STAYS_READY),
    Trap("allocatable key kept at 0", "the nvidia.com/gpu key disappears", 'key kept, value "0"',
         "absent()-based alerts never fire; alert on == 0 joined with nvidia.com/gpu.present",
         shown_by=ALLOCATABLE_ZERO),
    NVML_TRAP,
]  # fmt: skip


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the GPU nodes and the DaemonSet uid."""
    run = probes.run_probe(lab, view, lab.settings.probe_timeout)
    plugin = gpu.daemonset(view)
    return {
        "probe_output": run.gpu_line,
        "probe_node": run.node,
        "gpu_nodes": [gpu.name_of(n) for n in gpu.gpu_nodes(view)],
        "daemonset_uid": plugin["metadata"]["uid"] if plugin else None,
    }


def inject(lab: Lab) -> None:
    """Delete the baseline probe, then merge-patch ClusterPolicy spec.devicePlugin.enabled=false.

    The probe goes first: a pod holding a GPU across a device-plugin restart can confuse
    kubelet's device checkpoint, and the name must be free for the probe that follows.
    """
    probes.delete_probe(lab, lab.settings.probe_timeout)
    patch_cluster_policy(lab, {"spec": {"devicePlugin": {"enabled": False}}})


def revert(lab: Lab) -> None:
    """Merge-patch ClusterPolicy spec.devicePlugin.enabled=true (safe to repeat)."""
    patch_cluster_policy(lab, {"spec": {"devicePlugin": {"enabled": True}}})


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while ClusterPolicy spec.devicePlugin.enabled is false."""
    return gpu.component_enabled(gpu.cluster_policy(view) or {}, "devicePlugin") is False


def state(ctx: Context) -> dict[str, str]:
    """The summary rows, compared between baseline, fault and recovery."""
    policy = gpu.cluster_policy(ctx.view) or {}
    return {
        "ClusterPolicy spec.devicePlugin.enabled":
            str(gpu.component_enabled(policy, "devicePlugin")).lower(),
        "ClusterPolicy status.state": gpu.policy_state(policy),
        "device-plugin DaemonSet": gpu.describe_daemonset(ctx.view),
        "allocatable nvidia.com/gpu": gpu.describe_allocatable(ctx.view),
        "capacity nvidia.com/gpu": gpu.describe_capacity(ctx.view),
        PROBE: gpu.pod_phase(ctx.view, PROBE),
    }  # fmt: skip


# --- symptoms (T+ from the injection) --------------------------------------------------------


def ds_deleted(ctx: Context) -> Verdict:
    seen = gpu.describe_daemonset(ctx.view)
    return seen == "NotFound", f'daemonsets.apps "{gpu.DEVICE_PLUGIN_DAEMONSET}": {seen}'


def probe_again(ctx: Context) -> None:
    probes.recreate_admitted(ctx.lab, ctx.lab.settings.probe_timeout)


def probe_unschedulable(ctx: Context) -> Verdict:
    phase, events = gpu.pod_story(ctx.view, PROBE)
    message = gpu.scheduling_failure(events) or ""
    held = phase == "Pending" and "Insufficient nvidia.com/gpu" in message
    return held, f"{PROBE} {phase}: {message or 'no FailedScheduling event yet'}"


def validator_rolled(ctx: Context) -> Verdict:
    """The operator drops plugin-validation from the validator's template when the plugin is
    off, so the validator is replaced node by node; the operator reads notReady meanwhile."""
    validator = gpu.daemonset(ctx.view, gpu.VALIDATOR_DAEMONSET)
    inits = [c.get("name") for c in gpu.pod_template_spec(validator).get("initContainers") or []]
    held = "plugin-validation" not in inits and gpu.daemonset_rolled_out(validator)
    ready = "/".join(map(str, gpu.daemonset_counts(validator))) if validator else "NotFound"
    return (
        held,
        f"init containers {', '.join(map(str, inits)) or 'none'}; {ready} (desired/current/ready)",
    )


def state_still_ready(ctx: Context) -> Verdict:
    """Ready once the operator has acted on the patch, the validator it rewrote has rolled, and
    a reconcile that read the rollout half-way (it writes notReady, then reads again
    OPERATOR_REQUEUE_SECONDS of wall time later) has had time to read it done."""
    state = gpu.policy_state(gpu.cluster_policy(ctx.view))
    if not (gpu.daemonset(ctx.view) is None and validator_rolled(ctx)[0]):
        ctx.notes.pop("rolled_at", None)
        return False, f"status.state {state!r}; the operator has not finished the toggle yet"
    waited = time.monotonic() - ctx.notes.setdefault("rolled_at", time.monotonic())
    if waited < 2 * OPERATOR_REQUEUE_SECONDS:
        return False, f"status.state {state!r}, {waited:.0f} s after the validator's rollout"
    return state == "ready", f"status.state {state!r} with the DaemonSet gone"


def operator_logged_disabled(ctx: Context) -> Verdict:
    if gpu.daemonset(ctx.view) is not None:
        return False, "the operator has not reconciled the patch yet"
    line = operator_step(ctx.lab, ctx.view, "state-device-plugin", "disabled")
    return line is not None, line or "no state-device-plugin/disabled line in the operator log"


symptoms = [
    Check("device-plugin DaemonSet deleted (NotFound, not scaled to 0)", ds_deleted, 60),
    Check(ALLOCATABLE_ZERO, _checks.allocatable_everywhere("0"), 60, then=probe_again),
    Check("gpu-probe Pending: FailedScheduling, Insufficient nvidia.com/gpu",
          probe_unschedulable, 90),
    Check("the validator rolled without plugin-validation", validator_rolled, 120),
    Check(STATE_STAYS_READY, state_still_ready, 180),
    Check("operator log: state-device-plugin disabled", operator_logged_disabled, 60),
]  # fmt: skip


# --- diagnosis: Pod -> Node -> DaemonSet -> ClusterPolicy/operator -> node internals -------


def diagnose(ctx: Context) -> list[Finding]:
    """Pod events -> node allocatable -> DaemonSet and its node label -> ClusterPolicy spec,
    status and operator log -> node internals (socket dir, driver from a device-mounted pod)."""
    lab, view = ctx.lab, ctx.view
    phase, events = gpu.pod_story(view, PROBE)
    policy = gpu.cluster_policy(view) or {}
    ns = lab.operator_namespace
    policy_get = "kubectl get clusterpolicy cluster-policy -o jsonpath="
    return [
        Finding("1. Pod: why Pending?", f"kubectl describe pod {PROBE}",
                f"{phase}: {gpu.scheduling_failure(events)}",
                "Insufficient nvidia.com/gpu on every node, system nodes included: no node "
                "offers a free GPU. Next: node allocatable against the pod's request"),
        Finding("2. Node: are GPUs advertised?", "kubectl get nodes -o json | jq '.items[] | "
                '{name: .metadata.name, alloc: .status.allocatable["nvidia.com/gpu"], '
                'cap: .status.capacity["nvidia.com/gpu"]}\'', gpu.describe_advertised(view),
                "GPU nodes advertise 0 with the key kept (system nodes have none): the "
                "advertising stopped. Next: the advertiser, the device plugin",
                trap="allocatable key kept at 0"),
        Finding("3. DaemonSet: is the advertiser alive?", f"kubectl get ds -n {ns}",
                f"present: {', '.join(gpu.daemonset_names(view)) or 'none'}",
                f"{gpu.DEVICE_PLUGIN_DAEMONSET} is gone while the other operands run"),
        Finding("3b. DaemonSet: selector or deletion?",
                f"kubectl get nodes -L {gpu.DEVICE_PLUGIN_DEPLOY_LABEL}",
                gpu.describe_gpu_node_label(view, gpu.DEVICE_PLUGIN_DEPLOY_LABEL),
                "the nodeSelector label is still true: the DaemonSet itself was deleted. "
                "Next: whoever deletes it, the operator reconciling the ClusterPolicy"),
        Finding("4. ClusterPolicy spec", policy_get + "'{.spec.devicePlugin}'",
                json.dumps(policy.get("spec", {}).get("devicePlugin")),
                "enabled: false is the smoking gun: the operator deleted the DaemonSet as told"),
        Finding("4b. ClusterPolicy status", policy_get + "'{.status.state}'",
                gpu.policy_state(policy),
                "ready although the GPUs are gone: a deliberate disable reconciles successfully",
                trap="status.state stays ready"),
        Finding("4c. Operator health", f"kubectl -n {ns} get deploy gpu-operator",
                gpu.describe_deployment(gpu.operator_deployment(view)),
                "the controller runs and reconciles: the deletion was intended, not a crash"),
        Finding("4d. Operator log", f"kubectl logs -n {ns} deploy/gpu-operator --tail=120 "
                "| grep -i device-plugin",
                operator_step(lab, view, "state-device-plugin", "disabled") or "no such line",
                "the operator recorded the state-device-plugin step as disabled"),
        *node_internals(ctx),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------


def ds_recreated(ctx: Context) -> Verdict:
    plugin = gpu.daemonset(ctx.view)
    uid = plugin["metadata"]["uid"] if plugin else None
    held = uid is not None and uid != ctx.baseline["daemonset_uid"]
    return held, f"uid {uid} (baseline {ctx.baseline['daemonset_uid']})"


recovery = [
    Check("device-plugin DaemonSet re-created with a new uid", ds_recreated, 60),
    Check("device-plugin ready on 1 node", _checks.plugins_ready(1), 60),
    Check("allocatable nvidia.com/gpu back to 1 on every GPU node",
          _checks.allocatable_everywhere("1"), 120),
    Check("device-plugin DaemonSet N/N/N ready", _checks.plugins_ready(None), 120),
    Check("ClusterPolicy status.state ready with the device plugin back",
          _checks.policy_ready_again, 120),
    Check("the pending gpu-probe ran: FailedScheduling, then Scheduled, Succeeded",
          _checks.probe_ran_after_waiting(PROBE), 420, tool=True),
    Check("gpu-probe output identical to baseline", _checks.probe_output_as_baseline(PROBE), 420,
          tool=True),
]  # fmt: skip


POLICY_PATCH = "kubectl patch clusterpolicy cluster-policy --type=merge -p "
ENABLED = '\'{"spec":{"devicePlugin":{"enabled":%s}}}\''
GPU_NODES = "kubectl get nodes -l nvidia.com/gpu.present=true -o jsonpath="
by_hand = ByHand(
    inject=[
        f"kubectl delete pod {PROBE} --ignore-not-found",
        POLICY_PATCH + ENABLED % "false",
        f"kubectl apply -f {probes.PROBE_MANIFEST.relative_to(REPO)}",
    ],
    look=[
        Step(f"kubectl -n $GPU_OPERATOR_NS get ds {gpu.DEVICE_PLUGIN_DAEMONSET}", "NotFound",
             "the operator deleted the DaemonSet, it did not scale it to 0"),
        Step(GPU_NODES + "'{.items[*].status.allocatable.nvidia\\.com/gpu}{\"\\n\"}'", "0 0",
             f"allocatable keeps its key at 0 (trap); {gpu.CAPACITY_GRACE}"),
        Step(f"kubectl describe pod {PROBE}", "Insufficient nvidia.com/gpu",
             "the new GPU pod waits: no node offers a free GPU"),
        Step("kubectl get clusterpolicy cluster-policy -o jsonpath='{.spec.devicePlugin.enabled}"
             "{\"\\n\"}'", "false", "the smoking gun: the switch is off"),
        _checks.policy_state_step("ready although the GPUs are gone (trap)"),
    ],
    revert=[POLICY_PATCH + ENABLED % "true"],
)  # fmt: skip


FACTS = Facts(
    summary="ClusterPolicy devicePlugin.enabled=false: GPU nodes advertise 0 GPUs, GPU pods "
    "Pending",
    area="operator",
    needs=Needs(gpu_nodes=2, operator=True),
    risk="low: one reversible ClusterPolicy field; running GPU pods keep their GPU, new ones wait",
    duration="about 2 minutes on EKS (reconcile < 10 s, full recovery < 40 s)",
    doctor_finding="device-plugin-disabled",
    cause=Cause(
        plain="The ClusterPolicy switches the device plugin off (devicePlugin.enabled=false), so "
        "the operator deletes its DaemonSet and no GPU node offers its GPU.",
        names=(_words.DEVICE_PLUGIN, _words.SWITCHED_OFF),
        clues=(
            _words.CLUSTER_POLICY,
            ("every node", "all nodes", "everywhere", "cluster-wide"),
            ("GPU Operator", "operator"),
        ),
    ),
    alerts=("GpuAllocatableZeroOnGpuNode", "GpuPodUnschedulable"),
    state=state,
    gauges=gauges,
    by_hand=by_hand,
)
