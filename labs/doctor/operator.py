"""Flowchart steps 3 and 4: the operand DaemonSets, then the ClusterPolicy and its operator.

Operands: each component the ClusterPolicy enables has its DaemonSet, with a ready pod on
every GPU node its nodeSelector admits. Operator: the controller's Deployment is available
(not scaled to 0, not crash-looping on OOMKilled), and the ClusterPolicy's spec and status
agree. A disabled component is reported even while `status.state` says ready: a deliberate
disable is a successful reconcile, which is the trap.
"""

from __future__ import annotations

import json

from labs.doctor.catalog import kind
from labs.doctor.facts import Facts, Obj, node_subject, subject
from labs.doctor.logs import log_requests
from labs.doctor.model import DoctorFinding, Evidence, Link
from labs.doctor.nodes import ADVERTISING
from labs.kube import gpu
from labs.kube.scheduling import pod_fits_selector

MAX_POD_LOGS = 2  # not-ready pods of one DaemonSet whose logs are read
PLUGIN_CONTAINER = "nvidia-device-plugin"  # the operator's container; the chart's adds "-ctr"
# What kubectl shows of a pod that is still on its way up, not failing.
STARTING = {"PodInitializing", "ContainerCreating"}
# What turning a component off costs, for the info line (the device plugin is an error).
DISABLED_MEANS = {
    "driver": "the driver must come with the node image (the AL2023 NVIDIA AMI has it)",
    "toolkit": "the container toolkit must come with the node image (the AL2023 NVIDIA AMI has it)",
    "dcgmExporter": "no DCGM_FI_DEV_* GPU metrics for Prometheus",
    "gfd": "no nvidia.com/gpu.product/memory/... labels; pods selecting them stay Pending",
}
NO_ADVERTISING = [Link(name) for name in ADVERTISING]


def _ds_subject(facts: Facts, name: str) -> str:
    return f"daemonset/{facts.operator_namespace}/{name}"


# --- operand DaemonSets --------------------------------------------------------------------------


def operands_present(facts: Facts) -> list[DoctorFinding]:
    """Every component the ClusterPolicy enables has its DaemonSet."""
    policy = facts.policy
    if policy is None:
        return []
    found = []
    for component in gpu.COMPONENTS:
        if not gpu.component_on(policy, component) or gpu.daemonset(facts, component.daemonset):
            continue
        plugin = component.daemonset == gpu.DEVICE_PLUGIN_DAEMONSET
        enabled = gpu.component_enabled(policy, component.spec_key)
        found.append(
            kind("operand-daemonset-missing").found(
                _ds_subject(facts, component.daemonset),
                f"DaemonSet {component.daemonset} NotFound",
                [
                    Evidence(_ds_subject(facts, component.daemonset), "GET", "NotFound"),
                    Evidence(
                        subject("clusterpolicy", policy),
                        f"spec.{component.spec_key}.enabled",
                        "unset (on by default)" if enabled is None else str(enabled).lower(),
                    ),
                ],
                explains=NO_ADVERTISING if plugin else [],
                component=component.spec_key,
                daemonset=component.daemonset,
                namespace=facts.operator_namespace,
            )
        )
    return found


def _is_plugin(ds: Obj) -> bool:
    """A device-plugin DaemonSet: the operator's, or one installed on its own."""
    return gpu.name_of(ds) == gpu.DEVICE_PLUGIN_DAEMONSET or any(
        str(c.get("name", "")).startswith(PLUGIN_CONTAINER)
        for c in gpu.pod_template_spec(ds).get("containers") or []
    )


def _plugin_daemonsets(facts: Facts) -> list[Obj]:
    """Device-plugin DaemonSets in any namespace."""
    return [ds for ds in facts.objects("daemonsets") if _is_plugin(ds)]


def operands_ready(facts: Facts) -> list[DoctorFinding]:
    """Each operand DaemonSet: ready against desired, and a pod on every GPU node it admits."""
    found = []
    for ds in gpu.operand_daemonsets(facts) or _plugin_daemonsets(facts):
        found += _readiness(facts, ds) + _coverage(facts, ds)
    return found


def _readiness(facts: Facts, ds: Obj) -> list[DoctorFinding]:
    desired, _current, ready = gpu.daemonset_counts(ds)
    if ready >= desired:
        return []
    pods = [p for p in facts.pods_of(ds) if not gpu.is_ready(p)]
    name = gpu.name_of(ds)
    group = "device-plugin" if _is_plugin(ds) else "operand"
    shown = [f"{gpu.name_of(p)} ({_pod_state(p)})" for p in pods]
    # A toggle rewrites an operand's template and its pods are replaced one node at a time: pods
    # on their way up with nothing restarted are a rollout to look at again, not a root cause.
    starting = bool(pods) and all(_starting(p) for p in pods)
    nodes = [
        node_subject(str(p["spec"].get("nodeName"))) for p in pods if p["spec"].get("nodeName")
    ]
    return [
        kind("operand-not-ready").found(
            subject("daemonset", ds),
            f"DaemonSet {name}: {ready}/{desired} ready"
            + (
                " (pods starting, none restarted: a rollout? look again in a minute)"
                if starting
                else ""
            ),
            [
                Evidence(
                    subject("daemonset", ds),
                    "status.numberReady/desiredNumberScheduled",
                    f"{ready}/{desired}",
                ),
                *(Evidence(subject("pod", p), "status", _pod_state(p)) for p in pods),
            ],
            explains=[
                Link("clusterpolicy-not-ready"),
                *(
                    [Link(a, n) for a in ADVERTISING for n in nodes]
                    if group == "device-plugin"
                    else []
                ),
            ],
            severity="warning" if starting else None,
            confidence="medium" if starting else "high",
            read_logs=[r for p in pods[:MAX_POD_LOGS] for r in log_requests(p, group)],
            daemonset=name,
            ready=ready,
            desired=desired,
            pods=", ".join(shown) or "none listed",
            namespace=ds["metadata"].get("namespace"),
            pod=gpu.name_of(pods[0]) if pods else name,
        )
    ]


def _pod_state(pod: Obj) -> str:
    """What `kubectl get pod` shows in STATUS: a waiting reason (Init: for init containers)."""
    status = pod.get("status") or {}
    for prefix, key in (("Init:", "initContainerStatuses"), ("", "containerStatuses")):
        for container in status.get(key) or []:
            waiting = ((container.get("state") or {}).get("waiting") or {}).get("reason")
            if waiting:
                return f"{prefix}{waiting}"
    return str(status.get("phase") or "Pending")


def _starting(pod: Obj) -> bool:
    """Nothing restarted and nothing terminated in error: each container waits to start or
    an init container runs."""
    for container in gpu.container_statuses(pod):
        state = container.get("state") or {}
        if container.get("restartCount") or (state.get("terminated") or {}).get("exitCode"):
            return False
        waiting = (state.get("waiting") or {}).get("reason")
        if waiting and waiting not in STARTING:
            return False
    return (pod.get("status") or {}).get("phase") in (None, "Pending", "Running")


def _coverage(facts: Facts, ds: Obj) -> list[DoctorFinding]:
    admitted = [n for n in facts.gpu_nodes if pod_fits_selector(gpu.pod_template_spec(ds), n)]
    running = {p["spec"].get("nodeName") for p in facts.pods_of(ds)}
    missing = [gpu.name_of(n) for n in admitted if gpu.name_of(n) not in running]
    if not missing:
        return []
    plugin = _is_plugin(ds)
    return [
        kind("operand-missing-on-gpu-nodes").found(
            subject("daemonset", ds),
            f"DaemonSet {gpu.name_of(ds)}: no pod on {', '.join(missing)}",
            [
                Evidence(subject("daemonset", ds), "pods by node", f"none on {', '.join(missing)}"),
                Evidence(
                    subject("daemonset", ds),
                    "spec.template.spec.nodeSelector",
                    json.dumps(gpu.pod_template_spec(ds).get("nodeSelector") or {}),
                ),
            ],
            explains=[Link(a, node_subject(n)) for a in ADVERTISING for n in missing]
            if plugin
            else [],
            tags=[node_subject(n) for n in missing],
            daemonset=gpu.name_of(ds),
            nodes=", ".join(missing),
            namespace=ds["metadata"].get("namespace"),
        )
    ]


# --- the operator ------------------------------------------------------------------------------


def operator_installed(facts: Facts) -> list[DoctorFinding]:
    """GPU nodes with neither a ClusterPolicy nor any device plugin: nothing advertises GPUs."""
    if not facts.gpu_nodes or facts.policy is not None or _plugin_daemonsets(facts):
        return []
    served = "clusterpolicies" in facts.served
    return [
        kind("operator-not-installed").found(
            "clusterpolicies",
            f"{len(facts.gpu_nodes)} GPU node(s), no GPU Operator, no device plugin",
            [
                Evidence(
                    "clusterpolicies.nvidia.com",
                    "LIST",
                    "no objects" if served else "CRD not served",
                ),
                Evidence("daemonsets", "device plugin (by name or image)", "none in any namespace"),
            ],
            explains=NO_ADVERTISING,
        )
    ]


OPERATOR_EXPLAINS = [
    Link(name)
    for name in ("operand-daemonset-missing", "gpu-labels-missing", "clusterpolicy-not-ready")
]


def operator_health(facts: Facts) -> list[DoctorFinding]:
    """Deployment gpu-operator: scaled to 0, OOMKilled, or with no available replica."""
    deployment = gpu.operator_deployment(facts)
    if deployment is None:
        return []
    where = subject("deployment", deployment)
    namespace = deployment["metadata"].get("namespace")
    seen = [
        Evidence(where, "spec.replicas / status.availableReplicas", gpu.describe_operator(facts)),
        *_stale_status(facts),
    ]
    available = gpu.operator_available(deployment)
    if gpu.wanted_replicas(deployment) == 0:
        return [
            kind("operator-scaled-to-zero").found(
                where,
                "Deployment gpu-operator scaled to 0",
                seen,
                explains=OPERATOR_EXPLAINS,
                namespace=namespace,
            )
        ]
    killed = [p for p in gpu.operator_pods(facts) if "OOMKilled" in gpu.last_terminations(p)]
    if killed:
        restarts = sum(_restarts(p) for p in killed)
        return [
            kind("operator-oomkilled").found(
                where,
                f"gpu-operator OOMKilled ({restarts} restart(s))",
                [
                    *seen,
                    *(
                        Evidence(subject("pod", p), "lastState.terminated.reason", "OOMKilled")
                        for p in killed
                    ),
                ],
                severity=None if not available else "warning",
                explains=[*OPERATOR_EXPLAINS, Link("operator-not-running")],
                restarts=restarts,
                namespace=namespace,
            )
        ]
    if available:
        return []
    return [
        kind("operator-not-running").found(
            where,
            "Deployment gpu-operator: no available replica",
            seen,
            explains=OPERATOR_EXPLAINS,
            detail=gpu.describe_operator(facts),
            namespace=namespace,
        )
    ]


def _stale_status(facts: Facts) -> list[Evidence]:
    """The ClusterPolicy's state, which nobody updates while the controller is down."""
    policy = facts.policy
    if policy is None:
        return []
    state = f"{gpu.policy_state(policy)} (last written by a running operator: not live)"
    return [Evidence(subject("clusterpolicy", policy), "status.state", state)]


def _restarts(pod: Obj) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


# --- the ClusterPolicy ---------------------------------------------------------------------


def policy_toggles(facts: Facts) -> list[DoctorFinding]:
    """Components the ClusterPolicy switches off, whatever its status says."""
    policy = facts.policy
    if policy is None:
        return []
    where = subject("clusterpolicy", policy)
    state = gpu.policy_state(policy)
    found = []
    for component in gpu.COMPONENTS:
        key = component.spec_key
        if gpu.component_enabled(policy, key) is not False:
            continue
        toggle = Evidence(where, f"spec.{key}.enabled", "false")
        if component.daemonset == gpu.DEVICE_PLUGIN_DAEMONSET:
            found.append(
                kind("device-plugin-disabled").found(
                    where,
                    f"ClusterPolicy {gpu.name_of(policy)}: devicePlugin.enabled=false "
                    f"(status.state {state})",
                    [
                        toggle,
                        Evidence(where, "status.state", state),
                        Evidence(
                            _ds_subject(facts, component.daemonset),
                            "GET",
                            "present" if gpu.daemonset(facts) else "NotFound",
                        ),
                    ],
                    explains=NO_ADVERTISING,
                    state=state,
                    policy=gpu.name_of(policy),
                )
            )
        elif key in DISABLED_MEANS:
            found.append(
                kind("component-disabled").found(
                    f"{where}/{key}",
                    f"ClusterPolicy: {key}.enabled=false",
                    [toggle],
                    component=key,
                    what=DISABLED_MEANS[key],
                    policy=gpu.name_of(policy),
                )
            )
    return found


def policy_status(facts: Facts) -> list[DoctorFinding]:
    """status.state notReady, with the Error condition's reason and message."""
    policy = facts.policy
    state = gpu.policy_state(policy)
    if policy is None or state != "notReady":
        return []
    where = subject("clusterpolicy", policy)
    error: Obj = gpu.policy_error_condition(policy)
    said = gpu.policy_error(policy) or "no Error condition"
    operands = gpu.operand_daemonsets(facts)
    # The operator re-reads its operands every few seconds: right after a rollout its status
    # can still say notReady while every DaemonSet already is ready. That is a lag to look at
    # again, not a root cause.
    behind = bool(operands) and all(gpu.daemonset_rolled_out(ds) for ds in operands)
    counts = ", ".join(
        f"{gpu.name_of(ds)} {ready}/{desired}"
        for ds in operands
        for desired, _current, ready in [gpu.daemonset_counts(ds)]
    )
    return [
        kind("clusterpolicy-not-ready").found(
            where,
            f"ClusterPolicy {gpu.name_of(policy)}: notReady ({error.get('reason', '?')})"
            + (
                " (every operand DaemonSet is ready now: the operator has not re-read them "
                "yet? look again in a minute)"
                if behind
                else ""
            ),
            [
                Evidence(where, "status.state", state),
                Evidence(where, "status.conditions[Error]", said),
                *([Evidence("daemonsets", "numberReady/desired", counts)] if behind else []),
            ],
            state=state,
            condition=said,
            namespace=facts.operator_namespace,
            severity="warning" if behind else None,
            confidence="medium" if behind else "high",
        )
    ]
