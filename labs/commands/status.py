"""lab.status, lab.list and lab.env: what labs are, run, cost and have injected, read-only.

Status never changes anything, so it never needs the guard; each part that cannot be
read (a stopped rehearsal process, a cluster that is not up yet) says so in its line
instead of failing the whole view, and lab.list shows every lab even when some of them
cannot be reached.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labs import time_limit
from labs.aws import stack
from labs.console import columns
from labs.errors import LabError, explain
from labs.kube import alerts, gpu, rest
from labs.kube.resources import CLUSTER_POLICIES, DAEMON_SETS, NODES, KubeApiError
from labs.kube.view import Snapshot, check_access, check_lab_kubeconfig
from labs.lab import Lab, known_labs
from labs.settings import LabSettings

KUBERC = Path(gpu.__file__).resolve().parent / "kuberc.yaml"  # with the kube layer


def gather(lab: Lab) -> dict[str, Any]:
    """Everything lab.status shows, as plain data."""
    backend = lab.backend
    practising = _practising(lab)
    status: dict[str, Any] = {
        "lab": lab.name,
        "backend": backend.name,
        "backend_label": backend.describe(lab),
        "region": lab.region,
        "cluster": lab.outputs.get("cluster_name"),
        "endpoint": lab.outputs.get("cluster_endpoint"),
        # A toggle a hidden practice fault turned off would name it: shown once it is revealed.
        "variables": None if practising else lab.variables,
        "toggles_hidden": practising,
        "injected": (lab.journal.shown() if backend.keeps_files else None),
        "journal_gap": lab.journal.incomplete() if backend.keeps_files else None,
        "problems": [],
    }
    if why := backend.unreachable(lab):
        status["problems"].append(
            f"unknown: could not read the node groups, nodes, GPU Operator or cost because "
            f"{why}. `invoke lab.down --lab {lab.name}` stops what may still run"
        )
        return status
    if backend.keeps_files:
        _read(status, "nodegroups", "node groups", lambda: _nodegroups(lab))
        groups = status.get("nodegroups")
        _read(status, "time_limit", "GPU time limit", lambda: _time_limit(lab, groups))
        _read(status, "gpu_session", "GPU session", lambda: _session(lab, status))
        if "nodegroups" in status:
            status["cost"] = _cost(lab, status)
    else:
        status["cost"] = None
    if ailing := backend.ailing(lab):
        status["problems"].append(
            f"the lab's cluster cannot move: {'; '.join(ailing)}. `invoke lab.up "
            f"--lab {lab.name}` restarts it; `invoke lab.down --lab {lab.name}` scales its GPU "
            "nodes to 0 meanwhile"
        )
    try:
        check_access(lab.kube)  # one bounded read, not a timeout for each part below
    except (LabError, OSError) as error:
        status["problems"].append(
            "unknown: could not read the nodes, operator DaemonSets, GPU Operator, ClusterPolicy "
            f"or Prometheus' alerts because {error}"
        )
        return status
    _read(status, "nodes", "nodes", lambda: _nodes(lab))
    _read(status, "daemonsets", "operator DaemonSets", lambda: _daemonsets(lab))
    _read(status, "operator", "GPU Operator controller", lambda: _operator(lab))
    _read(status, "clusterpolicy", "ClusterPolicy", lambda: _cluster_policy(lab))
    _read(status, "alerts", "Prometheus' alerts", lambda: _alerts(lab))
    return status


def _read(status: dict[str, Any], key: str, what: str, reader: Callable[[], Any]) -> None:
    """status[key] = reader(); one that fails leaves the key out (shown as unknown, not as
    "none") and names what could not be read and why."""
    try:
        status[key] = reader()
    except Exception as exc:  # noqa: BLE001 - status shows what it can and names the rest
        status["problems"].append(f"unknown: could not read {what} because {explain(exc)}")


def _nodegroups(lab: Lab, attempts: int | None = None) -> list[dict[str, Any]]:
    """The system and GPU node groups; `attempts` bounds the retries (lab.list: advisory)."""
    from labs.aws.cloud import describe_gpu_nodegroup

    cluster = lab.cluster_name
    names = (
        lab.outputs.get("system_node_group_name") or stack.system_node_group_name(cluster),
        lab.gpu_node_group,
    )
    eks = lab.aws.client("eks", max_attempts=attempts)
    return [describe_gpu_nodegroup(eks, cluster, str(name)) for name in names]


def _time_limit(lab: Lab, groups: list[dict[str, Any]] | None) -> str:
    """The limit's line, from the GPU group just read (`groups`: system, GPU) when there is one."""
    desired = groups[1]["desired_size"] if groups else None
    return time_limit.describe(time_limit.read(lab, desired), lab)


def _session(lab: Lab, status: dict[str, Any]) -> str | None:
    """The running GPU session's cost, or None while no GPU node is asked for."""
    from labs.billing import describe_session, gpu_session

    _system, gpu_group = status.get("nodegroups") or [{}, {}]
    session = gpu_session(lab, gpu_group.get("desired_size") or 0)
    if session is None or not session.nodes:
        return None
    return describe_session(session, lab)


def _nodes(lab: Lab) -> list[dict[str, Any]]:
    nodes = rest.get_items(lab.kube, NODES.path())
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
    """The controller's release (its image's tag), Deployment and pods, or None when the
    operator is not installed."""
    objects = lab.snapshot("deployments", "operator_pods")
    deployment = gpu.operator_deployment(objects)
    if deployment is None:
        return None
    return f"{gpu.operator_version(deployment)}, {gpu.describe_operator(objects)}"


def _daemonsets(lab: Lab) -> list[dict[str, Any]]:
    daemonsets = rest.get_items(lab.kube, DAEMON_SETS.path(lab.operator_namespace))
    result = []
    for ds in sorted(daemonsets, key=gpu.name_of):
        desired, _current, ready = gpu.daemonset_counts(ds)
        result.append({"name": gpu.name_of(ds), "desired": desired, "ready": ready})
    return result


def _cluster_policy(lab: Lab) -> dict[str, Any] | None:
    try:
        policies = rest.get_items(lab.kube, CLUSTER_POLICIES.path())
    except KubeApiError as error:
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
        "state": gpu.policy_state(policy),
        "why": gpu.policy_error(policy),
        "toggles": gpu.component_toggles(policy),
    }


def _alerts(lab: Lab) -> list[dict[str, str]] | None:
    """The alerts pending or firing now; None when the lab has no monitoring."""
    if not alerts.monitoring_installed(lab.kube):
        return None
    return [
        {"name": a.name, "state": a.state, "since": a.active_at, "summary": a.summary}
        for a in sorted(alerts.read_alerts(lab.kube), key=lambda a: (a.state != "firing", a.name))
    ]


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
    if status.get("variables"):
        lines.append(f"stack toggles (last applied): {_toggles(status['variables'])}")
    elif status.get("toggles_hidden"):
        lines.append("stack toggles (last applied): hidden while a practice exercise is going")
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
        if policy["why"]:
            lines.append(f"  the operator says: {policy['why']}")
    elif "clusterpolicy" in status:
        lines.append("ClusterPolicy: none (GPU Operator not installed)")
    lines += _alert_lines(status)
    if status.get("time_limit"):
        lines.append(f"GPU time limit: {status['time_limit']}")
    if status.get("gpu_session"):
        lines.append(f"GPU node-minutes since the GPUs came up: {status['gpu_session']}")
    injected = status["injected"]
    if injected is not None:
        lines.append("injected faults: " + (", ".join(injected) if injected else "none"))
    if status.get("journal_gap"):
        lines.append(
            f"  ({status['journal_gap']}: a fault may be in unrecorded; "
            f"`invoke scenario.revert --all --lab {status['lab']}` looks in the cluster)"
        )
    lines += _cost_lines(status["cost"]) if "cost" in status else ["running cost: unknown"]
    for problem in status["problems"]:
        lines.append(f"! {problem}")
    return "\n".join(lines)


def _alert_lines(status: dict[str, Any]) -> list[str]:
    if "alerts" not in status:
        return []
    if status["alerts"] is None:
        return ["alerts: no monitoring (invoke lab.up --monitoring)"]
    if not status["alerts"]:
        return ["alerts: none pending or firing"]
    lines = ["alerts (Prometheus):"]
    for alert in status["alerts"]:
        lines.append(f"  {alert['state']:<8} {alert['name']:<34} since {alert['since']}")
        if alert["summary"]:
            lines.append(f"           {alert['summary']}")
    return lines


def _practising(lab: Lab) -> bool:
    return lab.backend.keeps_files and bool(lab.journal.hidden_outstanding())


def _toggles(variables: dict[str, Any]) -> str:
    return "  ".join(
        f"{name}={str(variables.get(name, '-')).lower()}" for name in stack.STACK_TOGGLES
    )


def _cost_lines(cost: dict[str, Any] | None) -> list[str]:
    if cost is None:
        return ["running cost: not a lab (the tool created nothing here, so it bills nothing)"]
    lines = [f"running cost (estimate, USD/hour): {cost['total']:.3f}"]
    for item in cost["items"]:
        hourly = item["hourly"]
        lines.append(f"  {item['label']:<40} {'unknown' if hourly is None else f'{hourly:.3f}'}")
    lines += [f"  note: {note}" for note in cost.get("notes", [])]
    return lines


# --- lab.list ---------------------------------------------------------------------------


def gather_all(settings: LabSettings) -> list[dict[str, Any]]:
    """One row per lab under the state directory; a lab that cannot be read says why."""
    rows = []
    for name in known_labs(settings):
        try:
            lab = Lab.open(dataclasses.replace(settings, lab=name))
        except Exception as error:  # noqa: BLE001 - a damaged lab is a row, not the end
            rows.append(_row(name, "?", problem=explain(error)))
            continue
        rows.append(_overview(lab))
    return rows


def _row(name: str, backend: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "lab": name, "backend": backend, "reachable": False, "gpu_nodes": None,
        "cost_per_hour": None, "time_limit": None, "injected": [], "problem": None,
    }  # fmt: skip
    return row | fields


def _overview(lab: Lab) -> dict[str, Any]:
    """A lab's row: what runs and bills, read with few retries so a dead one answers fast."""
    from labs.aws.cloud import ADVISORY_ATTEMPTS

    row = _row(lab.name, lab.backend.name, injected=lab.journal.shown())
    if why := lab.backend.unreachable(lab):
        return row | {"problem": why}
    try:
        system_group, gpu_group = _nodegroups(lab, attempts=ADVISORY_ATTEMPTS)
        limit = time_limit.read(lab, gpu_group["desired_size"])
        check_access(lab.kube)
    except Exception as error:  # noqa: BLE001 - an unreachable lab is a row, not the end
        return row | {"problem": explain(error)}
    return row | {
        "reachable": True,
        "gpu_nodes": gpu_group["desired_size"],
        "cost_per_hour": _cost(lab, {"nodegroups": [system_group, gpu_group]})["total"],
        "bills": lab.backend.bills,
        "time_limit": time_limit.brief(limit),
    }


def render_list(rows: list[dict[str, Any]], state_dir: str) -> str:
    """lab.list as a table, with why a lab could not be read under it."""
    if not rows:
        return f"no labs under {state_dir}; create one with `invoke lab.up --sim --lab NAME`"
    header = ("LAB", "BACKEND", "REACHABLE", "GPU NODES", "USD/HOUR", "GPU TIME LIMIT", "FAULTS")
    table = [header] + [_list_cells(row) for row in rows]
    lines = columns(table)
    lines += [f"! {row['lab']}: {row['problem']}" for row in rows if row["problem"]]
    if any(row.get("bills") is False for row in rows):
        lines.append("* a rehearsal bills nothing: the figure is what the same lab costs on AWS")
    return "\n".join(lines)


def _list_cells(row: dict[str, Any]) -> tuple[str, ...]:
    cost = "-" if row["cost_per_hour"] is None else f"{row['cost_per_hour']:.3f}"
    if row.get("bills") is False:
        cost += "*"
    return (
        row["lab"],
        row["backend"],
        "yes" if row["reachable"] else "no",
        "-" if row["gpu_nodes"] is None else str(row["gpu_nodes"]),
        cost,
        row["time_limit"] or "-",
        ", ".join(row["injected"]) or "none",
    )


def kubectl_preferences() -> dict[str, str]:
    """KUBERC at the lab's kubectl preferences (`kubectl debug` without a deprecation warning),
    unless the user has preferences of their own, which win."""
    if os.environ.get("KUBERC") or (Path.home() / ".kube" / "kuberc").exists():
        return {}
    return {"KUBERC": str(KUBERC)}


def env_exports(lab: Lab) -> str:
    """Shell lines that point kubectl and the aws CLI at the lab (for `eval "$(...)"`).

    Both region variables: boto3 reads AWS_REGION, the aws CLI only AWS_DEFAULT_REGION.
    """
    if lab.backend.keeps_files:  # a lab's own kubeconfig, which lab.up writes
        check_lab_kubeconfig(lab.paths.kubeconfig, lab.name)
    kubeconfig = lab.record.get("kubeconfig") or lab.paths.kubeconfig
    variables = {
        "KUBECONFIG": str(kubeconfig),
        "AWS_REGION": lab.region,
        "AWS_DEFAULT_REGION": lab.region,
        "GPU_OPERATOR_NS": lab.operator_namespace,  # the runbooks' `kubectl -n $GPU_OPERATOR_NS`
        **kubectl_preferences(),
        **lab.backend.env_exports(lab),
    }
    lines = [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]
    if not lab.backend.bills and "AWS_ACCESS_KEY_ID" in variables:
        lines.append(f"# {lab.backend.describe(lab)}: stand-in credentials, not real ones")
    return "\n".join(lines)
