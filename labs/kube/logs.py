"""Pod logs, read the way `kubectl logs` reads them, each read bounded in time.

Checks read logs while a run watches the cluster; a log read that hangs must fail the
check that made it, never stall the run, so every read carries a timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labs.kube import rest
from labs.kube.gpu import name_of, operator_deployment, operator_step_line, running_pods_of
from labs.kube.resources import PODS

if TYPE_CHECKING:
    from labs.kube.view import Objects
    from labs.lab import Lab

READ_TIMEOUT = 10.0  # seconds for one log read (connect and read)


def pod_log(lab: Lab, namespace: str, name: str, tail: int | None = None) -> str:
    """What the pod printed (its last `tail` lines when given)."""
    path = PODS.path(namespace, name, "log")
    return rest.get(lab.kube, path, {"tailLines": tail}, timeout=READ_TIMEOUT).decode(
        errors="replace"
    )


def operator_log(lab: Lab, objects: Objects, tail: int = 200) -> list[str]:
    """The last lines of the GPU Operator controller's log (`kubectl logs deploy/gpu-operator`)."""
    deployment = operator_deployment(objects)
    pods = running_pods_of(deployment, objects.objects("operator_pods")) if deployment else []
    if not pods:
        return []
    text = pod_log(lab, lab.operator_namespace, name_of(pods[0]), tail)
    return [line for line in text.splitlines() if line.strip()]


def operator_step(lab: Lab, objects: Objects, step: str, status: str) -> str | None:
    """The operator's log line saying `step` completed with `status`, if it logged one."""
    return operator_step_line(operator_log(lab, objects), step, status)
