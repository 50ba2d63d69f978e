"""Give the device plugin a GPU-sharing config, label one GPU node with a config name the map lacks.

NVIDIA documents time-slicing as a ConfigMap of named configs that the ClusterPolicy points at
(`spec.devicePlugin.config: {name, default}`), picked per node by the label
`nvidia.com/device-plugin.config=<key>`. With a config set, the GPU Operator renders the
device-plugin DaemonSet (and GFD's) with a `config-manager-init` init container and a
`config-manager` sidecar. On the node whose label names a key the map lacks, config-manager
logs `specified config a10g-24gb does not exist` and exits 1: the pod never gets past its
init containers (`Init:CrashLoopBackOff`, restarts counting, a `BackOff` Event), the plugin
never registers and the node advertises `nvidia.com/gpu: 0` while the other node still offers 1.
The DaemonSet still has a pod on every node (desired 2, ready 1; its rolling update stalls
there, so the other node keeps its old, working pod). GFD runs the same config-manager-init and
loops too, and the operator reports the ClusterPolicy `notReady`, `states not ready:
[state-device-plugin gpu-feature-discovery]`. Restarting the plugin pod changes nothing: the new
one reads the same label. The fix is the label: name a key the map has (`a10g`), or remove it
so the default (here: none, the plugin's empty config) applies. The rehearsal does not model
what a time-slicing key then does to allocatable (4 replicas on EKS: `nvidia.com/gpu: 4`); it
keeps 1.
"""

from __future__ import annotations

import json
from typing import Any

from labs.errors import LabError
from labs.kube import gpu, probes, rest
from labs.kube.changes import label_node, patch_cluster_policy
from labs.kube.logs import READ_TIMEOUT
from labs.kube.resources import CLUSTER_POLICIES, CONFIG_MAPS, NODES, PODS, KubeApiError
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
from scenarios._one_node import PINNED, PROBE, remove_pinned

LABEL = "nvidia.com/device-plugin.config"
CONFIG_MAP = "time-slicing-config"
KEY, MISSING = "a10g", "a10g-24gb"
INIT = "config-manager-init"
# Where the inject keeps the ClusterPolicy's devicePlugin.config it replaced (JSON, "null"
# for none): on the ConfigMap it creates, so a revert finds it without the journal.
RECORD = "eks-gpu-lab/previous-device-plugin-config"
# NVIDIA's time-slicing example (GPU Operator docs, "Time-Slicing GPUs in Kubernetes"),
# one key for the lab's A10G.
TIME_SLICING = """version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
CRASH_LOOP = "Init:CrashLoopBackOff"
DS_LOOKS_FINE = "the DaemonSet has a pod on every GPU node, one of them not ready (trap)"
RESTART_NOTHING = "the plugin pod is never Running: its init container fails each restart"
traps = [
    Trap("the DaemonSet is there on every node", "a missing plugin means a missing pod",
         "desired and current 2, ready 1: the pod is there, stuck before its containers start",
         "read the pod's STATUS and its init containers, not only the DaemonSet's counts",
         shown_by=DS_LOOKS_FINE),
    Trap("restart the plugin pod", "deleting the pod picks the config up again",
         "the new pod reads the same node label and fails the same way",
         "config-manager only ever finds what the label names; fix the label or the map",
         shown_by=RESTART_NOTHING),
]  # fmt: skip


# --- the cluster's side -----------------------------------------------------------------------


def plugin_config(policy: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ClusterPolicy's spec.devicePlugin.config, None when it has none."""
    section = (((policy or {}).get("spec") or {}).get("devicePlugin") or {}).get("config")
    return dict(section) if section else None


def _config_map(lab: Lab, name: str = CONFIG_MAP) -> dict[str, Any] | None:
    try:
        return rest.read(lab.kube, CONFIG_MAPS.path(lab.operator_namespace, name))
    except KubeApiError as error:
        if error.status == 404:
            return None
        raise


def unknown_config_nodes(lab: Lab, view: ClusterView) -> list[str]:
    """GPU nodes whose config label names a key missing from the map the ClusterPolicy names
    (and, with the scenario's map in the lab, nodes carrying its missing name)."""
    config = plugin_config(gpu.cluster_policy(view))
    named = (config or {}).get("name")
    found = _config_map(lab, named) if named else None
    keys = set((found or {}).get("data") or {})
    ours = found if named == CONFIG_MAP else _config_map(lab)
    return [
        gpu.name_of(node)
        for node in gpu.gpu_nodes(view)
        if (label := gpu.label_of(node, LABEL))
        and ((named and label not in keys) or (ours is not None and label == MISSING))
    ]


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Refuse a lab that already picks device-plugin configs; run gpu-probe on the healthy lab;
    keep its output, the GPU nodes, the chosen node and the operand DaemonSets' counts."""
    labelled = [gpu.name_of(n) for n in gpu.gpu_nodes(view) if gpu.label_of(n, LABEL)]
    config = plugin_config(gpu.cluster_policy(view))
    if labelled or config:
        raise LabError(
            f"the lab already picks device-plugin configs ({', '.join(labelled) or 'no node'} "
            f"labelled {LABEL}; ClusterPolicy devicePlugin.config {json.dumps(config)}): "
            "`invoke scenario.revert --all` or set them back first, so the run starts clean"
        )
    return _one_node.one_node_baseline(lab, view)


def inject(lab: Lab) -> None:
    """Delete the probes; create ConfigMap gpu-operator/time-slicing-config (key a10g, time-
    slicing 4 replicas); label the first GPU node nvidia.com/device-plugin.config=a10g-24gb;
    merge-patch ClusterPolicy spec.devicePlugin.config={name: time-slicing-config, default: ""}.
    """
    for name in (PROBE, PINNED):
        probes.delete_probe(lab, lab.settings.probe_timeout, name=name)
    previous = plugin_config(rest.read(lab.kube, CLUSTER_POLICIES.path(
        name=gpu.CLUSTER_POLICY_NAME)))  # fmt: skip
    if _config_map(lab) is None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP, "annotations": {RECORD: json.dumps(previous)}},
            "data": {KEY: TIME_SLICING},
        }
        rest.create(lab.kube, CONFIG_MAPS.path(lab.operator_namespace), body)
    label_node(lab, _one_node.target_node(lab.snapshot("nodes")), LABEL, MISSING)
    patch_cluster_policy(
        lab, {"spec": {"devicePlugin": {"config": {"name": CONFIG_MAP, "default": ""}}}}
    )


def revert(lab: Lab) -> None:
    """Set ClusterPolicy devicePlugin.config back to what the ConfigMap recorded (none when it
    is gone), remove the config label from GPU nodes naming a10g or a10g-24gb, delete the ConfigMap
    (safe to repeat)."""
    ours = _config_map(lab)
    policy = rest.read(lab.kube, CLUSTER_POLICIES.path(name=gpu.CLUSTER_POLICY_NAME))
    if (plugin_config(policy) or {}).get("name") == CONFIG_MAP:
        record = ((ours or {}).get("metadata") or {}).get("annotations") or {}
        previous = json.loads(record.get(RECORD, "null"))
        patch_cluster_policy(lab, {"spec": {"devicePlugin": {"config": previous}}})
    for node in gpu.gpu_nodes(lab.snapshot("nodes")):
        if gpu.label_of(node, LABEL) in (KEY, MISSING):
            patch = {"metadata": {"labels": {LABEL: None}}}
            rest.patch(lab.kube, NODES.path(name=gpu.name_of(node)), patch)
    rest.delete(lab.kube, CONFIG_MAPS.path(lab.operator_namespace, CONFIG_MAP))


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while a GPU node's nvidia.com/device-plugin.config names a config the ClusterPolicy's
    map lacks (or the scenario's missing name, its map still in the lab)."""
    return bool(unknown_config_nodes(lab, view))


# --- symptoms (T+ from the injection) --------------------------------------------------------


def plugin_pod_on(view: ClusterView, node: str) -> dict[str, Any] | None:
    """The device-plugin pod on `node` (the newest, during a rollout)."""
    pods = [
        p
        for p in view.objects("operator_pods")
        if (p["metadata"].get("labels") or {}).get("app") == gpu.DEVICE_PLUGIN_DAEMONSET
        and (p.get("spec") or {}).get("nodeName") == node
        and not p["metadata"].get("deletionTimestamp")
    ]
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


def init_status(pod: dict[str, Any] | None) -> dict[str, Any]:
    return _checks.init_status(pod, INIT)


def describe_init(pod: dict[str, Any] | None) -> str:
    """`<pod> config-manager-init: waiting CrashLoopBackOff, restarts N, last exit 1`."""
    return _checks.describe_init(pod, INIT, "no device-plugin pod there")


def init_crash_looping(ctx: Context) -> Verdict:
    pod = plugin_pod_on(ctx.view, ctx.baseline["node"])
    status = init_status(pod)
    waiting = ((status.get("state") or {}).get("waiting") or {}).get("reason")
    held = waiting == "CrashLoopBackOff" and status.get("restartCount", 0) >= 1
    phase = ((pod or {}).get("status") or {}).get("phase")
    return held and phase == "Pending", f"{describe_init(pod)}; pod {phase}"


def init_log(lab: Lab, pod: dict[str, Any]) -> str:
    """The config-manager-init container's log (`kubectl logs POD -c config-manager-init`)."""
    path = PODS.path(lab.operator_namespace, gpu.name_of(pod), "log")
    return rest.get(lab.kube, path, {"container": INIT}, READ_TIMEOUT).decode(errors="replace")


def error_line(text: str) -> str | None:
    return next((line for line in text.splitlines() if "does not exist" in line), None)


def init_logged_missing(ctx: Context) -> Verdict:
    pod = plugin_pod_on(ctx.view, ctx.baseline["node"])
    if pod is None or not init_status(pod).get("lastState"):
        return False, f"{describe_init(pod)}: no ended run yet"
    line = error_line(init_log(ctx.lab, pod))
    ctx.notes["error_line"] = line
    return line is not None, line or f"no 'does not exist' line in {gpu.name_of(pod)} {INIT}"


def backoff_event(ctx: Context) -> Verdict:
    pod = plugin_pod_on(ctx.view, ctx.baseline["node"])
    if pod is None:
        return False, "no device-plugin pod on the labelled node yet"
    prefix = f"Back-off restarting failed container {INIT} in pod {gpu.name_of(pod)}_"
    hits = [
        e
        for e in gpu.events_with_reason(ctx.view, "operator_events", "BackOff")
        if str(e.get("message", "")).startswith(prefix)
    ]
    if hits:
        ctx.notes["backoff"] = f"{hits[-1]['message']} (x{hits[-1].get('count', 1)})"
    return bool(hits), ctx.notes.get("backoff", f"no BackOff Event starting {prefix!r}")


def daemonset_mostly_ready(ctx: Context) -> Verdict:
    plugin = gpu.daemonset(ctx.view)
    counts = gpu.daemonset_counts(plugin) if plugin else (0, 0, 0)
    nodes = len(ctx.baseline["gpu_nodes"])
    on = gpu.daemon_pod_nodes(ctx.view, gpu.DEVICE_PLUGIN_DAEMONSET)
    held = counts == (nodes, nodes, nodes - 1) and ctx.baseline["node"] in on
    return held, f"{gpu.describe_daemonset(ctx.view)}; pods on {', '.join(on) or 'none'}"


def never_running(ctx: Context) -> Verdict:
    pod = plugin_pod_on(ctx.view, ctx.baseline["node"])
    status = init_status(pod)
    phase = ((pod or {}).get("status") or {}).get("phase")
    held = status.get("restartCount", 0) >= 2 and phase == "Pending"
    return held, f"{describe_init(pod)}; pod {phase}"


policy_not_ready = _checks.policy_not_ready_naming("state-device-plugin")


symptoms = [
    Check(f"the plugin pod on the labelled node is {CRASH_LOOP}: {INIT} waiting "
          "CrashLoopBackOff, restarts counting, the pod Pending", init_crash_looping, 120),
    Check(f"{INIT} log: `specified config {MISSING} does not exist`", init_logged_missing, 120,
          names_cause=True),
    Check(f"BackOff Event: `Back-off restarting failed container {INIT} in pod ...`",
          backoff_event, 120),
    Check(_one_node.ONLY_NODE_DARK, _one_node.only_node_dark, 120, then=_one_node.pin_probe),
    Check("gpu-probe-pinned Pending: 1 Insufficient nvidia.com/gpu, 3 didn't match the selector",
          _one_node.pinned_pending(gpu.INSUFFICIENT_GPU), 120),
    Check(DS_LOOKS_FINE, daemonset_mostly_ready, 120),
    Check(RESTART_NOTHING, never_running, 180),
    Check("ClusterPolicy status.state notReady: `states not ready: [state-device-plugin ...]`",
          policy_not_ready, 120),
]  # fmt: skip


# --- diagnosis: Pod -> Node -> plugin pod -> its init container -> label vs map ---------------


def diagnose(ctx: Context) -> list[Finding]:
    """Pinned pod's events -> allocatable per node -> the plugin pods' status -> the failing
    init container's log and Events -> the node label against the ConfigMap's keys ->
    the ClusterPolicy's config and state."""
    lab, view = ctx.lab, ctx.view
    ns = lab.operator_namespace
    phase, events = gpu.pod_story(view, PINNED)
    pod = plugin_pod_on(view, ctx.baseline["node"])
    name = gpu.name_of(pod) if pod else "nvidia-device-plugin-daemonset-..."
    policy = gpu.cluster_policy(view)
    config = plugin_config(policy)
    found = _config_map(lab, (config or {}).get("name") or CONFIG_MAP)
    keys = sorted((found or {}).get("data") or {})
    return [
        Finding("1. Pod: why Pending?", f"kubectl describe pod {PINNED}",
                f"{phase}: {gpu.scheduling_failure(events)}",
                "the only node it may use has no free GPU; every other node fails the selector"),
        Finding("2. Node: GPUs per node", "kubectl get nodes -o custom-columns=NAME:.metadata.name,"
                "GPU:.status.allocatable.nvidia\\.com/gpu", gpu.describe_allocatable(view),
                "one GPU node offers 0 (key kept): its device plugin stopped advertising"),
        Finding("3. DaemonSet: is there a plugin pod?",
                f"kubectl -n {ns} get pods -l app={gpu.DEVICE_PLUGIN_DAEMONSET} -o wide",
                f"{gpu.describe_daemonset(view)}; {describe_init(pod)}",
                f"the pod is there but {CRASH_LOOP}: an init container fails before the plugin "
                "starts", trap="the DaemonSet is there on every node"),
        Finding("4. The failing init container's log",
                f"kubectl -n {ns} logs {name} -c {INIT}",
                ctx.notes.get("error_line") or "no 'does not exist' line read",
                "config-manager could not find the config the node's label names among the "
                "ConfigMap's keys, and exited 1"),
        Finding("4b. The kubelet's view", f"kubectl -n {ns} describe pod {name}",
                ctx.notes.get("backoff") or "no BackOff Event read",
                "each restart fails the same way; the back-off doubles up to 5 minutes",
                trap="restart the plugin pod"),
        Finding("5. Node label against the map", f"kubectl get nodes -L {LABEL}; kubectl -n {ns} "
                f"get configmap {(config or {}).get('name') or CONFIG_MAP} -o jsonpath='{{.data}}'",
                f"{gpu.describe_gpu_node_label(view, LABEL)}; keys: {', '.join(keys) or 'none'}",
                "the label names a key the map does not have: label a key it has, or remove "
                "the label so the default applies"),
        Finding("6. ClusterPolicy", "kubectl get clusterpolicy cluster-policy -o jsonpath="
                "'{.spec.devicePlugin.config} {.status.state}'",
                f"{json.dumps(config)} {gpu.policy_state(policy)}",
                "the config map and default the operator renders into config-manager; notReady "
                "while a plugin pod is unavailable"),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------


def allocatable_back(ctx: Context) -> Verdict:
    """Every GPU node offers a GPU again (a time-slicing key offers its replicas on EKS)."""
    values = gpu.allocatable_by_node(ctx.view)
    held = all(gpu.gpu_count(values.get(n)) >= 1 for n in ctx.baseline["gpu_nodes"])
    return held, gpu.describe_allocatable(ctx.view)


def unknown_label_gone(ctx: Context) -> Verdict:
    labels = gpu.describe_gpu_node_label(ctx.view, LABEL)
    return not unknown_config_nodes(ctx.lab, ctx.view), labels


# The kubelet's back-off reaches 5 minutes: a fixed label is read at the next restart.
recovery = [
    Check("no GPU node's config label names a missing config", unknown_label_gone, 60),
    Check("device-plugin DaemonSet N/N/N ready: the plugin pod got past its init containers",
          _checks.plugins_ready(None), 420),
    Check("allocatable nvidia.com/gpu back above 0 on every GPU node", allocatable_back, 420),
    Check("the pinned probe, Pending until now, ran on its node: FailedScheduling, then "
          "Scheduled, Succeeded", _one_node.pinned_ran_on_node, 600, tool=True),
    Check("gpu-probe-pinned output identical to baseline",
          _checks.probe_output_as_baseline(PINNED), 600, tool=True),
    Check("ClusterPolicy status.state ready", _checks.policy_ready_again, 420, tool=True),
]  # fmt: skip


POLICY_PATCH = "kubectl patch clusterpolicy cluster-policy --type=merge -p "
by_hand = ByHand(
    inject=[
        _one_node.BY_HAND_NODE,
        f"kubectl -n $GPU_OPERATOR_NS create configmap {CONFIG_MAP} --from-literal={KEY}='"
        f"{TIME_SLICING}'",
        f'kubectl label node "$NODE" {LABEL}={MISSING} --overwrite',
        POLICY_PATCH + '\'{"spec":{"devicePlugin":{"config":{"name":"' + CONFIG_MAP
        + '","default":""}}}}\'',
        _one_node.BY_HAND_PIN,
    ],
    look=[
        Step(f"kubectl -n $GPU_OPERATOR_NS get pods -l app={gpu.DEVICE_PLUGIN_DAEMONSET}",
             CRASH_LOOP, "one plugin pod never gets past its init containers"),
        Step(f"kubectl -n $GPU_OPERATOR_NS logs $(kubectl -n $GPU_OPERATOR_NS get pods -l app="
             f"{gpu.DEVICE_PLUGIN_DAEMONSET} -o name --field-selector spec.nodeName=$(kubectl "
             f"get nodes -l {LABEL}={MISSING} -o name | cut -d/ -f2)) -c {INIT}",
             f"specified config {MISSING} does not exist",
             "config-manager cannot find the config the label names"),
        Step(f"kubectl -n $GPU_OPERATOR_NS describe pods -l app={gpu.DEVICE_PLUGIN_DAEMONSET}",
             f"Back-off restarting failed container {INIT} in pod",
             "the kubelet restarts it with a growing back-off"),
        Step(f"kubectl get nodes -L {LABEL}", MISSING, "the name the node asks for"),
        Step(f"kubectl -n $GPU_OPERATOR_NS get configmap {CONFIG_MAP} -o jsonpath='{{.data}}'",
             f'"{KEY}"', "the names the map has"),
        _one_node.pinned_story(gpu.INSUFFICIENT_GPU),
    ],
    revert=[
        POLICY_PATCH + '\'{"spec":{"devicePlugin":{"config":null}}}\'',
        f'kubectl label node "$NODE" {LABEL}-',
        f"kubectl -n $GPU_OPERATOR_NS delete configmap {CONFIG_MAP} --ignore-not-found",
        _one_node.BY_HAND_UNPIN,
    ],
)  # fmt: skip


def reset(lab: Lab) -> None:
    """The tool's part after a learner's fix: the lab's own plugin config back (a rollout),
    then the pinned probe run again if kubelet refused it during that rollout."""
    revert(lab)
    _one_node.settle_then_repin(lab)


FACTS = Facts(
    summary="a GPU node labelled nvidia.com/device-plugin.config=a10g-24gb, a key the sharing "
    "ConfigMap lacks: its plugin pod sits in Init:CrashLoopBackOff, the node advertises 0 GPUs",
    area="node",
    needs=Needs(gpu_nodes=2, operator=True),
    risk="low: a ConfigMap, one node label and one ClusterPolicy field; the sharing config rolls "
    "the plugin pods once (and again on revert); running GPU pods keep their GPU",
    duration="about 3 minutes on EKS (the crash loop within a minute; after the fix the next "
    "restart, up to the kubelet's 5-minute back-off, picks the label up)",
    doctor_finding="device-plugin-config-missing",
    cause=Cause(
        plain="One GPU node's nvidia.com/device-plugin.config label names a sharing config "
        "that the device plugin's ConfigMap does not have, so config-manager fails and the "
        "plugin never starts there.",
        names=(
            ("config", "sharing config", "time-slicing", "ConfigMap", "device-plugin.config"),
            (
                "does not exist",
                "missing",
                "not found",
                "wrong name",
                "unknown",
                "typo",
                "no such",
                "lacks",
                "not in the map",
                "mismatch",
            ),
        ),
        clues=(
            _words.ONE_NODE,
            ("node label", "label"),
            (*_words.DEVICE_PLUGIN, "config-manager", "init container"),
            ("crash loop", "CrashLoopBackOff", "Init:CrashLoopBackOff"),
        ),
    ),  # fmt: skip
    alerts=(
        "GpuAllocatableZeroOnGpuNode",
        "GpuPodUnschedulable",
        "GpuOperandDaemonSetUnavailable",
        "GpuClusterPolicyNotReady",
    ),
    state=_one_node.state_rows,
    gauges=gpu.gpu_gauges(PINNED),
    by_hand=by_hand,
    clean_up=remove_pinned,
    reset=reset,
)
