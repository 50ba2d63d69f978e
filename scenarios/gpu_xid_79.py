"""A GPU falls off the bus (Xid 79): the node looks healthy, only the device plugin's log says why.

The device plugin's health check gets the Xid from NVML, logs `XidCriticalError: Xid=79 on
Device=GPU-...; marking device as unhealthy.` and tells kubelet the device is unhealthy:
allocatable `nvidia.com/gpu` drops to 0 while capacity stays 1. Its pod stays Running and
Ready, the node Ready, every operand DaemonSet ready and the ClusterPolicy `ready`: nothing
failed but the GPU. dcgm-exporter reports `DCGM_FI_DEV_XID_ERRORS` 79 for that GPU (the
GpuXidError alert), and EKS's node monitoring agent sets `AcceleratedHardwareReady=False`
reason `NvidiaXID79Error` on the node. Restarting the plugin gives nothing back: a new plugin
cannot get a handle for a GPU off the bus (`error getting device handle for index '0': GPU
is lost`), exits and crash-loops, and capacity follows to 0. The fix is the node: drain it
and terminate its instance, and the node group boots a new one with a good GPU. No API makes
a real GPU raise an Xid, so only a rehearsal lab can play this one.
"""

from __future__ import annotations

import re
from typing import Any

from labs.errors import LabError
from labs.kube import gpu, probes, rest
from labs.kube.logs import READ_TIMEOUT, pod_log
from labs.kube.resources import NODES, PODS
from labs.kube.view import ClusterView, Objects
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

XID = 79
PROBE = probes.probe_name()
# The EKS node monitoring agent's condition (aws/eks-node-monitoring-agent v1.7.0,
# pkg/reasons/reasons.yaml:354-355, monitors/nvidia/dcgm/dcgm_policies.go:134-141).
CONDITION, REASON = "AcceleratedHardwareReady", f"NvidiaXID{XID}Error"
# k8s-device-plugin v0.17.4 internal/rm/health.go:186 (the GPU Operator v25.3.4 chart's plugin)
XID_LINE = re.compile(r"XidCriticalError: Xid=(\d+) on Device=(GPU-[0-9a-f-]+); marking device "
                      r"as unhealthy\.")  # fmt: skip
XID_METRIC = re.compile(r'^DCGM_FI_DEV_XID_ERRORS\{[^}]*UUID="([^"]+)"[^}]*\} (\d+)$', re.M)
EXPORTER_PORT = 9400
ALL_GREEN = "the node stays Ready, its device plugin Ready, every DaemonSet ready (trap)"
STAYS_READY = "ClusterPolicy status.state stays ready (trap)"
traps = [
    Trap("a Ready node with a Ready device plugin has a working GPU",
         "a lost GPU shows as a failed pod, a NotReady node or a notReady ClusterPolicy",
         "all green; allocatable 0 with capacity 1 on one node, and the plugin's log",
         "the plugin's health check marks the device unhealthy inside the plugin: read its log "
         "and compare capacity with allocatable", shown_by=ALL_GREEN),
    Trap("status.state stays ready", "notReady when a GPU is lost", "`ready`",
         "the operator counts operand pods, not GPUs: every DaemonSet is fully ready",
         shown_by=STAYS_READY),
]  # fmt: skip


def lost_nodes(objects: Objects) -> list[str]:
    """GPU nodes whose node monitoring agent reports the Xid (AcceleratedHardwareReady False)."""
    return [gpu.name_of(n) for n in gpu.gpu_nodes(objects) if _agent_condition(n) is not None]


def _agent_condition(node: dict[str, Any]) -> dict[str, Any] | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == CONDITION and condition.get("status") == "False":
            return dict(condition)
    return None


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the GPU nodes and the chosen node."""
    if lost := lost_nodes(view):
        raise LabError(
            f"{', '.join(lost)} already reports {CONDITION}=False: replace it first "
            f"(`invoke scenario.revert --all --lab {lab.name}`) so the run starts from a "
            "healthy lab"
        )
    facts = _one_node.one_node_baseline(lab, view)
    return {key: facts[key] for key in ("probe_output", "gpu_nodes", "node", "others")}


def inject(lab: Lab) -> None:
    """Make the first GPU node's GPU fall off the bus with Xid 79: the rehearsal world plays
    it (no command raises an Xid on a real GPU)."""
    lab.backend.lose_gpu(lab, _one_node.target_node(lab.snapshot("nodes")), XID)


def revert(lab: Lab) -> None:
    """Replace every node whose GPU fell off the bus, as `kubectl drain` and `aws ec2
    terminate-instances` do: cordon it, delete its pods but the DaemonSets', terminate its
    instance; its node group boots a new one (safe to repeat)."""
    nodes = {gpu.name_of(n): n for n in gpu.gpu_nodes(lab.snapshot("nodes"))}
    lost = lost_nodes(lab.snapshot("nodes"))
    for name in lost:
        rest.patch(lab.kube, NODES.path(name=name), {"spec": {"unschedulable": True}})
        selector = {"fieldSelector": f"spec.nodeName={name}"}
        pods = rest.get_items(lab.kube, PODS.path(), query=selector)
        for pod in pods:
            owners = pod["metadata"].get("ownerReferences") or []
            if not any(o.get("kind") == "DaemonSet" for o in owners):
                meta = pod["metadata"]
                rest.delete(lab.kube, PODS.path(meta["namespace"], meta["name"]))
    instances = [str(nodes[n]["spec"]["providerID"]).rsplit("/", 1)[-1] for n in lost]
    if instances:
        lab.aws_client("ec2").terminate_instances(InstanceIds=instances)


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while a GPU node reports AcceleratedHardwareReady=False (its GPU is lost)."""
    return bool(lost_nodes(view))


# --- symptoms (T+ from the injection) --------------------------------------------------------


def _node_pod(ctx: Context, daemonset: str) -> dict[str, Any] | None:
    """The pod of operand `daemonset` on the chosen node."""
    pod = gpu.daemon_pod_on(ctx.view, daemonset, ctx.baseline["node"])
    return None if pod is None else dict(pod)


def _xid_logged(ctx: Context) -> Verdict:
    plugin = _node_pod(ctx, gpu.DEVICE_PLUGIN_DAEMONSET)
    if plugin is None:
        return False, f"no device-plugin pod on {ctx.baseline['node']}"
    text = pod_log(ctx.lab, ctx.lab.operator_namespace, gpu.name_of(plugin), tail=50)
    lines = [line for line in text.splitlines() if XID_LINE.search(line)]
    found = XID_LINE.search(lines[-1]) if lines else None
    held = found is not None and found.group(1) == str(XID)
    return held, f"{gpu.name_of(plugin)}: {lines[-1].strip() if lines else 'no Xid line yet'}"


def _capacity_kept(ctx: Context) -> Verdict:
    node = ctx.view.find("nodes", ctx.baseline["node"]) or {}
    values = gpu.allocatable_by_node(ctx.view)
    others = all(values.get(n) == "1" for n in ctx.baseline["others"])
    here = (gpu.gpu_quantity(node, "capacity"), gpu.gpu_quantity(node))
    return here == ("1", "0") and others, gpu.describe_capacity(ctx.view)


def _agent_reports(ctx: Context) -> Verdict:
    node = ctx.view.find("nodes", ctx.baseline["node"]) or {}
    found = _agent_condition(node) or {}
    seen = f"{CONDITION}={found.get('status')} {found.get('reason')}: {found.get('message')}"
    return found.get("reason") == REASON, f"{ctx.baseline['node']} {seen}"


def _exporter_xid(ctx: Context) -> Verdict:
    exporter = _node_pod(ctx, gpu.DCGM_EXPORTER_DAEMONSET)
    if exporter is None:
        return False, f"no dcgm-exporter pod on {ctx.baseline['node']}"
    proxy = f"{gpu.name_of(exporter)}:{EXPORTER_PORT}"
    path = PODS.path(ctx.lab.operator_namespace, proxy, "proxy/metrics")
    page = rest.get(ctx.lab.kube, path, timeout=READ_TIMEOUT).decode(errors="replace")
    found = XID_METRIC.search(page)
    seen = f"DCGM_FI_DEV_XID_ERRORS{{UUID={found.group(1)}}} {found.group(2)}" if found else "-"
    return bool(found and found.group(2) == str(XID)), seen


def _all_green(ctx: Context) -> Verdict:
    node = ctx.view.find("nodes", ctx.baseline["node"]) or {}
    plugin = _node_pod(ctx, gpu.DEVICE_PLUGIN_DAEMONSET) or {}
    counts = gpu.operand_counts(ctx.view)
    operands_ready = bool(counts) and all(c[0] == c[2] for c in counts.values())
    held = (gpu.is_ready(node) and gpu.is_ready(plugin) and operands_ready
            and _capacity_kept(ctx)[0])  # fmt: skip
    seen = (f"{ctx.baseline['node']} Ready={gpu.is_ready(node)}; {gpu.name_of(plugin) or '-'} "
            f"Ready={gpu.is_ready(plugin)}; {gpu.describe_operands(ctx.view)}")  # fmt: skip
    return held, seen


symptoms = [
    Check(f"the device plugin on the node logs `XidCriticalError: Xid={XID} on Device=GPU-...; "
          "marking device as unhealthy.`", _xid_logged, 60, names_cause=True),
    Check("the node keeps capacity nvidia.com/gpu 1 with allocatable 0, the others still 1",
          _capacity_kept, 60),
    Check(f"the node monitoring agent's condition: {CONDITION}=False reason {REASON}",
          _agent_reports, 60, names_cause=True),
    Check(f"dcgm-exporter on the node reports DCGM_FI_DEV_XID_ERRORS {XID}", _exporter_xid, 60),
    Check(ALL_GREEN, _all_green, 60),
    Check(STAYS_READY, _checks.policy_stays_ready(_capacity_kept), 60),
]  # fmt: skip


# --- diagnosis: allocatable -> plugin log -> node conditions -> dcgm -> nvidia-smi -> fix ------


def _exporter_name(ctx: Context) -> str:
    exporter = _node_pod(ctx, gpu.DCGM_EXPORTER_DAEMONSET)
    return "<nvidia-dcgm-exporter pod>" if exporter is None else gpu.name_of(exporter)


def diagnose(ctx: Context) -> list[Finding]:
    """Capacity against allocatable per node -> the device plugin's log on the node -> the
    node's conditions -> dcgm-exporter's XID metric -> operands and ClusterPolicy -> the fix."""
    lab, view = ctx.lab, ctx.view
    ns = lab.operator_namespace
    node = ctx.baseline["node"]
    plugin = _node_pod(ctx, gpu.DEVICE_PLUGIN_DAEMONSET)
    plugin_name = gpu.name_of(plugin) if plugin else "<device-plugin pod>"
    return [
        Finding("1. Node: capacity against allocatable",
                "kubectl get nodes -o custom-columns=NAME:.metadata.name,"
                "CAP:.status.capacity.nvidia\\.com/gpu,ALLOC:.status.allocatable.nvidia\\.com/gpu",
                gpu.describe_capacity(view),
                "the plugin still registers the GPU (capacity) but offers none: it holds it "
                "unhealthy", trap="a Ready node with a Ready device plugin has a working GPU"),
        Finding("2. The device plugin's log on that node",
                f"kubectl -n {ns} logs {plugin_name} | grep -i xid", _xid_logged(ctx)[1],
                f"Xid {XID}: the GPU fell off the PCIe bus. Hardware: a restarted plugin cannot "
                "get a handle for it and crash-loops (`GPU is lost`); only a new instance "
                "brings a GPU back"),
        Finding("3. Node conditions",
                f"kubectl get node {node} -o jsonpath="
                f"'{{.status.conditions[?(@.type==\"{CONDITION}\")]}}'",
                _agent_reports(ctx)[1],
                "EKS's node monitoring agent read the Xid through DCGM; with node auto repair on "
                "it would replace the node itself"),
        Finding("4. dcgm-exporter", f"kubectl -n {ns} port-forward {_exporter_name(ctx)} 9400 & "
                "curl -s localhost:9400/metrics | grep XID", _exporter_xid(ctx)[1],
                "the last Xid the GPU raised: what the GpuXidError alert reads"),
        Finding("5. Operands and ClusterPolicy", f"kubectl -n {ns} get ds; kubectl get "
                "clusterpolicy cluster-policy -o jsonpath='{.status.state}'",
                f"{gpu.describe_operands(view)}; {gpu.policy_state(gpu.cluster_policy(view))}",
                "all ready (trap): nothing in Kubernetes failed but the GPU",
                trap="status.state stays ready"),
        Finding("6. The fix", f"kubectl drain {node} --ignore-daemonsets --delete-emptydir-data "
                "--force; aws ec2 terminate-instances --instance-ids <its instance>",
                f"{node}: {_instance_of(view, node)}",
                "the node group replaces the instance; the new node's GPU is on the bus"),
    ]  # fmt: skip


def _instance_of(objects: Objects, node: str) -> str:
    found = objects.find("nodes", node) or {}
    return str((found.get("spec") or {}).get("providerID") or "no providerID")


# --- recovery (T+ from the revert) ------------------------------------------------------------


def node_replaced(ctx: Context) -> Verdict:
    lost = lost_nodes(ctx.view)
    names = [gpu.name_of(n) for n in gpu.gpu_nodes(ctx.view)]
    held = not lost and ctx.baseline["node"] not in names
    return held, f"GPU nodes {', '.join(names) or 'none'}; {CONDITION}=False on: " + (
        ", ".join(lost) or "none"
    )


def gpus_back(ctx: Context) -> Verdict:
    nodes = gpu.schedulable_gpu_nodes(ctx.view)
    offering = [n for n in nodes if gpu.gpu_quantity(n) == "1"]
    wanted = len(ctx.baseline["gpu_nodes"])
    held = len(offering) == wanted and len(gpu.gpu_nodes(ctx.view)) == wanted
    return held, gpu.describe_allocatable(ctx.view)


def probe_again(ctx: Context) -> None:
    probes.recreate_probe(ctx.lab, ctx.lab.settings.probe_timeout)


recovery = [
    Check(f"the node whose GPU fell off the bus is gone: no GPU node reports {CONDITION}=False",
          node_replaced, 240, names_cause=True),
    Check("as many GPU nodes as before, each advertising nvidia.com/gpu 1", gpus_back, 600,
          then=probe_again),
    Check("ClusterPolicy status.state ready", _checks.policy_ready_again, 600),
    Check("gpu-probe runs again with the baseline output", _checks.probe_output_as_baseline(PROBE),
          420, tool=True),
]  # fmt: skip


def state_rows(ctx: Context) -> dict[str, str]:
    """Summary rows without node names: the node is replaced, so names change."""
    nodes = gpu.gpu_nodes(ctx.view)
    offering = [n for n in nodes if gpu.gpu_quantity(n) == "1"]
    return {
        "GPU nodes advertising nvidia.com/gpu 1": f"{len(offering)} of {len(nodes)}",
        f"GPU nodes with {CONDITION}=False": str(len(lost_nodes(ctx.view))),
        "ClusterPolicy status.state": gpu.policy_state(gpu.cluster_policy(ctx.view)),
    }


GPU_NODES = "kubectl get nodes -l nvidia.com/gpu.present=true"
PLUGIN_ON_NODE = (
    "kubectl -n $GPU_OPERATOR_NS get pods -l app=nvidia-device-plugin-daemonset "
    "--field-selector spec.nodeName=$NODE -o name"
)
by_hand = ByHand(
    inject=[
        "# no command makes a real GPU fall off the bus: on a rehearsal lab "
        "`invoke scenario.inject gpu-xid-79` asks the world for it",
    ],
    look=[
        Step(f"{GPU_NODES} -o jsonpath='{{range .items[*]}}{{.status.capacity.nvidia\\.com/gpu}}/"
             "{.status.allocatable.nvidia\\.com/gpu} {end}{\"\\n\"}'",
             "1/0", "capacity/allocatable: one node registers its GPU but offers none"),
        Step(f"NODE=$({GPU_NODES} -o jsonpath='{{.items[0].metadata.name}}') && kubectl -n "
             f"$GPU_OPERATOR_NS logs $({PLUGIN_ON_NODE})",
             f"XidCriticalError: Xid={XID} on Device=GPU-",
             "the plugin's health check saw the Xid and marked the GPU unhealthy"),
        Step(f"kubectl get nodes -o jsonpath='{{range .items[*]}}{{.metadata.name}} "
             f"{{.status.conditions[?(@.type==\"{CONDITION}\")].reason}}{{\"\\n\"}}{{end}}'",
             REASON, "the node monitoring agent's verdict"),
        Step(f"NODE=$({GPU_NODES} -o jsonpath='{{.items[0].metadata.name}}') && kubectl -n "
             "$GPU_OPERATOR_NS exec $(kubectl -n $GPU_OPERATOR_NS get pods "
             "-l app=nvidia-dcgm-exporter --field-selector spec.nodeName=$NODE -o name) "
             "-- nvidia-smi",
             "GPU is lost. Reboot the system to recover this GPU",
             "NVML cannot reach the GPU any more"),
        _checks.policy_state_step("no error anywhere (trap)"),
    ],
    revert=[
        f"NODE=$(kubectl get nodes -o jsonpath='{{range .items[*]}}{{.metadata.name}} "
        f"{{.status.conditions[?(@.type==\"{CONDITION}\")].status}}{{\"\\n\"}}{{end}}' "
        "| awk '$2==\"False\" {print $1}')",
        'kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --force',
        "aws ec2 terminate-instances --instance-ids "
        "$(kubectl get node \"$NODE\" -o jsonpath='{.spec.providerID}' | cut -d/ -f5)",
    ],
)  # fmt: skip


FACTS = Facts(
    summary="one GPU node's GPU falls off the bus (Xid 79): allocatable 0 with capacity 1, "
    "the device plugin logs XidCriticalError, everything else stays green",
    area="node",
    needs=Needs(
        gpu_nodes=2,
        operator=True,
        rehearsal_only="an Xid 79 cannot be made safely on a real GPU: no API raises one, "
        "and a GPU that really fell off the bus stays lost until its instance is replaced",
    ),
    risk="medium on a rehearsal: the node's GPU is unusable until the node is replaced "
    "(its pods are evicted when it is drained); the other node is untouched",
    duration="about 8 minutes on EKS (Xid seen at once; a new node joins ~6 minutes after the "
    "old instance is terminated)",
    doctor_finding="gpu-xid-error",
    cause=Cause(
        plain="The GPU of one node fell off the PCIe bus (Xid 79): the device plugin marked "
        "it unhealthy, and only replacing the node brings a GPU back.",
        names=(
            (
                "xid",
                "Xid 79",
                "XidCriticalError",
                "fell off the bus",
                "fallen off the bus",
                "off the bus",
                "GPU is lost",
                "lost GPU",
                "GPU lost",
            ),
        ),  # fmt: skip
        clues=(
            _words.ONE_NODE,
            ("hardware", "broken GPU", "faulty GPU", "dead GPU", "failed GPU", "GPU failure"),
            ("unhealthy", "marked unhealthy"),
            ("pcie", "bus"),
            ("replace the node", "terminate", "drain", "new node", "node replacement"),
            ("AcceleratedHardwareReady", "node monitoring agent"),
        ),
    ),
    alerts=("GpuAllocatableZeroOnGpuNode", "GpuXidError"),
    state=state_rows,
    by_hand=by_hand,
)
