"""Every GPU is held by a running pod while the validator wants one: ClusterPolicy notReady.

The lab runs the GPU Operator's validator with `validator.plugin.env` WITH_WORKLOAD=true (the
lab's values, as many clusters copy them): after checking the node's capacity, its
`plugin-validation` init container creates a pod pinned to its node that asks for one GPU
(`nvidia-device-plugin-validator-xxxxx`, validator/main.go runWorkload, v25.3.4) and waits for
it to succeed. Here a long-running pod (`gpu-holder`, `sleep infinity`) holds the one GPU of
every GPU node, and the validator pods start again (deleted, as a node reboot, an operator
upgrade or a `kubectl rollout restart` does). The workload pod skips the scheduler (nodeName),
so the kubelet rejects it at admission: Failed, `UnexpectedAdmissionError`, `Allocate failed
due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available:
0, which is unexpected`. The validator keeps printing `pod ... is curently in Failed phase`
(sic) every 5 s, gives up after 60 tries (5 minutes), exits 1: the validator pod sits in
`Init:CrashLoopBackOff` and, unlike device-plugin-off (a component switched off: the
ClusterPolicy stays `ready`), the operator now reports `notReady` with
`[state-operator-validation]`. Everything a person checks first looks fine: the device plugin
is ready, allocatable says 1, the GPU works. `kubectl describe node` tells it: nvidia.com/gpu
1/1 allocated. The fix is to let the GPU go (delete the pods holding it); the validator's next
try then passes. Restarting the validator or the device plugin changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from labs.kube import gpu, probes, rest
from labs.kube.changes import patch_cluster_policy
from labs.kube.logs import READ_TIMEOUT
from labs.kube.resources import CLUSTER_POLICIES, PODS
from labs.kube.view import WORKLOAD_NAMESPACE, ClusterView, Objects
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
from scenarios import _checks, _words

PROBE = probes.probe_name()
HOLDER = "gpu-holder"
INIT = "plugin-validation"
# the validator's workload pods (gpu-operator v25.3.4 validator/main.go:202)
WORKLOAD_LABEL = "nvidia-device-plugin-validator"
WITH_WORKLOAD = "WITH_WORKLOAD"
BEFORE = "validator_plugin_env_before"  # the lab record's note of the env the fault replaced
CRASH_LOOP = "Init:CrashLoopBackOff"
UNAVAILABLE = "Available: 0, which is unexpected"
# validator/main.go v25.3.4 :1195 (the typo is the validator's) and :1203
WAITING, GAVE_UP = "is curently in Failed phase", "gave up waiting for pod"
ALL_FINE = "the device plugin ready on every node and allocatable nvidia.com/gpu 1 (trap)"
NOT_READY = "ClusterPolicy status.state notReady: [state-operator-validation] (no trap this time)"
RESTART_NO_HELP = "the validator pod, deleted, comes back and loops the same way (trap)"
traps = [
    Trap("the device plugin and allocatable look fine", "a notReady ClusterPolicy means a "
         "broken device plugin or a GPU gone", "the plugin ready, allocatable 1 on every node: "
         "the GPU is simply taken (`kubectl describe node`: nvidia.com/gpu 1/1 allocated)",
         "allocatable counts GPUs, not free GPUs: ask who holds them", shown_by=ALL_FINE),
    Trap("status.state stays ready, as when the device plugin is off", "the ClusterPolicy "
         "says `ready` whatever the GPUs do (device-plugin-off)", "`notReady`, "
         "`[state-operator-validation]`", "a component switched off is not `notReady`; an "
         "operand pod that never gets Ready is: here the validator", shown_by=NOT_READY),
    Trap("restart the validator", "a fresh validator pod passes", "the new pod's workload is "
         "rejected the same way and it loops again", "the validator is right: its workload "
         "cannot get a GPU while another pod holds it", shown_by=RESTART_NO_HELP),
]  # fmt: skip


# --- the cluster's side -----------------------------------------------------------------------


def plugin_env(policy: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ClusterPolicy's spec.validator.plugin.env (empty when unset)."""
    validator = ((policy or {}).get("spec") or {}).get("validator") or {}
    return list((validator.get("plugin") or {}).get("env") or [])


def with_workload(env: list[dict[str, Any]], value: str) -> list[dict[str, Any]]:
    """`env` with WITH_WORKLOAD set to `value`, in its place (appended when absent)."""
    wanted = [dict(e) for e in env]
    found = next((e for e in wanted if e.get("name") == WITH_WORKLOAD), None)
    if found is None:
        return [*wanted, {"name": WITH_WORKLOAD, "value": value}]
    found.update(value=value)
    found.pop("valueFrom", None)
    return wanted


def holder_pod(node: str) -> dict[str, Any]:
    """A long-running pod holding the one GPU of `node` (as a training job or notebook does)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"{HOLDER}-", "labels": {"app": HOLDER}},
        "spec": {
            "nodeSelector": {probes.HOSTNAME_LABEL: node},
            "tolerations": [{"key": gpu.GPU_RESOURCE, "operator": "Exists",
                             "effect": "NoSchedule"}],
            "containers": [{
                "name": "cuda",
                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                "command": ["sleep", "infinity"],
                "resources": {"limits": {gpu.GPU_RESOURCE: "1"}},
            }],
        },
    }  # fmt: skip


def holders(objects: Objects) -> list[dict[str, Any]]:
    """The scenario's gpu-holder pods in the workload namespace."""
    return [
        p
        for p in objects.objects("pods")
        if (p["metadata"].get("labels") or {}).get("app") == HOLDER
        and not p["metadata"].get("deletionTimestamp")
    ]


def gpu_pods_on(objects: Objects, node: str) -> list[dict[str, Any]]:
    """Running pods of the workload namespace on `node` that hold a GPU."""
    return [
        p
        for p in objects.objects("pods")
        if (p.get("spec") or {}).get("nodeName") == node
        and (p.get("status") or {}).get("phase") == "Running"
        and any(
            ((c.get("resources") or {}).get("limits") or {}).get(gpu.GPU_RESOURCE)
            for c in p["spec"].get("containers") or []
        )
    ]


def workload_pods(objects: Objects) -> list[dict[str, Any]]:
    """The validator's workload pods (app=nvidia-device-plugin-validator), newest last."""
    pods = [
        p
        for p in objects.objects("operator_pods")
        if (p["metadata"].get("labels") or {}).get("app") == WORKLOAD_LABEL
    ]
    return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))


def validator_pods(objects: Objects) -> list[dict[str, Any]]:
    return [
        p
        for p in objects.objects("operator_pods")
        if (p["metadata"].get("labels") or {}).get("app") == gpu.VALIDATOR_DAEMONSET
        and not p["metadata"].get("deletionTimestamp")
    ]


def rendered_with_workload(objects: Objects) -> str | None:
    """WITH_WORKLOAD as the validator DaemonSet's plugin-validation renders it (None: unset)."""
    spec = gpu.pod_template_spec(gpu.daemonset(objects, gpu.VALIDATOR_DAEMONSET))
    inits: list[dict[str, Any]] = spec.get("initContainers") or []
    init = next((c for c in inits if c.get("name") == INIT), {})
    return next((str(e.get("value")) for e in init.get("env") or []
                 if e.get("name") == WITH_WORKLOAD), None)  # fmt: skip


def _wait(lab: Lab, done: Any, what: str) -> None:
    with lab.view() as view:
        view.wait_for(done, lab.settings.probe_timeout, what=what)


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the GPU nodes, the validator env and
    the operand DaemonSets' counts."""
    run = probes.run_probe(lab, view, lab.settings.probe_timeout)
    return {
        "probe_output": run.gpu_line,
        "gpu_nodes": [gpu.name_of(n) for n in gpu.gpu_nodes(view)],
        "plugin_env": plugin_env(gpu.cluster_policy(view)),
        "operands": {n: c[0] for n, c in gpu.operand_counts(view).items()},
    }


def inject(lab: Lab) -> None:
    """Delete the baseline probe; run one gpu-holder pod (nvidia.com/gpu: 1, sleep infinity) on
    every GPU node and wait until they run; note ClusterPolicy validator.plugin.env in the lab's
    record and set WITH_WORKLOAD=true there; once the validator DaemonSet renders it, delete
    the validator pods so that each node's validator starts again."""
    probes.delete_probe(lab, lab.settings.probe_timeout)
    nodes = [gpu.name_of(n) for n in gpu.gpu_nodes(lab.snapshot("nodes"))]
    held = {p["spec"].get("nodeSelector", {}).get(probes.HOSTNAME_LABEL)
            for p in holders(lab.snapshot("pods"))}  # fmt: skip
    for node in nodes:
        if node not in held:
            rest.create(lab.kube, PODS.path(WORKLOAD_NAMESPACE), holder_pod(node))
    _wait(lab, lambda v: all(gpu_pods_on(v, n) for n in nodes), "a gpu-holder on every GPU node")
    policy = rest.read(lab.kube, CLUSTER_POLICIES.path(name=gpu.CLUSTER_POLICY_NAME))
    env = plugin_env(policy)
    if BEFORE not in lab.record:  # a second injection keeps the first one's note
        lab.update(**{BEFORE: env})
    if with_workload(env, "true") != env:
        patch_cluster_policy(lab, {"spec": {"validator": {"plugin": {
            "env": with_workload(env, "true")}}}})  # fmt: skip
    _wait(lab, lambda v: rendered_with_workload(v) == "true", "the validator to render "
          f"{WITH_WORKLOAD}=true")  # fmt: skip
    for pod in validator_pods(lab.snapshot("operator_pods")):
        rest.delete(lab.kube, PODS.path(lab.operator_namespace, gpu.name_of(pod)))


def reset(lab: Lab) -> None:
    """The tool's part after the GPUs were freed: validator.plugin.env back as noted, the
    validator's leftover workload pods deleted, and the validator pods still not ready
    restarted, so they validate now instead of after their back-off (safe to repeat)."""
    noted = lab.record.get(BEFORE)
    if noted is not None:
        policy = rest.read(lab.kube, CLUSTER_POLICIES.path(name=gpu.CLUSTER_POLICY_NAME))
        if plugin_env(policy) != noted:
            patch_cluster_policy(lab, {"spec": {"validator": {"plugin": {"env": noted or None}}}})
        lab.record.pop(BEFORE, None)
        lab.save()
    pods = lab.snapshot("operator_pods")
    for pod in workload_pods(pods):
        if (pod.get("status") or {}).get("phase") == "Failed":
            rest.delete(lab.kube, PODS.path(lab.operator_namespace, gpu.name_of(pod)))
    for pod in validator_pods(pods):
        if not gpu.is_ready(pod):
            rest.delete(lab.kube, PODS.path(lab.operator_namespace, gpu.name_of(pod)))


def revert(lab: Lab) -> None:
    """Delete the gpu-holder pods and wait until they are gone; set validator.plugin.env back as
    noted, delete the validator's Failed workload pods and the validator pods not ready (safe
    to repeat)."""
    for pod in holders(lab.snapshot("pods")):
        probes.delete_probe(lab, lab.settings.probe_timeout, name=gpu.name_of(pod))
    reset(lab)


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while a gpu-holder pod is in the workload namespace."""
    return bool(holders(view))


def state(ctx: Context) -> dict[str, str]:
    """The summary rows, compared between baseline, fault and recovery."""
    policy = gpu.cluster_policy(ctx.view)
    return {
        "ClusterPolicy validator.plugin.env": json.dumps(plugin_env(policy)),
        "ClusterPolicy status.state": gpu.policy_state(policy),
        "operand DaemonSets (ready/desired)": gpu.describe_operands(ctx.view),
        "allocatable nvidia.com/gpu": gpu.describe_allocatable(ctx.view),
        "pods holding a GPU": describe_holders(ctx.view),
    }


def describe_holders(objects: Objects) -> str:
    """`node: pod, ...` for every GPU node (none: `-`)."""
    return "; ".join(
        f"{gpu.name_of(n)}: "
        + (", ".join(gpu.name_of(p) for p in gpu_pods_on(objects, gpu.name_of(n))) or "-")
        for n in gpu.gpu_nodes(objects)
    )


# --- symptoms (T+ from the injection) --------------------------------------------------------


def every_gpu_held(ctx: Context) -> Verdict:
    nodes = ctx.baseline["gpu_nodes"]
    return all(gpu_pods_on(ctx.view, n) for n in nodes), describe_holders(ctx.view)


def rejected(objects: Objects) -> list[dict[str, Any]]:
    """The validator's workload pods the kubelet rejected for want of a free GPU."""
    return [
        p
        for p in workload_pods(objects)
        if (p.get("status") or {}).get("reason") == gpu.ADMISSION_REJECTED
        and UNAVAILABLE in str((p.get("status") or {}).get("message"))
    ]


def workload_rejected(ctx: Context) -> Verdict:
    found = rejected(ctx.view)
    if not found:
        pods = [f"{gpu.name_of(p)} {p.get('status', {}).get('phase')}"
                for p in workload_pods(ctx.view)]  # fmt: skip
        return False, f"validator workload pods: {', '.join(pods) or 'none'}"
    pod = found[-1]
    status = pod["status"]
    seen = f"{gpu.name_of(pod)} on {pod['spec'].get('nodeName')} {status.get('phase')}, " \
        f"{status.get('reason')}: {status.get('message')}"  # fmt: skip
    ctx.notes["rejected"] = seen
    return True, seen


def init_status(pod: dict[str, Any] | None) -> dict[str, Any]:
    return _checks.init_status(pod, INIT)


def describe_init(pod: dict[str, Any] | None) -> str:
    """`<pod> plugin-validation: waiting CrashLoopBackOff, restarts N, last exit 1`."""
    return _checks.describe_init(pod, INIT, "no validator pod")


def init_log(lab: Lab, pod: dict[str, Any], previous: bool = False) -> str:
    """`kubectl logs POD -c plugin-validation [--previous]`."""
    path = PODS.path(lab.operator_namespace, gpu.name_of(pod), "log")
    query = {"container": INIT} | ({"previous": "true"} if previous else {})
    return rest.get(lab.kube, path, query, READ_TIMEOUT).decode(errors="replace")


def _line(text: str, marker: str) -> str | None:
    return next((line for line in reversed(text.splitlines()) if marker in line), None)


def validator_waits(ctx: Context) -> Verdict:
    for pod in validator_pods(ctx.view):
        if "running" in (init_status(pod).get("state") or {}):
            line = _line(init_log(ctx.lab, pod), WAITING)
            if line:
                ctx.notes["waiting"] = line
                return True, f"{gpu.name_of(pod)} {INIT}: {line}"
    return False, "; ".join(describe_init(p) for p in validator_pods(ctx.view)) or "no validator"


def looping(pod: dict[str, Any]) -> bool:
    """plugin-validation failed and the kubelet runs it again in a loop: it exited non-zero
    (Init:Error), waits out its back-off (Init:CrashLoopBackOff), or runs again after such an
    exit (the kubelet restarts a first failure at once)."""
    status = init_status(pod)
    state, last = status.get("state") or {}, status.get("lastState") or {}
    ended = state.get("terminated") or last.get("terminated") or {}
    return ended.get("exitCode") not in (None, 0)


def gave_up_line(lab: Lab, pod: dict[str, Any]) -> str | None:
    """The `gave up waiting` line of plugin-validation's latest failed run (`--previous` once
    it runs again)."""
    running = "running" in (init_status(pod).get("state") or {})
    return _line(init_log(lab, pod, previous=running), GAVE_UP)


def validator_gave_up(ctx: Context) -> Verdict:
    """The validator pod of every GPU node has been seen crash-looping in plugin-validation
    (each gives up 5 minutes into its run, then backs off), its log ending with `gave up
    waiting for pod ...`."""
    pods = validator_pods(ctx.view)
    seen: dict[str, str] = ctx.notes.setdefault("looped", {})
    for pod in pods:
        node = str(pod["spec"].get("nodeName"))
        if looping(pod) and node not in seen:
            line = gave_up_line(ctx.lab, pod)
            if line:
                seen[node] = f"{describe_init(pod)}: {line}"
                ctx.notes["gave_up"] = line
    left = [n for n in ctx.baseline["gpu_nodes"] if n not in seen]
    if left:
        shown = "; ".join(describe_init(p) for p in pods) or "no validator pod"
        return False, f"not yet seen giving up on {', '.join(left)}: {shown}"
    return True, next(iter(seen.values()))


def plugin_and_allocatable_fine(ctx: Context) -> Verdict:
    plugin_ok = _checks.plugins_ready(None)(ctx)[0]
    every = _checks.allocatable_everywhere("1")(ctx)[0]
    held = plugin_ok and every and bool(rejected(ctx.view))
    return held, f"{gpu.describe_daemonset(ctx.view)}; {gpu.describe_allocatable(ctx.view)}"


def policy_not_ready(ctx: Context) -> Verdict:
    held, seen = _checks.policy_not_ready_naming("state-operator-validation")(ctx)
    ctx.notes["policy"] = seen
    return held, seen


def restart_validator(ctx: Context) -> None:
    """Do what a person tries: delete a looping validator pod (its DaemonSet makes a new one)."""
    pod = next((p for p in validator_pods(ctx.view) if looping(p)), None)
    if pod is None:
        return
    ctx.notes["deleted"] = {"name": gpu.name_of(pod), "node": pod["spec"].get("nodeName")}
    rest.delete(ctx.lab.kube, PODS.path(ctx.lab.operator_namespace, gpu.name_of(pod)))


def restart_no_help(ctx: Context) -> Verdict:
    deleted = ctx.notes.get("deleted")
    if not deleted:
        return False, "no validator pod deleted yet"
    again = [p for p in validator_pods(ctx.view)
             if gpu.name_of(p) != deleted["name"] and p["spec"].get("nodeName") == deleted["node"]
             and looping(p)]  # fmt: skip
    if not again:
        return False, f"deleted {deleted['name']}; its successor does not loop yet"
    return True, f"deleted {deleted['name']}; its successor {describe_init(again[0])}"


symptoms = [
    Check("a gpu-holder pod Running on every GPU node, holding its nvidia.com/gpu",
          every_gpu_held, 60),
    Check(f"a validator workload pod {WORKLOAD_LABEL}-xxxxx Failed: {gpu.ADMISSION_REJECTED} "
          f"`... Requested: 1, {UNAVAILABLE}`", workload_rejected, 120, names_cause=True),
    Check(f"{INIT} keeps logging `pod ... {WAITING}`", validator_waits, 120),
    Check(ALL_FINE, plugin_and_allocatable_fine, 120),
    Check(f"every validator pod {CRASH_LOOP}: {INIT} `{GAVE_UP} ... to be available`, exit 1",
          validator_gave_up, 480, then=restart_validator),
    Check(NOT_READY, policy_not_ready, 600),
    Check(RESTART_NO_HELP, restart_no_help, 900),
]  # fmt: skip


# --- diagnosis: ClusterPolicy -> validator pod -> its log -> the workload pod -> the node ----


def diagnose(ctx: Context) -> list[Finding]:
    """ClusterPolicy state -> the validator pods -> plugin-validation's log -> the rejected
    workload pod -> what the node has allocated and who holds it -> the validator's env."""
    view, ns = ctx.view, ctx.lab.operator_namespace
    pods = validator_pods(view)
    looping_pod = next((p for p in pods if looping(p)), pods[0] if pods else None)
    name = gpu.name_of(looping_pod) if looping_pod else "nvidia-operator-validator-..."
    node = (looping_pod or {}).get("spec", {}).get("nodeName") or "<node>"
    policy = gpu.cluster_policy(view)
    return [
        Finding("1. ClusterPolicy", "kubectl get clusterpolicy cluster-policy -o jsonpath="
                "'{.status.state} {.status.conditions[?(@.type==\"Error\")].message}'",
                ctx.notes.get("policy") or policy_not_ready(ctx)[1],
                "an operand is not ready: the operator names the validation state",
                trap="status.state stays ready, as when the device plugin is off"),
        Finding("2. Operand pods", f"kubectl -n {ns} get pods -o wide",
                f"{gpu.describe_operands(view)}; {describe_init(looping_pod)}",
                f"the validator is stuck in {CRASH_LOOP} in {INIT} while the device plugin is "
                "ready", trap="the device plugin and allocatable look fine"),
        Finding("3. The failing init container's log", f"kubectl -n {ns} logs {name} -c {INIT}",
                "; ".join(x for x in (ctx.notes.get("waiting"), ctx.notes.get("gave_up")) if x)
                or "no plugin-validation lines read",
                "the validator's workload pod never succeeded: it waited 60 x 5 s and exited 1"),
        Finding("4. The validator's workload pod", f"kubectl -n {ns} get pods -l app="
                f"{WORKLOAD_LABEL} -o wide; kubectl -n {ns} describe pod -l app={WORKLOAD_LABEL}",
                ctx.notes.get("rejected") or workload_rejected(ctx)[1],
                "pinned to the node (nodeName), it skipped the scheduler; the kubelet found no "
                "free GPU at admission and failed it"),
        Finding("5. Who holds the GPU", f"kubectl describe node {node} | grep -A8 'Allocated "
                "resources'; kubectl get pods -A -o wide --field-selector "
                f"spec.nodeName={node}", describe_holders(view),
                "nvidia.com/gpu 1/1 allocated: a running pod holds the node's only GPU. Free "
                f"it (kubectl delete pod -l app={HOLDER}); the validator's next try passes"),
        Finding("6. The validator's settings", "kubectl get clusterpolicy cluster-policy -o "
                "jsonpath='{.spec.validator.plugin.env}'", json.dumps(plugin_env(policy)),
                f"{WITH_WORKLOAD}=true makes the validator need a free GPU each time it starts; "
                "false only checks that the node advertises one"),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------


def gpus_free(ctx: Context) -> Verdict:
    """No GPU node's GPU is held by a running workload pod (the learner's part)."""
    busy = [n for n in ctx.baseline["gpu_nodes"] if gpu_pods_on(ctx.view, n)]
    return not busy, describe_holders(ctx.view)


def validators_ready(ctx: Context) -> Verdict:
    ds = gpu.daemonset(ctx.view, gpu.VALIDATOR_DAEMONSET)
    counts = gpu.daemonset_counts(ds) if ds else (0, 0, 0)
    every = (len(ctx.baseline["gpu_nodes"]),) * 3
    return counts == every, gpu.describe_daemonset(ctx.view, gpu.VALIDATOR_DAEMONSET)


def policy_ready(ctx: Context) -> Verdict:
    state = gpu.policy_state(gpu.cluster_policy(ctx.view))
    return validators_ready(ctx)[0] and state == "ready", f"status.state {state!r}"


def env_as_before(ctx: Context) -> Verdict:
    env = plugin_env(gpu.cluster_policy(ctx.view))
    return env == ctx.baseline["plugin_env"], json.dumps(env)


def probe_again(ctx: Context) -> None:
    probes.recreate_probe(ctx.lab, ctx.lab.settings.probe_timeout)


# The validator's run that was waiting goes on to its 60th try, then its back-off (up to 5
# minutes) before a new workload pod: up to 10 minutes after the GPUs are free.
recovery = [
    Check("no GPU node's GPU is held by a running workload pod", gpus_free, 60, names_cause=True),
    Check("nvidia-operator-validator N/N/N ready: plugin-validation's workload pod succeeded",
          validators_ready, 720),
    Check("ClusterPolicy status.state ready", policy_ready, 720, then=probe_again),
    Check("ClusterPolicy validator.plugin.env as in the baseline", env_as_before, 120,
          tool=True),
    Check("gpu-probe runs again with the baseline output", _checks.probe_output_as_baseline(PROBE),
          420, tool=True),
]  # fmt: skip


VALIDATOR_PODS = "kubectl -n $GPU_OPERATOR_NS get pods -l app=nvidia-operator-validator"
by_hand = ByHand(
    inject=[
        f"kubectl delete pod {PROBE} --ignore-not-found",
        "for NODE in $(kubectl get nodes -l nvidia.com/gpu.present=true -o name | cut -d/ -f2); "
        "do kubectl run gpu-holder-$RANDOM --image=nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04 "
        "--labels=app=gpu-holder --restart=Always --overrides='{\"spec\":{\"nodeSelector\":"
        "{\"kubernetes.io/hostname\":\"'$NODE'\"},\"tolerations\":[{\"key\":\"nvidia.com/gpu\","
        "\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}],\"containers\":[{\"name\":\"cuda\","
        "\"image\":\"nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04\",\"command\":[\"sleep\","
        "\"infinity\"],\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}'; done",
        "kubectl wait pod -l app=gpu-holder --for=condition=Ready --timeout=120s",
        "kubectl patch clusterpolicy cluster-policy --type=merge -p "
        "'{\"spec\":{\"validator\":{\"plugin\":{\"env\":[{\"name\":\"WITH_WORKLOAD\","
        "\"value\":\"true\"}]}}}}'",
        f"{VALIDATOR_PODS.replace('get pods', 'delete pods')}",
    ],
    look=[
        Step("kubectl get clusterpolicy cluster-policy -o jsonpath='{.status.state}{\"\\n\"}'",
             "notReady", "the operator counts the validator among its states"),
        Step(VALIDATOR_PODS, "Init:", "the validator never gets past its init containers: "
             f"Init:3/4 while plugin-validation waits, {CRASH_LOOP} between its tries"),
        Step(f"kubectl -n $GPU_OPERATOR_NS logs $({VALIDATOR_PODS} -o name | head -1) -c {INIT}",
             WAITING, "its workload pod is Failed and stays so"),
        Step(f"kubectl -n $GPU_OPERATOR_NS describe pods -l app={WORKLOAD_LABEL}", UNAVAILABLE,
             "the kubelet had no free GPU when the pod arrived"),
        Step("kubectl describe nodes -l nvidia.com/gpu.present=true", "nvidia.com/gpu     1  ",
             "Allocated resources: the GPU is allocated (1 of 1)"),
        Step("kubectl get pods -o wide", HOLDER, "who holds it"),
    ],
    revert=[
        f"kubectl delete pod -l app={HOLDER} --wait",
        f"kubectl -n $GPU_OPERATOR_NS delete pods -l app={WORKLOAD_LABEL} "
        "--field-selector status.phase=Failed",
        f"{VALIDATOR_PODS.replace('get pods', 'delete pods')}",
    ],
)  # fmt: skip


FACTS = Facts(
    summary="every GPU is held by a running pod while the validator's WITH_WORKLOAD check wants "
    "one: its workload pod is rejected (Available: 0), the validator sits in "
    "Init:CrashLoopBackOff and the ClusterPolicy goes notReady",
    area="operator",
    needs=Needs(gpu_nodes=1, operator=True),
    risk="low: one pod per GPU node holding its GPU (other GPU pods wait meanwhile), the "
    "validator pods restarted and validator.plugin.env WITH_WORKLOAD=true (its old value noted "
    "in the lab's record); running GPU pods keep their GPU",
    duration="about 12 minutes on EKS (the validator gives up after 5 minutes; after the fix "
    "its waiting run ends and the back-off passes before the next try)",
    doctor_finding="validator-workload-blocked",
    cause=Cause(
        plain="Running pods hold every node's GPU, so the validator's own GPU test pod "
        "(WITH_WORKLOAD=true) is rejected and the validator never passes.",
        names=(
            (
                "GPU held",
                "held the GPU",
                "hold the GPU",
                "holding the GPU",
                "holds the GPU",
                "GPU busy",
                "GPU in use",
                "GPU taken",
                "GPU occupied",
                "GPU allocated",
                "no free GPU",
                "gpu-holder",
                "holder pod",
                "allocated",
                "in use",
                "busy",
                "occupied",
                "Available: 0",
            ),
        ),
        clues=(
            (
                "validator",
                "plugin-validation",
                "nvidia-operator-validator",
                "nvidia-device-plugin-validator",
                "validation",
            ),
            ("WITH_WORKLOAD", "workload", "test pod", "validation pod"),
            ("UnexpectedAdmissionError", "admission", "rejected"),
            ("notReady", "not ready", "state-operator-validation"),
            _words.CLUSTER_POLICY,
        ),
    ),  # fmt: skip
    alerts=("GpuOperandDaemonSetUnavailable", "GpuClusterPolicyNotReady"),
    state=state,
    gauges=gpu.gpu_gauges(PROBE),
    by_hand=by_hand,
    reset=reset,
)
