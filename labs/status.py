"""lab.status and lab.env: what the lab is, runs, costs and has injected, read-only.

Status never changes anything, so it never needs the guard; each part that cannot be
read (a stopped rehearsal process, a cluster that is not up yet) says so in its line
instead of failing the whole view.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from labs.aws import stack
from labs.kube import gpu
from labs.kube.view import Snapshot, list_objects
from labs.lab import Lab


def gather(lab: Lab) -> dict[str, Any]:
    """Everything lab.status shows, as plain data."""
    backend = lab.backend
    status: dict[str, Any] = {
        "lab": lab.name,
        "backend": backend.name,
        "backend_label": backend.describe(lab),
        "region": lab.region,
        "cluster": lab.outputs.get("cluster_name"),
        "endpoint": lab.outputs.get("cluster_endpoint"),
        "variables": lab.variables,
        "injected": (
            [e["scenario"] for e in lab.journal.outstanding()] if backend.keeps_files else None
        ),
        "problems": [],
    }
    if backend.keeps_files:
        status["nodegroups"] = _read(status, "node groups", lambda: _nodegroups(lab))
    if not backend.keeps_files or lab.paths.kubeconfig.exists():
        status["nodes"] = _read(status, "nodes", lambda: _nodes(lab))
        status["daemonsets"] = _read(status, "operator DaemonSets", lambda: _daemonsets(lab))
        status["operator"] = _read(status, "GPU Operator controller", lambda: _operator(lab))
        status["clusterpolicy"] = _read(status, "ClusterPolicy", lambda: _cluster_policy(lab))
    status["cost"] = _cost(lab, status) if backend.keeps_files else None
    return status


def _read(status: dict[str, Any], what: str, reader: Callable[[], Any]) -> Any:
    try:
        return reader()
    except Exception as exc:  # noqa: BLE001 - status shows what it can and names the rest
        status["problems"].append(f"{what}: could not be read ({exc.__class__.__name__}: {exc})")
        return None


def _nodegroups(lab: Lab) -> list[dict[str, Any]]:
    from labs.aws.cloud import describe_gpu_nodegroup

    cluster = lab.cluster_name
    names = (
        lab.outputs.get("system_node_group_name") or stack.system_node_group_name(cluster),
        lab.outputs.get("gpu_node_group_name") or stack.gpu_node_group_name(cluster),
    )
    eks = lab.aws_client("eks")
    return [describe_gpu_nodegroup(eks, cluster, str(name)) for name in names]


def _nodes(lab: Lab) -> list[dict[str, Any]]:
    from kubernetes import client as k8s

    nodes = list_objects(k8s.CoreV1Api(lab.kube).list_node)
    return [
        {
            "name": gpu.name_of(n),
            "instance_type": n["metadata"]
            .get("labels", {})
            .get("node.kubernetes.io/instance-type"),
            "gpu_node": gpu.is_gpu_node(n),
            "ready": gpu.is_ready(n),
            "gpu_allocatable": gpu.gpu_quantity(n),
            "taints": [gpu.taint_text(t) for t in gpu.taints_of(n)],
        }
        for n in sorted(nodes, key=gpu.name_of)
    ]


def _operator(lab: Lab) -> str | None:
    """The controller's Deployment and pods, or None when the operator is not installed."""
    objects = lab.snapshot("deployments", "operator_pods")
    return gpu.describe_operator(objects) if gpu.operator_deployment(objects) else None


def _daemonsets(lab: Lab) -> list[dict[str, Any]]:
    from kubernetes import client as k8s

    apps = k8s.AppsV1Api(lab.kube)
    daemonsets = list_objects(apps.list_namespaced_daemon_set, namespace=lab.operator_namespace)
    result = []
    for ds in sorted(daemonsets, key=gpu.name_of):
        desired, _current, ready = gpu.daemonset_counts(ds)
        result.append({"name": gpu.name_of(ds), "desired": desired, "ready": ready})
    return result


def _cluster_policy(lab: Lab) -> dict[str, Any] | None:
    from kubernetes import client as k8s

    custom = k8s.CustomObjectsApi(lab.kube)
    try:
        policies = list_objects(
            custom.list_cluster_custom_object,
            group="nvidia.com",
            version="v1",
            plural="clusterpolicies",
        )
    except k8s.ApiException as error:
        if error.status == 404:  # the CRD is not installed: no GPU Operator
            return None
        raise
    policy = gpu.cluster_policy(Snapshot({"clusterpolicies": policies})) or (
        policies[0] if policies else None
    )
    if policy is None:
        return None
    return {
        "name": gpu.name_of(policy),
        "state": (policy.get("status") or {}).get("state"),
        "toggles": gpu.component_toggles(policy),
    }


def _cost(lab: Lab, status: dict[str, Any]) -> dict[str, Any]:
    from labs.aws.pricing import estimate_hourly_cost

    system_group, gpu_group = status.get("nodegroups") or [{}, {}]
    estimate = estimate_hourly_cost(
        lab.region,
        gpu_nodes=gpu_group.get("desired_size") or 0,
        system_nodes=system_group.get("desired_size") or 0,
        gpu_instance_type=lab.settings.gpu_instance_type,
    ).as_dict()
    if not lab.backend.bills:
        note = f"{lab.backend.describe(lab)}: nothing bills; this is the AWS cost"
        estimate["notes"].insert(0, note)
    return estimate


def render(status: dict[str, Any]) -> str:
    """The status as the terminal shows it."""
    lines = [
        f"lab {status['lab']}  backend {status['backend']} ({status['backend_label']})  "
        f"region {status['region']}",
        f"cluster {status.get('cluster') or '-'}  {status.get('endpoint') or '(not created yet)'}",
    ]
    if status.get("nodegroups"):
        lines.append("node groups:")
        for g in status["nodegroups"]:
            lines.append(
                f"  {g['name']:<24} {','.join(g['instance_types']):<11} "
                f"min {g['min_size']} max {g['max_size']} desired {g['desired_size']}  "
                f"{g['status']}"
            )
    if status.get("nodes") is not None:
        lines.append("nodes:")
        for n in status["nodes"]:
            alloc = "-" if n["gpu_allocatable"] is None else n["gpu_allocatable"]
            kind = "gpu" if n["gpu_node"] else "system"
            ready = "Ready" if n["ready"] else "NotReady"
            lines.append(f"  {n['name']:<52} {kind:<6} {ready:<8} nvidia.com/gpu {alloc}")
            if n.get("taints"):
                lines.append(f"    taints: {', '.join(n['taints'])}")
    if status.get("daemonsets") is not None:
        lines.append("GPU Operator DaemonSets (ready/desired):")
        for d in status["daemonsets"] or [{"name": "(none)", "ready": "-", "desired": "-"}]:
            lines.append(f"  {d['name']:<48} {d['ready']}/{d['desired']}")
    if status.get("operator"):
        lines.append(f"GPU Operator controller ({gpu.OPERATOR_DEPLOYMENT}): {status['operator']}")
    policy = status.get("clusterpolicy")
    if policy:
        toggles = " ".join(f"{k}={'on' if v else 'off'}" for k, v in policy["toggles"].items())
        lines.append(f"ClusterPolicy {policy['name']}: state {policy['state']}  {toggles}")
    elif "clusterpolicy" in status:
        lines.append("ClusterPolicy: none (GPU Operator not installed)")
    injected = status["injected"]
    if injected is not None:
        lines.append("injected faults: " + (", ".join(injected) if injected else "none"))
    lines += _cost_lines(status["cost"])
    for problem in status["problems"]:
        lines.append(f"! {problem}")
    return "\n".join(lines)


def _cost_lines(cost: dict[str, Any] | None) -> list[str]:
    if cost is None:
        return ["running cost: not a lab (the tool created nothing here, so it bills nothing)"]
    lines = [f"running cost (estimate, USD/hour): {cost['total']:.3f}"]
    for item in cost["items"]:
        hourly = item["hourly"]
        lines.append(f"  {item['label']:<40} {'unknown' if hourly is None else f'{hourly:.3f}'}")
    lines += [f"  note: {note}" for note in cost.get("notes", [])]
    return lines


def env_exports(lab: Lab) -> str:
    """Shell lines that point kubectl and the aws CLI at the lab (for `eval "$(...)"`).

    Both region variables: boto3 reads AWS_REGION, the aws CLI only AWS_DEFAULT_REGION.
    """
    kubeconfig = lab.record.get("kubeconfig") or lab.paths.kubeconfig
    variables = {
        "KUBECONFIG": str(kubeconfig),
        "AWS_REGION": lab.region,
        "AWS_DEFAULT_REGION": lab.region,
        **lab.backend.env_exports(lab),
    }
    lines = [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]
    if not lab.backend.bills and "AWS_ACCESS_KEY_ID" in variables:
        lines.append(f"# {lab.backend.describe(lab)}: stand-in credentials, not real ones")
    return "\n".join(lines)
