"""Debugging steps and traps that several GPU faults share: the node-internals end of the path.

Whatever took the GPUs away, the last question is the same: is the driver alive, or did only
the kubelet advertising stop? The tool runs these steps as a person does (a debug pod on the
node, `kubectl exec` into the dcgm-exporter there) and each finding quotes what they printed.
"""

from __future__ import annotations

from labs.errors import LabError
from labs.kube import gpu, on_node
from labs.run.contract import Context, Finding, Trap

NVML_FAILED = "Failed to initialize NVML"
NVML_TRAP = Trap(
    "NVML error in a debug pod",
    "chroot nvidia-smi tells whether the driver is alive",
    "`Failed to initialize NVML: Unknown Error` on a healthy driver",
    "the debug pod has no /dev/nvidia*: ask a pod with the devices mounted (dcgm-exporter)",
    shown_in=NVML_FAILED,
)
SOCKETS = "/var/lib/kubelet/device-plugins/"
PLUGIN_SOCKET = "nvidia-gpu.sock"


def _printed(run: str) -> str:
    """A command's output on one line ("printed nothing" when empty)."""
    return (
        " / ".join(line.strip() for line in run.splitlines() if line.strip()) or "printed nothing"
    )


def _listed(listing: str) -> list[str]:
    """The names `ls -la` printed (its last column), `.` and `..` left out."""
    names = [line.split()[-1] for line in listing.splitlines()[1:] if line.split()]
    return [name for name in names if name not in (".", "..")]


def node_internals(ctx: Context, node: str | None = None, step: int = 5) -> list[Finding]:
    """The device-plugin socket directory, the NVML trap and the driver asked from a
    device-mounted pod, all on `node` (default: the first GPU node), quoted as they printed."""
    nodes = [gpu.name_of(n) for n in gpu.gpu_nodes(ctx.view)]
    node = node or (nodes[0] if nodes else "<gpu-node>")
    debug = on_node.debug_command(node)
    timeout = ctx.lab.settings.probe_timeout

    def on_host(*command: str) -> str:
        try:
            return on_node.run_on_node(ctx.lab, node, ["chroot", on_node.HOST_ROOT, *command],
                                       timeout)  # fmt: skip
        except (LabError, OSError) as error:
            return f"could not run it: {error}"

    listing = on_host("ls", "-la", SOCKETS)
    names = _listed(listing)
    registered = PLUGIN_SOCKET in names
    smi_in_debug = on_host("nvidia-smi", "-L")
    exporter, from_exporter = _driver_from_exporter(ctx, node)
    return [
        Finding(
            f"{step}. Node: device-plugin socket",
            f"{debug} chroot /host ls -la {SOCKETS}",
            f"on {node}: {', '.join(names)}" if names else f"on {node}: {_printed(listing)}",
            f"{PLUGIN_SOCKET} is there: the plugin registered with kubelet"
            if registered
            else f"no {PLUGIN_SOCKET} means the plugin is not registered with kubelet: "
            "nothing advertises GPUs",
        ),
        Finding(
            f"{step}b. Node: is the driver dead?",
            f"{debug} chroot /host nvidia-smi -L",
            _printed(smi_in_debug),
            "not a dead driver: the debug pod has no /dev/nvidia* devices"
            if NVML_FAILED in smi_in_debug
            else "the debug pod reached the GPU",
            trap=NVML_TRAP.name,
        ),
        Finding(
            f"{step}c. Node: driver from a device-mounted pod",
            f"kubectl exec -n {ctx.lab.operator_namespace} {exporter} -- nvidia-smi -L",
            _printed(from_exporter),
            "driver and toolkit are alive; only the kubelet advertising is gone"
            if "GPU 0:" in from_exporter
            else "no answer from a device-mounted pod on this node: look at its driver "
            "(dmesg, nvidia-smi from the host's own shell)",
        ),
    ]


def _driver_from_exporter(ctx: Context, node: str) -> tuple[str, str]:
    """The dcgm-exporter pod on `node` and what `nvidia-smi -L` prints in it."""
    pod = gpu.daemon_pod_on(ctx.view, gpu.DCGM_EXPORTER_DAEMONSET, node)
    if pod is None or (pod.get("status") or {}).get("phase") != "Running":
        return "<nvidia-dcgm-exporter pod>", f"no running nvidia-dcgm-exporter pod on {node}"
    name = gpu.name_of(pod)
    try:
        printed = on_node.exec_in_pod(ctx.lab, ctx.lab.operator_namespace, name,
                                      "nvidia-dcgm-exporter", ["nvidia-smi", "-L"],
                                      ctx.lab.settings.probe_timeout)  # fmt: skip
    except (LabError, OSError) as error:
        printed = f"could not run it: {error}"
    return name, printed
