"""A pod that wants a GPU but requests none: on a system node it has no GPU at all, on a GPU node
it has the whole GPU without the scheduler knowing.

Without `limits: nvidia.com/gpu` the scheduler counts no GPU for the pod and the device plugin
allocates none. Without the toleration either, the GPU nodes' taint sends it to a system node,
which runs runc: nothing NVIDIA is put into the container, and the CUDA base image has no
nvidia-smi of its own (`sh: 1: nvidia-smi: not found`, exit 127). With the toleration and a
GPU-node selector it lands on a GPU node, where the AL2023 NVIDIA AMI makes `nvidia` the
default containerd runtime; the CUDA image sets `NVIDIA_VISIBLE_DEVICES=all`, and the NVIDIA
container toolkit honours that variable in an unprivileged container by default
(`accept-nvidia-visible-devices-envvar-when-unprivileged = true`), so the pod gets every GPU of
the node while allocatable still offers that GPU to the next pod: two pods share one GPU
without knowing. The fix is the limit; making an unrequested GPU impossible takes that
toolkit option set to false on the GPU nodes.
"""

from __future__ import annotations

from labs.kube import gpu, probes
from labs.kube.view import Objects
from labs.lab import Lab
from labs.run.contract import Cause, Check, Context, Finding, Step, Trap, Verdict
from scenarios import _words, _workload
from scenarios._workload import PROBE

NAME = "missing-gpu-limit"
ON_GPU_NODE = f"{PROBE}-on-gpu-node"
NOT_FOUND = "nvidia-smi: not found"
NOT_FOUND_EXIT = 127
SEES_GPU = f"{ON_GPU_NODE}, with no limit, printed the node's GPU as the baseline did (trap)"
UNCOUNTED = "that GPU node still offers nvidia.com/gpu 1: nothing was allocated (trap)"
traps = [
    Trap("no limit means no GPU", "a pod without nvidia.com/gpu gets no GPU",
         "on a GPU node it gets every GPU: the CUDA image sets NVIDIA_VISIBLE_DEVICES=all and "
         "the nvidia default runtime honours it for unprivileged pods",
         "the limit is the only GPU the scheduler and the device plugin count",
         shown_by=SEES_GPU),
    Trap("a GPU in use is a GPU allocated", "the node offers 0 while the pod has its GPU",
         "allocatable still 1: the next GPU pod is given the same GPU",
         "two pods share one GPU unknowingly (out-of-memory, slow runs); set "
         "accept-nvidia-visible-devices-envvar-when-unprivileged = false on GPU nodes",
         shown_by=UNCOUNTED),
]  # fmt: skip


def inject(lab: Lab) -> None:
    """Replace gpu-probe by scenarios/manifests/missing-gpu-limit.yaml (kubectl apply).

    Its gpu-probe has neither a limit nor a toleration; gpu-probe-on-gpu-node has no limit,
    but the toleration and a nodeSelector nvidia.com/gpu.present=true.
    """
    _workload.submit(lab, NAME)


def revert(lab: Lab) -> None:
    """Delete the scenario's pods and apply the lab's gpu-probe again (safe to repeat).

    The scenario's pods carry the scenario's eks-gpu-lab/scenario label; the lab's probe has
    its limit and its toleration written.
    """
    _workload.undo(lab, NAME)


def wrong(objects: Objects) -> list[str]:
    """Its probes that ask for no GPU: each runs wherever it lands, counted by nobody."""
    return [
        f"{gpu.name_of(pod)}: no limits {gpu.GPU_RESOURCE}"
        for pod in _workload.workload_pods(objects, NAME)
        if gpu.GPU_RESOURCE not in _workload.requested(pod)
    ]


# --- symptoms (T+ from the injection) --------------------------------------------------------


def node_of(objects: Objects, name: str) -> str:
    return str(((gpu.pod(objects, name) or {}).get("spec") or {}).get("nodeName") or "")


def exit_code(objects: Objects, name: str) -> int | None:
    statuses = ((gpu.pod(objects, name) or {}).get("status") or {}).get("containerStatuses")
    terminated = ((statuses or [{}])[0].get("state") or {}).get("terminated") or {}
    return terminated.get("exitCode")


def no_gpu_at_all(ctx: Context) -> Verdict:
    node, phase = node_of(ctx.view, PROBE), gpu.pod_phase(ctx.view, PROBE)
    if phase != "Failed" or node in ctx.baseline["gpu_nodes"]:
        return False, f"{PROBE} {phase} on {node or 'no node'}"
    log = probes.read_probe_log(ctx.lab, PROBE).strip()
    code = exit_code(ctx.view, PROBE)
    held = NOT_FOUND in log and code == NOT_FOUND_EXIT
    return held, f"{PROBE} Failed on system node {node}: {log!r}, exit code {code}"


def sees_gpu(ctx: Context) -> Verdict:
    held, seen = _workload.ran_with_baseline_output(ON_GPU_NODE, NAME)(ctx)
    node = node_of(ctx.view, ON_GPU_NODE)
    return held and node in ctx.baseline["gpu_nodes"], f"on {node or 'no node'}: {seen}"


def uncounted(ctx: Context) -> Verdict:
    node = node_of(ctx.view, ON_GPU_NODE)
    wants = gpu_request(ctx.view, ON_GPU_NODE)
    offered = gpu.allocatable_by_node(ctx.view).get(node)
    held = sees_gpu(ctx)[0] and offered == "1" and wants is None
    return held, f"{node}: allocatable nvidia.com/gpu {offered}; {ON_GPU_NODE} requests {wants}"


def gpu_request(objects: Objects, name: str) -> str | None:
    """What the pod's containers ask of nvidia.com/gpu (None: nothing)."""
    return _workload.requested(gpu.pod(objects, name) or {}).get(gpu.GPU_RESOURCE)


symptoms = [
    Check(f"{PROBE} without a limit ran on a system node: `sh: 1: {NOT_FOUND}`, exit 127",
          no_gpu_at_all, 180),
    Check(SEES_GPU, sees_gpu, 180),
    Check(UNCOUNTED, uncounted, 180),
]  # fmt: skip


# --- diagnosis: where it ran -> what it printed -> what was allocated -> the node's runtime ----


def diagnose(ctx: Context) -> list[Finding]:
    """Where each pod ran -> what it printed -> what its spec requests -> what the GPU node
    still offers -> the node's runtime and the image's environment (real cluster) -> the fix."""
    lab, view = ctx.lab, ctx.view
    pinned_node = node_of(view, ON_GPU_NODE)
    return [
        Finding("1. Pods: where did they run?", "kubectl get pods -o wide",
                "; ".join(f"{n} {gpu.pod_phase(view, n)} on {node_of(view, n) or 'no node'}"
                          for n in (PROBE, ON_GPU_NODE)),
                f"{PROBE} tolerates no taint, so only a system node could take it; "
                f"{ON_GPU_NODE} went to a GPU node"),
        Finding("2. What did they print?", f"kubectl logs {PROBE}; kubectl logs {ON_GPU_NODE}",
                f"{_workload.log_of(lab, view, PROBE).strip()!r}; "
                f"{probes.gpu_summary(_workload.log_of(lab, view, ON_GPU_NODE))!r}",
                "on the system node nothing NVIDIA exists (runc): no nvidia-smi, no GPU. On the "
                "GPU node the whole A10G", trap="no limit means no GPU"),
        Finding("3. What do they request?", f"kubectl get pod {ON_GPU_NODE} -o jsonpath="
                "'{.spec.containers[*].resources}'",
                f"nvidia.com/gpu: {gpu_request(view, ON_GPU_NODE) or 'none'}",
                "no limit: the scheduler counted no GPU, the device plugin allocated none"),
        Finding("4. What does the GPU node still offer?",
                f"kubectl describe node {pinned_node or 'NODE'} | grep -A8 'Allocated resources'",
                f"allocatable nvidia.com/gpu {gpu.allocatable_by_node(view).get(pinned_node)}",
                "the GPU the pod used is still free to the scheduler: the next GPU pod shares it",
                trap="a GPU in use is a GPU allocated"),
        Finding("5. Who gave it the GPU?", "on the GPU node: grep accept-nvidia "
                "/etc/nvidia-container-runtime/config.toml; the image: crane config "
                "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04 | jq .config.Env",
                "#accept-nvidia-visible-devices-envvar-when-unprivileged = true (commented out: "
                "the toolkit's default); NVIDIA_VISIBLE_DEVICES=all, "
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                "nodeadm makes nvidia the default runtime, which reads the image's variable",
                real_cluster_only=True),
        Finding("6. The fix", f"kubectl get pod {ON_GPU_NODE} -o jsonpath='{{.spec.containers[*]"
                ".resources}'", _workload.resources_of(view, ON_GPU_NODE),
                "set limits nvidia.com/gpu: 1 (the toleration comes with it on EKS). To make an "
                "unrequested GPU impossible, set that toolkit option to false on the GPU nodes: "
                "the operator's device plugin passes allocated GPUs as CDI devices, not through "
                "the variable"),
    ]  # fmt: skip


def _node_of(pod: str) -> str:
    return f"\"$(kubectl get pod {pod} -o jsonpath='{{.spec.nodeName}}')\""


look = [
    Step(f"kubectl logs {PROBE}", NOT_FOUND, "no GPU at all: nothing NVIDIA in the container"),
    Step(f"kubectl get pod {PROBE} -o jsonpath="
         "'{.status.containerStatuses[0].state.terminated.exitCode}{\"\\n\"}'",
         str(NOT_FOUND_EXIT), "the shell found no nvidia-smi"),
    Step(f"kubectl get node {_node_of(PROBE)} "
         "-o jsonpath='{.metadata.labels.eks\\.amazonaws\\.com/nodegroup}{\"\\n\"}'",
         "-ng-1", "it ran on a system node: no toleration, no limit"),
    Step(f"kubectl logs {ON_GPU_NODE}", "NVIDIA A10G", "no limit, yet the node's whole GPU"),
    Step(f"kubectl get node {_node_of(ON_GPU_NODE)} "
         "-o jsonpath='{.status.allocatable.nvidia\\.com/gpu}{\"\\n\"}'", "1",
         "the scheduler still offers that GPU to the next GPU pod"),
]  # fmt: skip


SCENARIO = _workload.scenario(
    doctor_finding="pod-without-gpu-limit",
    cause=Cause(
        plain="The GPU pods set no nvidia.com/gpu limit, so neither the scheduler nor the device "
        "plugin counts a GPU for them.",
        names=(
            (
                *_words.absent(
                    "gpu limit",
                    "limit",
                    "resources.limits",
                    "gpu request",
                    "request",
                    "nvidia.com/gpu limit",
                ),
                "request no gpu",
                "request no nvidia.com/gpu",
                "asks for no gpu",
                "not request gpu",
                "not ask gpu",
                "not ask for gpu",
            ),
        ),
        clues=(
            ("limit", "resources.limits"),
            ("unallocated", "not allocated", "never allocated", "allocatable"),
            ("share",),
            ("system node",),
            ("nvidia-smi",),
            ("NVIDIA_VISIBLE_DEVICES",),
        ),
    ),
    # No alert: the pods ask for no GPU, so no metric ties them to one (the doctor reads the spec).
    alerts=(),
    name=NAME,
    summary="GPU pods without a nvidia.com/gpu limit: on a system node no GPU at all, on a GPU "
    "node the whole GPU, unallocated",
    about=__doc__ or "",
    risk="low: two pods of the lab's own; one uses a GPU node's GPU for a second, unallocated",
    inject=inject,
    revert=revert,
    symptoms=symptoms,
    diagnose=diagnose,
    traps=traps,
    look=look,
    wrong=wrong,
)
