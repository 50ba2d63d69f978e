"""Opt one GPU node out of the device plugin with its node label, and watch only that node go dark.

The device-plugin DaemonSet selects nodes labelled `nvidia.com/gpu.deploy.device-plugin=true`.
The GPU Operator adds that label only where it is missing, so a `false` someone sets by hand
(the documented per-node opt-out) stays. The DaemonSet controller removes the plugin pod from
that node (desired/ready 2 -> 1), kubelet advertises `nvidia.com/gpu: 0` there (key kept) while
the other node still offers 1, and a probe pinned to it stays Pending with
`0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node
affinity/selector.`. An unpinned probe still runs, on the other node, and the ClusterPolicy
stays `ready`. Setting the label back to `true` brings the plugin back and the pinned probe runs.
"""

from __future__ import annotations

import json

from labs.kube import gpu, probes
from labs.kube.changes import label_node
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
from scenarios import _checks, _one_node, _words
from scenarios._node_internals import node_internals
from scenarios._one_node import PINNED, PROBE, remove_pinned

LABEL = gpu.DEVICE_PLUGIN_DEPLOY_LABEL
UNPINNED_ELSEWHERE = "an unpinned gpu-probe still Succeeds, on another node (trap)"
STAYS_READY = "ClusterPolicy status.state stays ready (trap)"
traps = [
    Trap("one GPU pod proves every node", "gpu-probe Succeeded, so the GPUs work",
         "it ran on the node that still has a plugin; the opted-out node offers 0",
         "a pod lands wherever a GPU is free: pin one probe per node (kubernetes.io/hostname) "
         "or alert per node on allocatable == 0", shown_by=UNPINNED_ELSEWHERE),
    Trap("status.state stays ready", "notReady when a node loses its device plugin", "`ready`",
         "a per-node opt-out is honoured by design: the DaemonSet wants one pod fewer and has it",
         shown_by=STAYS_READY),
]  # fmt: skip


baseline = _one_node.one_node_baseline


def inject(lab: Lab) -> None:
    """Delete the probes, then label the first GPU node (by name)
    nvidia.com/gpu.deploy.device-plugin=false (kubectl label --overwrite)."""
    for name in (PROBE, PINNED):
        probes.delete_probe(lab, lab.settings.probe_timeout, name=name)
    label_node(lab, _one_node.target_node(lab.snapshot("nodes")), LABEL, "false")


def revert(lab: Lab) -> None:
    """Set nvidia.com/gpu.deploy.device-plugin back to true on every GPU node where it is
    false (safe to repeat)."""
    for node in gpu.gpu_nodes(lab.snapshot("nodes")):
        if gpu.label_of(node, LABEL) == "false":
            label_node(lab, gpu.name_of(node), LABEL, "true")


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while some GPU node carries nvidia.com/gpu.deploy.device-plugin=false."""
    return any(gpu.label_of(node, LABEL) == "false" for node in gpu.gpu_nodes(view))


# --- symptoms (T+ from the injection) --------------------------------------------------------


def plugin_on_others_only(ctx: Context) -> Verdict:
    plugin = gpu.daemonset(ctx.view)
    counts = gpu.daemonset_counts(plugin) if plugin else (0, 0, 0)
    on = gpu.daemon_pod_nodes(ctx.view, gpu.DEVICE_PLUGIN_DAEMONSET)
    others = ctx.baseline["others"]
    held = counts == (len(others),) * 3 and on == sorted(others)
    return held, f"{gpu.describe_daemonset(ctx.view)}; plugin pods on {', '.join(on) or 'none'}"


def probes_again(ctx: Context) -> None:
    probes.recreate_admitted(ctx.lab, ctx.lab.settings.probe_timeout)
    _one_node.pin_probe(ctx)


def unpinned_ran_elsewhere(ctx: Context) -> Verdict:
    found = gpu.pod(ctx.view, PROBE) or {}
    phase, on = gpu.pod_phase(ctx.view, PROBE), (found.get("spec") or {}).get("nodeName")
    return phase == "Succeeded" and on != ctx.baseline["node"], f"{PROBE} {phase} on {on}"


symptoms = [
    Check("device-plugin DaemonSet desired/ready drops by one: no plugin pod on the opted-out node",
          plugin_on_others_only, 60),
    Check(_one_node.ONLY_NODE_DARK, _one_node.only_node_dark, 60, then=probes_again),
    Check("gpu-probe-pinned Pending: 1 Insufficient nvidia.com/gpu, 3 didn't match the selector",
          _one_node.pinned_pending(gpu.INSUFFICIENT_GPU), 90),
    Check(UNPINNED_ELSEWHERE, unpinned_ran_elsewhere, 120),
    Check(STAYS_READY, _checks.policy_stays_ready(plugin_on_others_only), 60),
]  # fmt: skip


# --- diagnosis: Pod -> Node -> DaemonSet -> node label -> ClusterPolicy -> node internals -----


def diagnose(ctx: Context) -> list[Finding]:
    """Pinned pod's events -> allocatable per node -> where the plugin pods run -> the node label
    the DaemonSet selects on -> ClusterPolicy (fine) -> node internals on the dark node."""
    lab, view = ctx.lab, ctx.view
    ns = lab.operator_namespace
    phase, events = gpu.pod_story(view, PINNED)
    plugin = gpu.daemonset(view) or {}
    found = gpu.pod(view, PROBE) or {}
    policy = gpu.cluster_policy(view) or {}
    return [
        Finding("1. Pod: why Pending?", f"kubectl describe pod {PINNED}",
                f"{phase}: {gpu.scheduling_failure(events)}",
                "the only node it may use has no free GPU; every other node fails the selector"),
        Finding("1b. Pod: but this one ran", f"kubectl get pod {PROBE} -o wide",
                f"{gpu.pod_phase(view, PROBE)} on {(found.get('spec') or {}).get('nodeName')}",
                "it landed on the node that still advertises a GPU: proof about one node only",
                trap="one GPU pod proves every node"),
        Finding("2. Node: GPUs per node", "kubectl get nodes -o custom-columns=NAME:.metadata.name,"
                "GPU:.status.allocatable.nvidia\\.com/gpu", gpu.describe_allocatable(view),
                "one GPU node offers 0 with the key kept: its advertiser is gone, not the other's"),
        Finding("3. DaemonSet: where does the plugin run?",
                f"kubectl -n {ns} get pods -l app={gpu.DEVICE_PLUGIN_DAEMONSET} -o wide",
                f"{gpu.describe_daemonset(view)} on "
                f"{', '.join(gpu.daemon_pod_nodes(view, gpu.DEVICE_PLUGIN_DAEMONSET)) or 'none'}",
                "the DaemonSet exists and is fully ready, but wants one pod fewer"),
        Finding("3b. DaemonSet: what does it select?",
                f"kubectl -n {ns} get ds {gpu.DEVICE_PLUGIN_DAEMONSET} "
                "-o jsonpath='{.spec.template.spec.nodeSelector}'",
                json.dumps(((plugin.get("spec") or {}).get("template") or {}).get("spec", {})
                           .get("nodeSelector")),
                "it runs only where the deploy label is true"),
        Finding("4. Node label: the opt-out", f"kubectl get nodes -L {LABEL}",
                gpu.describe_gpu_node_label(view, LABEL),
                "false on the dark node: set by hand (the operator only adds a missing label, "
                "never overwrites one), so it stays until someone sets it back"),
        Finding("5. ClusterPolicy", "kubectl get clusterpolicy cluster-policy -o jsonpath="
                "'{.spec.devicePlugin.enabled} {.status.state}'",
                f"{gpu.component_enabled(policy, 'devicePlugin')} {gpu.policy_state(policy)}",
                "enabled and ready: the cluster-wide switch is fine, the fault is per node",
                trap="status.state stays ready"),
        *node_internals(ctx, _one_node.target_node(view), step=6),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------

recovery = [
    Check("device-plugin DaemonSet N/N/N ready: the plugin is back on the opted-out node",
          _checks.plugins_ready(None), 120),
    *_one_node.pinned_recovery(),
]  # fmt: skip

by_hand = ByHand(
    inject=[
        _one_node.BY_HAND_NODE,
        f'kubectl label node "$NODE" {LABEL}=false --overwrite',
        _one_node.BY_HAND_PIN,
        f"kubectl delete pod {PROBE} --ignore-not-found && "
        f"kubectl apply -f {_one_node.MANIFEST}",
    ],
    look=[
        Step(f"kubectl get nodes -L {LABEL}", "false", "one GPU node opted out"),
        Step("kubectl -n $GPU_OPERATOR_NS get ds nvidia-device-plugin-daemonset "
             "-o jsonpath='{.status.desiredNumberScheduled}/{.status.numberReady}{\"\\n\"}'",
             "1/1", "the DaemonSet wants (and has) one pod fewer"),
        Step(f"kubectl get nodes -l {LABEL}=false "
             "-o jsonpath='{.items[*].status.allocatable.nvidia\\.com/gpu}{\"\\n\"}'",
             "0", "the opted-out node advertises 0 (key kept)"),
        _one_node.pinned_story(gpu.INSUFFICIENT_GPU),
        Step(f"kubectl get pod {PROBE} -o jsonpath='{{.status.phase}}{{\"\\n\"}}'", "Succeeded",
             "an unpinned probe ran anyway, on the other node (trap)"),
        _checks.policy_state_step("no error anywhere (trap)"),
    ],
    revert=[f"kubectl label nodes -l {LABEL}=false {LABEL}=true --overwrite",
            _one_node.BY_HAND_UNPIN],
)  # fmt: skip


FACTS = Facts(
    summary="one GPU node labelled nvidia.com/gpu.deploy.device-plugin=false: that node "
    "advertises 0 GPUs, the rest look fine",
    area="node",
    needs=Needs(gpu_nodes=2, operator=True),
    risk="low: one node label; running GPU pods keep their GPU, new ones avoid that node",
    duration="about 2 minutes on EKS (the plugin pod goes at once, comes back in < 40 s)",
    doctor_finding="deploy-label-false",
    cause=Cause(
        plain="One GPU node is labelled nvidia.com/gpu.deploy.device-plugin=false, which keeps "
        "the device plugin off that node alone.",
        names=(
            (*_words.DEVICE_PLUGIN, "deploy label", "gpu.deploy"),
            (*_words.SWITCHED_OFF, "opted out", "not deploy"),
        ),
        clues=(_words.ONE_NODE, ("node label", "label")),
    ),
    alerts=("GpuAllocatableZeroOnGpuNode", "GpuPodUnschedulable"),
    state=_one_node.state_rows,
    gauges=gpu.gpu_gauges(PINNED),
    by_hand=by_hand,
    clean_up=remove_pinned,
    reset=_one_node.settle_then_repin,
)
