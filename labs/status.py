"""lab.status and lab.env: what the lab is, runs, costs and has injected, read-only.

Status never changes anything, so it never needs the guard; each part that cannot be
read (a stopped rehearsal process, a cluster that is not up yet) says so in its line
instead of failing the whole view.
"""

from __future__ import annotations

import shlex
from typing import Any

from labs import stack
from labs.lab import SIM, SIM_CREDENTIALS, Lab
from labs.nodes import gpu_allocatable, is_gpu_node, is_ready


def gather(lab: Lab) -> dict[str, Any]:
    """Everything lab.status shows, as plain data."""
    status: dict[str, Any] = {
        "lab": lab.name,
        "backend": lab.backend,
        "region": lab.region,
        "cluster": lab.outputs.get("cluster_name"),
        "endpoint": lab.outputs.get("cluster_endpoint"),
        "variables": lab.variables,
        "injected": [e["scenario"] for e in lab.journal.outstanding()],
        "problems": [],
    }
    status["nodegroups"] = _read(status, "node groups", lambda: _nodegroups(lab))
    if lab.paths.kubeconfig.exists():
        status["nodes"] = _read(status, "nodes", lambda: _nodes(lab))
        status["daemonsets"] = _read(status, "operator DaemonSets", lambda: _daemonsets(lab))
        status["clusterpolicy"] = _read(status, "ClusterPolicy", lambda: _cluster_policy(lab))
    status["cost"] = _cost(lab, status)
    return status


def _read(status: dict[str, Any], what: str, reader: Any) -> Any:
    try:
        return reader()
    except Exception as exc:  # noqa: BLE001 - status shows what it can and names the rest
        status["problems"].append(f"{what}: could not be read ({exc.__class__.__name__}: {exc})")
        return None


def _nodegroups(lab: Lab) -> list[dict[str, Any]]:
    from labs.cloud import describe_gpu_nodegroup

    cluster = lab.cluster_name
    names = (
        lab.outputs.get("system_node_group_name") or stack.system_node_group_name(cluster),
        lab.outputs.get("gpu_node_group_name") or stack.gpu_node_group_name(cluster),
    )
    eks = lab.aws_client("eks")
    return [describe_gpu_nodegroup(eks, cluster, str(name)) for name in names]


def _nodes(lab: Lab) -> list[dict[str, Any]]:
    from kubernetes import client as k8s

    from labs.cluster import list_objects

    nodes = list_objects(k8s.CoreV1Api(lab.kube).list_node)
    return [
        {
            "name": n["metadata"]["name"],
            "instance_type": n["metadata"]
            .get("labels", {})
            .get("node.kubernetes.io/instance-type"),
            "gpu_node": is_gpu_node(n),
            "ready": is_ready(n),
            "gpu_allocatable": gpu_allocatable(n),
        }
        for n in sorted(nodes, key=lambda n: n["metadata"]["name"])
    ]


def _daemonsets(lab: Lab) -> list[dict[str, Any]]:
    from kubernetes import client as k8s

    from labs.cluster import list_objects

    apps = k8s.AppsV1Api(lab.kube)
    daemonsets = list_objects(apps.list_namespaced_daemon_set, namespace=lab.operator_namespace)
    return [
        {
            "name": d["metadata"]["name"],
            "desired": d.get("status", {}).get("desiredNumberScheduled", 0),
            "ready": d.get("status", {}).get("numberReady", 0),
        }
        for d in sorted(daemonsets, key=lambda d: d["metadata"]["name"])
    ]


def _cluster_policy(lab: Lab) -> dict[str, Any] | None:
    from kubernetes import client as k8s

    from labs.cluster import list_objects

    custom = k8s.CustomObjectsApi(lab.kube)
    policies = list_objects(
        custom.list_cluster_custom_object,
        group="nvidia.com",
        version="v1",
        plural="clusterpolicies",
    )
    if not policies:
        return None
    policy = policies[0]
    spec = policy.get("spec", {})
    toggles = {
        key: value.get("enabled")
        for key, value in sorted(spec.items())
        if isinstance(value, dict) and "enabled" in value
    }
    return {
        "name": policy["metadata"]["name"],
        "state": policy.get("status", {}).get("state"),
        "toggles": toggles,
    }


def _cost(lab: Lab, status: dict[str, Any]) -> dict[str, Any]:
    from labs.pricing import estimate_hourly_cost

    system_group, gpu_group = status.get("nodegroups") or [{}, {}]
    gpu = gpu_group.get("desired_size") or 0
    system = system_group.get("desired_size") or 0
    estimate = estimate_hourly_cost(
        lab.region,
        gpu_nodes=gpu,
        system_nodes=system,
        gpu_instance_type=lab.settings.gpu_instance_type,
    ).as_dict()
    if lab.backend == SIM:
        estimate["notes"].insert(0, "rehearsal lab: nothing bills; this is the AWS cost")
    return estimate


def render(status: dict[str, Any]) -> str:
    """The status as the terminal shows it."""
    lines = [
        f"lab {status['lab']}  backend {status['backend']}  region {status['region']}",
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
    if status.get("daemonsets") is not None:
        lines.append("GPU Operator DaemonSets (ready/desired):")
        for d in status["daemonsets"] or [{"name": "(none)", "ready": "-", "desired": "-"}]:
            lines.append(f"  {d['name']:<48} {d['ready']}/{d['desired']}")
    policy = status.get("clusterpolicy")
    if policy:
        toggles = " ".join(f"{k}={'on' if v else 'off'}" for k, v in policy["toggles"].items())
        lines.append(f"ClusterPolicy {policy['name']}: state {policy['state']}  {toggles}")
    elif "clusterpolicy" in status:
        lines.append("ClusterPolicy: none (GPU Operator not installed)")
    injected = status["injected"]
    lines.append("injected faults: " + (", ".join(injected) if injected else "none"))
    cost = status["cost"]
    lines.append(f"running cost (estimate, USD/hour): {cost['total']:.3f}")
    for item in cost["items"]:
        hourly = item["usd_per_hour"]
        lines.append(f"  {item['what']:<40} {'unknown' if hourly is None else f'{hourly:.3f}'}")
    for note in cost.get("notes", []):
        lines.append(f"  note: {note}")
    for problem in status["problems"]:
        lines.append(f"! {problem}")
    return "\n".join(lines)


def env_exports(lab: Lab) -> str:
    """Shell lines that point kubectl and the aws CLI at the lab (for `eval "$(...)"`)."""
    lines = [f"export KUBECONFIG={shlex.quote(str(lab.paths.kubeconfig))}"]
    lines.append(f"export AWS_REGION={shlex.quote(lab.region)}")
    if lab.backend == SIM:
        endpoint = lab.sim_endpoints().get("aws_endpoint_url", "")
        lines.append(f"export AWS_ENDPOINT_URL={shlex.quote(endpoint)}")
        lines.append(f"export AWS_ACCESS_KEY_ID={SIM_CREDENTIALS['aws_access_key_id']}")
        lines.append(f"export AWS_SECRET_ACCESS_KEY={SIM_CREDENTIALS['aws_secret_access_key']}")
        lines.append("# rehearsal lab: these are moto's dummy credentials, not real ones")
    return "\n".join(lines)
