"""What the NVIDIA container runtime puts into a container on an AL2023 node, in one place.

The CUDA image ships no nvidia-smi; the NVIDIA container runtime (toolkit 1.19, jit-cdi
mode) injects the driver and the GPUs, and only when asked: by the device plugin for GPUs
the pod was allocated (limits `nvidia.com/gpu`), or, on a node whose default runtime is
`nvidia` (the AL2023 NVIDIA AMI), by `NVIDIA_VISIBLE_DEVICES`, which NVIDIA's images set to
`all` and which an unprivileged container may use
(`accept-nvidia-visible-devices-envvar-when-unprivileged` defaults to true): then every GPU
of the node is there, allocated or not. `none` injects the driver but no GPU; nothing asked,
or runc, injects nothing (no driver, no nvidia-smi). kubelet's programs and the commands
run by exec read it here.
"""

from __future__ import annotations

from labs.kube.gpu import GPU_RESOURCE
from labs.sim.controllers.placement import pod_requests
from labs.sim.node.hardware import DEFAULT_RUNTIME_ANNOTATION, IMAGE_ENV, NVIDIA_RUNTIME, gpus_on


def injected_gpus(pod: dict, node: dict, container: dict | None = None) -> int | None:
    """How many GPUs the NVIDIA runtime put into the container (the pod's first when not
    given); None when it injected nothing at all (no driver, no nvidia-smi)."""
    allocated = int(pod_requests(pod).get(GPU_RESOURCE, 0))
    if allocated and gpus_on(node):
        return allocated
    annotations = node["metadata"].get("annotations") or {}
    handler = pod["spec"].get("runtimeClassName") or annotations.get(DEFAULT_RUNTIME_ANNOTATION)
    env = container_env(pod, container)
    wanted = env.get("NVIDIA_VISIBLE_DEVICES", "")
    capabilities = env.get("NVIDIA_DRIVER_CAPABILITIES") or "utility,compute"
    utility = {"utility", "all"} & set(capabilities.split(","))
    if handler != NVIDIA_RUNTIME or wanted in ("", "void") or not utility:
        return None
    if wanted == "none":
        return 0
    return gpus_on(node) if wanted == "all" else min(len(wanted.split(",")), gpus_on(node))


def container_env(pod: dict, container: dict | None = None) -> dict[str, str]:
    """A container's environment (the pod's first when not given): its image's
    (`IMAGE_ENV`), then the container spec's own, a downward-API `fieldRef` (`spec.nodeName`,
    `metadata.name`) read off the pod as the kubelet fills it in."""
    container = container or (pod["spec"].get("containers") or [{}])[0]
    image = str(container.get("image", ""))
    env = next((dict(e) for prefix, e in IMAGE_ENV.items() if image.startswith(prefix)), {})
    for entry in container.get("env") or []:
        if "name" in entry:
            env[entry["name"]] = _env_value(pod, entry)
    return env


def _env_value(pod: dict, entry: dict) -> str:
    """One env entry's value: its own, or the pod field its `valueFrom.fieldRef` names."""
    path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    if not path:
        return str(entry.get("value", ""))
    found: object = pod
    for part in str(path).split("."):
        found = found.get(part, "") if isinstance(found, dict) else ""
    return str(found)
