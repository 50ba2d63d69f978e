"""The GPU Operator's `nvidia-validator` as the validator DaemonSet's init containers run it.

NVIDIA/gpu-operator v25.3.4 validator/main.go (the operator the chart runs). It runs for a while
(retries every 5 s), so it is a generator: it yields the real-world seconds it sleeps and
returns its exit code; the world's kubelet steps it without blocking (`programs.start_init`).
COMPONENT picks what it validates (`COMPONENTS`); a component the world does not model
succeeds at once, as the validator does on a healthy node. COMPONENT=plugin: the node's
capacity must show a GPU (`validateGPUResource`, :1247-1266); with WITH_WORKLOAD (default
true, :260-266) it then creates the pinned workload pod of plugin-workload-validation.yaml
and waits for it to succeed (`runWorkload`, :1100-1184; `waitForPod`, :1187-1204).
Lines are logrus's text format (no formatter set: main.go:222-366), on stderr.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

from kubernetes.utils import parse_quantity as quantity

# the validator's genericGPUResourceType (main.go:182) and its DaemonSet's name (main.go:1129)
from labs.kube.gpu import GPU_RESOURCE, VALIDATOR_DAEMONSET
from labs.kube.resources import DAEMON_SETS, NODES, PODS, KubeApiError, NotFound
from labs.sim.node import node_os

if TYPE_CHECKING:
    from labs.sim.node.programs import Process, Terminal

# A program that runs for a while: yields the real seconds it sleeps, returns its exit code.
Run = Generator[float, None, int]
# A component's validation: yields its sleeps, returns the error it fails with ("" for none).
Validation = Generator[float, None, str]
# internal/info/version.go GetVersionString: validator/Makefile:64 sets version=$(VERSION)
# (versions.mk:20, v25.3.4) and gitCommit=$(GIT_COMMIT) (versions.mk:26, `git describe --long
# --always` of the tag: d73a008).
VERSION = "v25.3.4, commit: d73a008"
WORKLOAD_LABEL = "nvidia-device-plugin-validator"  # main.go:202 pluginValidatorLabelValue
POD_WAIT_RETRIES, POD_WAIT_SECONDS = 60, 5.0  # main.go:174, :176
RESOURCE_RETRIES, RESOURCE_SECONDS = 30, 5.0  # main.go:178, :180
TRUE = ("1", "t", "T", "TRUE", "true", "True")  # Go's strconv.ParseBool, as urfave/cli reads it
# Where the status files go (the --output-dir flag's default), and what they hold: the driver's
# says where the driver is (Driver.createStatusFile; the AMI's own driver, at the host's root,
# mounted at /host), the others are empty (createStatusFile).
OUTPUT_DIR = "/run/nvidia/validations"
STATUS_FILES = {
    "driver": "IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH=/host\n"
    "NVIDIA_DEV_ROOT=/\nDEV_ROOT_CTR_PATH=/host\n",
}


def logrus(term: Terminal, level: str, message: str) -> None:
    """One logrus TextFormatter line without a TTY: `time="..." level=info msg="..."`."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    term.err(f'time="{stamp}" level={level} msg={json.dumps(message)}\n')


def nvidia_validator(process: Process, term: Terminal) -> Run:
    """main(): the version line (:355), then the component; an error is logged as
    `Error: <error>` (:361-365) and the exit code is 1. A component that passes leaves its
    status file, which the operands' init containers wait for."""
    env = process.container_env()
    logrus(term, "info", f"version: {VERSION}")
    component = env.get("COMPONENT", "")
    validation = COMPONENTS.get(component)
    error = ""
    if validation is not None:
        wrap, steps = validation
        try:
            error = yield from steps(process, term, env)
        except KubeApiError as failed:  # an API call the validator makes failed: it returns it
            error = str(failed)
    if error:
        logrus(term, "info", f"Error: {wrap}: {error}")
        return 1
    if component:
        status = STATUS_FILES.get(component, "")
        process.write_mounted(f"{OUTPUT_DIR}/{component}-ready", status)
    return 0


def driver(process: Process, term: Terminal, env: dict[str, str]) -> Validation:
    """Driver.validate (:780-811) on the AMI's host driver, as far as the world plays it: the
    /dev/char symlinks (createDevCharSymlinks, :829-870), whose links the AL2 AMI already has
    (`labs.sim.node.node_os`): the device library logs each and goes on, so it passes."""
    if env.get("DISABLE_DEV_CHAR_SYMLINK_CREATION", "") in TRUE:  # the flag, main.go:329
        # :832-833
        skipping = "skipping the creation of symlinks under /dev/char that correspond to NVIDIA"
        logrus(term, "info", f"{skipping} character devices")
        return ""
    creating = "creating symlinks under /dev/char that correspond to NVIDIA character devices"
    logrus(term, "info", creating)  # :836
    for link, target in node_os.existing_cap_links(process.node):
        logrus(term, "info", f"Creating link {link} => {target}")
        logrus(term, "warning", f"Could not create symlink: symlink {target} {link}: file exists")
    return ""
    yield  # a generator like the other validations; this one never sleeps


def plugin(process: Process, term: Terminal, env: dict[str, str]) -> Validation:
    """Plugin.validate (:972-1012): GPU capacity on the node, then the workload pod."""
    node_name = env.get("NODE_NAME", "")
    for retry in range(1, RESOURCE_RETRIES + 1):
        node = process.store.get(NODES, node_name)
        if _gpus(node, "capacity") >= 1:
            break
        waiting = f"GPU resources are not yet discovered by the node, retry: {retry}"  # :1263
        logrus(term, "info", waiting)
        yield RESOURCE_SECONDS
    else:
        return "GPU resources are not discovered by the node"  # :1266
    if env.get("WITH_WORKLOAD", "true") not in TRUE:
        return ""
    if _gpus(process.store.get(NODES, node_name), "allocatable") < 1:
        return "unable to find any allocatable GPU resource"  # :1305
    namespace = env.get("OPERATOR_NAMESPACE", "")
    try:
        owner = process.store.get(DAEMON_SETS, VALIDATOR_DAEMONSET, namespace)
    except NotFound:
        return f'unable to retrieve the operator validator daemonset: daemonsets.apps "{VALIDATOR_DAEMONSET}" not found'  # noqa: E501 - :1132
    for old in process.store.list(PODS, namespace)[0]:
        labels = old["metadata"].get("labels") or {}
        if labels.get("app") == WORKLOAD_LABEL and old["spec"].get("nodeName") == node_name:
            process.store.delete(PODS, old["metadata"]["name"], namespace, grace_seconds=0)
            break  # :1161-1169 deletes the first one listed
    created = process.store.create(PODS, workload_pod(env, owner, node_name), namespace)
    name = created["metadata"]["name"]
    for _ in range(POD_WAIT_RETRIES):  # waitForPod
        try:
            phase = process.store.get(PODS, name, namespace).get("status", {}).get("phase", "")
        except NotFound:
            return f'failed to get pod {name}, err pods "{name}" not found'  # :1192
        if phase == "Succeeded":
            logrus(term, "info", f"pod {name} have run successfully")  # :1199
            return ""
        logrus(term, "info", f"pod {name} is curently in {phase} phase")  # :1195 (sic)
        yield POD_WAIT_SECONDS
    return f"gave up waiting for pod {name} to be available"  # :1203


def workload_pod(env: dict[str, str], owner: dict, node_name: str) -> dict:
    """validator/plugin-workload-validation.yaml as runWorkload fills it in (:1100-1154): the
    validator's image, the DaemonSet's owners and tolerations, pinned to this node, one GPU on
    its init container (limits and requests)."""
    image = env.get("VALIDATOR_IMAGE", "")
    gpu = {GPU_RESOURCE: "1"}
    template = (owner.get("spec") or {}).get("template") or {}
    return {
        "metadata": {
            "labels": {"app": WORKLOAD_LABEL},
            "generateName": f"{WORKLOAD_LABEL}-",
            "ownerReferences": owner["metadata"].get("ownerReferences") or [],
        },
        "spec": {
            "tolerations": (template.get("spec") or {}).get("tolerations") or [],
            "restartPolicy": "OnFailure",
            "serviceAccountName": "nvidia-operator-validator",
            "nodeName": node_name,
            "initContainers": [
                {
                    "name": "plugin-validation",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c"],
                    "args": ["vectorAdd"],
                    "securityContext": {"allowPrivilegeEscalation": False},
                    "resources": {"limits": gpu, "requests": gpu},
                }
            ],
            "containers": [
                {
                    "name": WORKLOAD_LABEL,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c"],
                    "args": ["echo device-plugin workload validation is successful"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                    },
                }
            ],
        },
    }


def _gpus(node: dict, field: str) -> int:
    value = ((node.get("status") or {}).get(field) or {}).get(GPU_RESOURCE, "0")
    return int(quantity(value))


# COMPONENT -> (how start() wraps its error, main.go:481-600; the validation).
COMPONENTS: dict[str, tuple[str, Callable[[Process, Terminal, dict[str, str]], Validation]]] = {
    "driver": ("error validating driver installation", driver),  # :506
    "plugin": ("error validating plugin installation", plugin),
}
