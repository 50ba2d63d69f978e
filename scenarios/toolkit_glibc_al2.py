"""A GPU node on Amazon Linux 2 given the operator's container toolkit: no GPU container starts.

The AL2 write-up: EKS GPU nodes on the Amazon Linux 2 GPU AMI (glibc 2.26) and the GPU
Operator with `toolkit.enabled=true` at the chart's toolkit (v1.17.8-ubuntu20.04 for chart
v25.3.4), built against glibc >= 2.27. The toolkit pod runs (1/1) and installs itself under
/usr/local/nvidia/toolkit, pointing containerd's `nvidia` runtime at it; from then on the
runtime's prestart hook, `nvidia-container-cli.real`, cannot load on that node, so every
container that asks for GPUs fails to start: kubelet's `Failed` Event `Error: failed to create
containerd task: ... version 'GLIBC_2.27' not found (required by
/usr/local/nvidia/toolkit/libnvidia-container.so.1): unknown`, the container terminated
`StartError` exit code 128, then CrashLoopBackOff. The validator's driver-validation (no GPUs
asked) runs and logs `Could not create symlink ... file exists` for the AMI's
/dev/nvidia-caps links (warnings: it passes); its toolkit-validation
(NVIDIA_VISIBLE_DEVICES=all) is the one that fails: `0/1 Init:CrashLoopBackOff`, and the
ClusterPolicy goes `notReady`. The write-up's first "fix", `CUDA_DRIVER_SKIP_DUPLICATE_LINKS=true`
in the validator's env, exists in no gpu-operator release and changes nothing; the fix is a
toolkit built for the old glibc (`toolkit.version: v1.14.6-ubi8`), or the AL2023 NVIDIA AMI,
which ships its own toolkit (the lab's stack, toolkit off).

AL2 AMIs ended on 2025-11-26 and EKS 1.35 has none, so no node group of the lab can boot one:
on a rehearsal lab the world switches the first GPU node in place to what an AL2 GPU node
reports (`osImage: Amazon Linux 2`, kernel 5.10 amzn2, containerd 1.7, glibc 2.26; its kubelet
stays the lab's) and, as that node's boot would after the toolkit installed itself, its
validator pod starts again. The other GPU node stays on AL2023 (glibc 2.34), where the same
toolkit runs fine.
"""

from __future__ import annotations

import time
from typing import Any

from labs.errors import LabError
from labs.kube import gpu, probes, rest
from labs.kube.changes import patch_cluster_policy
from labs.kube.logs import READ_TIMEOUT
from labs.kube.resources import CLUSTER_POLICIES, PODS, KubeApiError
from labs.kube.view import ClusterView, Objects
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
from scenarios import _checks, _one_node, _words
from scenarios.containerd_runtime_missing import policy_not_ready

PROBE = probes.probe_name()
AL2 = "Amazon Linux 2"
CHART_TOOLKIT = "v1.17.8-ubuntu20.04"  # gpu-operator chart v25.3.4 values.yaml:223
FIXED_TOOLKIT = "v1.14.6-ubi8"  # the write-up's pin, which runs on glibc 2.26
BEFORE = "toolkit_before"  # the lab record's note of the toolkit section the fault replaced
MYTH = "CUDA_DRIVER_SKIP_DUPLICATE_LINKS"
GLIBC = "version `GLIBC_2.27' not found"
SYMLINK = "Could not create symlink"
INIT = "toolkit-validation"  # the validator's init container that asks for every GPU
TOOLKIT_LOOKS_FINE = "the toolkit pod on the AL2 node runs 1/1 (trap)"
MYTH_NO_HELP = f"with {MYTH}=true in the validator's env, its new pod fails the same way (trap)"
traps = [
    Trap("the toolkit pod is Running, so the toolkit works", "a broken toolkit shows as a "
         "failed toolkit pod", "nvidia-container-toolkit-daemonset 1/1 Running on the AL2 node",
         "the toolkit pod only installs the runtime; the runtime's hook fails later, in every "
         "GPU container on that node", shown_by=TOOLKIT_LOOKS_FINE),
    Trap(f"{MYTH}=true fixes the validator", "the write-up's env var stops the symlink errors "
         "and the loop", "no such switch exists in any gpu-operator release; it rolls the toolkit "
         "too (every operand's driver-validation gets it), and a validator that starts while "
         "the toolkit is away passes on the AMI's own one: once the toolkit is back, the new "
         "validator pod fails to start its toolkit-validation the same way",
         "the symlink lines are warnings (the validator goes on); the crash loop is the "
         "toolkit's glibc (the real switch for symlinks is DISABLE_DEV_CHAR_SYMLINK_CREATION)",
         shown_by=MYTH_NO_HELP),
]  # fmt: skip


def toolkit_section(policy: dict[str, Any] | None) -> dict[str, Any]:
    """The ClusterPolicy's spec.toolkit (enabled, version)."""
    return dict(((policy or {}).get("spec") or {}).get("toolkit") or {})


def toolkit_breaks_al2(policy: dict[str, Any] | None) -> bool:
    """The operator deploys a toolkit built against glibc >= 2.27."""
    section = toolkit_section(policy)
    version = str(section.get("version") or CHART_TOOLKIT)
    return section.get("enabled") is True and gpu.toolkit_needs_glibc_227(version)


def al2_nodes(objects: Objects) -> list[str]:
    """GPU nodes reporting the Amazon Linux 2 image."""
    return [gpu.name_of(n) for n in gpu.gpu_nodes(objects) if _os_image(n) == AL2]


def _os_image(node: dict[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("osImage") or "")


def _pod_on(objects: Objects, daemonset: str, node: str) -> dict[str, Any] | None:
    """The DaemonSet's pod on `node`; one being deleted is not it any more (its successor may
    be listed after it)."""
    for pod in objects.objects("operator_pods"):
        owners = pod["metadata"].get("ownerReferences") or []
        mine = any(o.get("kind") == "DaemonSet" and o.get("name") == daemonset for o in owners)
        gone = pod["metadata"].get("deletionTimestamp")
        if mine and not gone and pod["spec"].get("nodeName") == node:
            return dict(pod)
    return None


def _name(pod: dict[str, Any] | None) -> str:
    return gpu.name_of(pod) if pod else "-"


def _read_pod_on(lab: Lab, daemonset: str, node: str) -> dict[str, Any] | None:
    pods = rest.get_items(lab.kube, PODS.path(lab.operator_namespace),
                          query={"labelSelector": f"app={daemonset}",
                                 "fieldSelector": f"spec.nodeName={node}"})  # fmt: skip
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return live[0] if live else None


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the GPU nodes, the chosen node and
    the ClusterPolicy's toolkit section."""
    if al2_nodes(view):
        raise LabError(
            f"{', '.join(al2_nodes(view))} already reports {AL2}: set it back first "
            f"(`invoke scenario.revert --all --lab {lab.name}`) so the run starts from a lab on "
            "the AL2023 NVIDIA AMI"
        )
    facts = _one_node.one_node_baseline(lab, view)
    kept = {key: facts[key] for key in ("probe_output", "gpu_nodes", "node", "others")}
    return kept | {"toolkit": toolkit_section(gpu.cluster_policy(view))}


def inject(lab: Lab) -> None:
    """Note the ClusterPolicy's toolkit section in the lab's record, ask the rehearsal world to
    put the first GPU node on the AL2 GPU AMI, merge-patch toolkit.enabled=true at the chart's
    toolkit, and once the toolkit runs on that node restart its validator pod (as the node's
    boot would)."""
    policy = rest.read(lab.kube, CLUSTER_POLICIES.path(name=gpu.CLUSTER_POLICY_NAME))
    if not toolkit_breaks_al2(policy):  # a second injection keeps the first one's note
        lab.update(**{BEFORE: toolkit_section(policy)})
    node = _one_node.target_node(lab.snapshot("nodes"))
    lab.backend.set_node_os(lab, node, "al2")
    version = str(toolkit_section(policy).get("version") or CHART_TOOLKIT)
    if not gpu.toolkit_needs_glibc_227(version):
        version = CHART_TOOLKIT
    patch_cluster_policy(lab, {"spec": {"toolkit": {"enabled": True, "version": version}}})
    deadline = time.monotonic() + 300 / lab.speed + 30
    while time.monotonic() < deadline:
        toolkit = _read_pod_on(lab, gpu.TOOLKIT_DAEMONSET, node)
        if toolkit is not None and (toolkit.get("status") or {}).get("phase") == "Running":
            break
        time.sleep(0.5)
    else:
        raise LabError(f"the operator's toolkit pod did not start on {node} within 300 s")
    validator = _read_pod_on(lab, gpu.VALIDATOR_DAEMONSET, node)
    if validator is not None:
        rest.delete(lab.kube, PODS.path(lab.operator_namespace, gpu.name_of(validator)))


def _validator_env_without_myth(policy: dict[str, Any] | None) -> dict[str, Any]:
    """The validator's driver/plugin env lists with the write-up's variable removed (only the
    sections that carry it)."""
    validator = ((policy or {}).get("spec") or {}).get("validator") or {}
    patch: dict[str, Any] = {}
    for part in ("driver", "plugin"):
        env = (validator.get(part) or {}).get("env") or []
        if any(e.get("name") == MYTH for e in env):
            kept = [{"name": e["name"], "value": str(e.get("value", ""))} for e in env
                    if e.get("name") != MYTH]  # fmt: skip
            patch[part] = {"env": kept or None}
    return patch


def reset(lab: Lab) -> None:
    """The tool's part: the toolkit section back as the lab's record noted it (the stack's
    toolkit off), the write-up's validator env removed, the node back on the AL2023 AMI
    (safe to repeat)."""
    noted = lab.record.get(BEFORE) or {"enabled": False, "version": CHART_TOOLKIT}
    policy = rest.read(lab.kube, CLUSTER_POLICIES.path(name=gpu.CLUSTER_POLICY_NAME))
    back: dict[str, Any] = {"enabled": bool(noted.get("enabled", False))}
    if noted.get("version"):
        back["version"] = str(noted["version"])
    spec: dict[str, Any] = {"toolkit": back}
    if myth := _validator_env_without_myth(policy):
        spec["validator"] = myth
    patch_cluster_policy(lab, {"spec": spec})
    for node in al2_nodes(lab.snapshot("nodes")):
        lab.backend.set_node_os(lab, node, "al2023")


def revert(lab: Lab) -> None:
    """Toolkit section back as noted, the validator env patch undone, the node back on the
    AL2023 AMI (safe to repeat)."""
    reset(lab)


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while a GPU node reports Amazon Linux 2 and the operator deploys a toolkit built
    against glibc >= 2.27."""
    return bool(al2_nodes(view)) and toolkit_breaks_al2(gpu.cluster_policy(view))


# --- symptoms (T+ from the injection) --------------------------------------------------------


def _glibc_failures(objects: Objects, node: str) -> list[tuple[dict[str, Any], str]]:
    """(validator pod on `node`, latest message) for validator pods whose container kubelet
    could not start for the toolkit's glibc."""
    latest: dict[str, str] = {}
    for event in gpu.events_with_reason(objects, "operator_events", "Failed"):
        if GLIBC in str(event.get("message")):
            latest[str((event.get("involvedObject") or {}).get("uid"))] = str(event["message"])
    pod = _pod_on(objects, gpu.VALIDATOR_DAEMONSET, node)
    if pod is None or pod["metadata"]["uid"] not in latest:
        return []
    return [(pod, latest[pod["metadata"]["uid"]])]


def node_on_al2(ctx: Context) -> Verdict:
    node = ctx.view.find("nodes", ctx.baseline["node"]) or {}
    info = (node.get("status") or {}).get("nodeInfo") or {}
    seen = (f"{ctx.baseline['node']}: {info.get('osImage')}, kernel {info.get('kernelVersion')}, "
            f"{info.get('containerRuntimeVersion')}")  # fmt: skip
    return info.get("osImage") == AL2, seen


def toolkit_looks_fine(ctx: Context) -> Verdict:
    pod = _pod_on(ctx.view, gpu.TOOLKIT_DAEMONSET, ctx.baseline["node"])
    if pod is None:
        return False, f"no toolkit pod on {ctx.baseline['node']} yet"
    image = str((pod["spec"].get("containers") or [{}])[0].get("image", ""))
    return gpu.is_ready(pod), f"{gpu.name_of(pod)} Ready={gpu.is_ready(pod)} ({image})"


def start_refused(ctx: Context) -> Verdict:
    failures = _glibc_failures(ctx.view, ctx.baseline["node"])
    if not failures:
        return False, f"no Failed Event naming GLIBC_2.27 on {ctx.baseline['node']}'s validator"
    pod, message = failures[0]
    return True, f"{gpu.name_of(pod)}: {message}"


def _init_status(pod: dict[str, Any] | None, name: str) -> dict[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get("initContainerStatuses") or []
    return next((dict(s) for s in statuses if s.get("name") == name), {})


def crash_looping(ctx: Context) -> Verdict:
    pod = _pod_on(ctx.view, gpu.VALIDATOR_DAEMONSET, ctx.baseline["node"])
    status = _init_status(pod, INIT)
    ended = (status.get("lastState") or {}).get("terminated") or {}
    waiting = ((status.get("state") or {}).get("waiting") or {}).get("reason")
    held = (ended.get("reason"), ended.get("exitCode"), waiting) == (
        "StartError", 128, "CrashLoopBackOff")  # fmt: skip
    seen = (f"{_name(pod)} {INIT}: waiting {waiting}, last terminated "
            f"{ended.get('reason')} exit code {ended.get('exitCode')}")  # fmt: skip
    return held, seen


def symlink_warnings(ctx: Context) -> Verdict:
    pod = _pod_on(ctx.view, gpu.VALIDATOR_DAEMONSET, ctx.baseline["node"])
    if pod is None:
        return False, "no validator pod on the node"
    ns = ctx.lab.operator_namespace
    path = PODS.path(ns, gpu.name_of(pod), "log")
    query = {"container": "driver-validation", "tailLines": 20}
    try:
        text = rest.get(ctx.lab.kube, path, query, timeout=READ_TIMEOUT).decode(errors="replace")
    except KubeApiError as error:  # the pod replaced between the read and the log
        return False, f"{gpu.name_of(pod)}: {error}"
    lines = [line for line in text.splitlines() if SYMLINK in line]
    done = _init_status(pod, "driver-validation").get("state", {}).get("terminated", {})
    held = bool(lines) and done.get("exitCode") == 0
    return held, f"{lines[-1] if lines else 'no symlink line'}; exit code {done.get('exitCode')}"


def apply_myth(ctx: Context) -> None:
    """Do what the write-up did, first half: CUDA_DRIVER_SKIP_DUPLICATE_LINKS=true in the
    validator's driver and plugin env (the operator renders it into the DaemonSet)."""
    policy = gpu.cluster_policy(ctx.view) or {}
    validator = (policy.get("spec") or {}).get("validator") or {}
    spec: dict[str, Any] = {}
    for part in ("driver", "plugin"):
        env = [
            {"name": e["name"], "value": str(e.get("value", ""))}
            for e in (validator.get(part) or {}).get("env") or []
            if e.get("name") != MYTH
        ]
        spec[part] = {"env": [*env, {"name": MYTH, "value": "true"}]}  # fmt: skip
    patch_cluster_policy(ctx.lab, {"spec": {"validator": spec}})


def myth_rendered(ctx: Context) -> Verdict:
    """The operator renders the variable into every operand's driver-validation (validator.
    driver.env: object_controls.go:3509-3516 v25.3.4), so the toolkit rolls too; while its new
    pod starts, nothing of the operator's toolkit is installed on the node and a validator
    started then passes on the AMI's own toolkit. Held once the toolkit is back."""
    template = gpu.pod_template_spec(gpu.daemonset(ctx.view, gpu.VALIDATOR_DAEMONSET))
    rendered = _myth_in(template)
    toolkit = _pod_on(ctx.view, gpu.TOOLKIT_DAEMONSET, ctx.baseline["node"])
    back = bool(toolkit) and gpu.is_ready(toolkit or {}) and _myth_in(
        (toolkit or {}).get("spec") or {}) == "true"  # fmt: skip
    return rendered == "true" and back, (
        f"validator DaemonSet driver-validation {MYTH}={rendered or '-'}; toolkit pod on the "
        f"node {_name(toolkit)} {'back, Ready with it' if back else 'not yet back with it'}"
    )


def restart_validator(ctx: Context) -> None:
    """The write-up's second half: restart the validator pod on the node, so the new env
    surely applies."""
    pod = _pod_on(ctx.view, gpu.VALIDATOR_DAEMONSET, ctx.baseline["node"]) or {}
    ctx.notes["myth_before"] = pod.get("metadata", {}).get("uid") or "none"
    if pod:
        rest.delete(ctx.lab.kube, PODS.path(ctx.lab.operator_namespace, gpu.name_of(pod)))


def myth_no_help(ctx: Context) -> Verdict:
    before = ctx.notes.get("myth_before")
    if not before:
        return False, f"{MYTH} not set yet"
    failures = _glibc_failures(ctx.view, ctx.baseline["node"])
    # Only a pod the operator rendered with the env counts: the write-up's restart alone can
    # come back from the template before the operator's next reconcile.
    fresh = [(p, m) for p, m in failures
             if p["metadata"]["uid"] != before and _myth_in(p.get("spec") or {})]  # fmt: skip
    template = gpu.pod_template_spec(gpu.daemonset(ctx.view, gpu.VALIDATOR_DAEMONSET))
    rendered = _myth_in(template) or "-"
    if not fresh:
        return False, f"validator template {MYTH}={rendered}; no pod with it refused yet"
    pod, message = fresh[0]
    return True, f"{MYTH}={rendered}; new pod {gpu.name_of(pod)} with it: {message}"


def _myth_in(spec: dict[str, Any]) -> str:
    """The value the write-up's variable has in driver-validation ("" where it is not set)."""
    return next(
        (str(e.get("value", "")) for c in spec.get("initContainers") or []
         if c.get("name") == "driver-validation" for e in c.get("env") or []
         if e.get("name") == MYTH),
        "",
    )  # fmt: skip


def others_fine(ctx: Context) -> Verdict:
    states = {}
    for node in ctx.baseline["others"]:
        states[node] = gpu.is_ready(_pod_on(ctx.view, gpu.VALIDATOR_DAEMONSET, node) or {})
    values = gpu.allocatable_by_node(ctx.view)
    held = all(states.values()) and all(values.get(n) == "1" for n in ctx.baseline["others"])
    return held, f"validator Ready on the others: {states}; {gpu.describe_allocatable(ctx.view)}"


symptoms = [
    Check(f"the node reports osImage {AL2} (glibc 2.26)", node_on_al2, 30),
    Check(TOOLKIT_LOOKS_FINE, toolkit_looks_fine, 300),
    Check(f"the validator's {INIT} fails to start: Failed `... {GLIBC} ...`", start_refused, 180,
          names_cause=True, then=apply_myth),
    Check(f"{INIT} terminated StartError exit code 128, waiting CrashLoopBackOff",
          crash_looping, 180),
    Check(f"driver-validation logs `{SYMLINK} ... file exists` and passes (benign)",
          symlink_warnings, 180),
    Check(f"the operator renders {MYTH}=true into the validator and the toolkit, whose pod on "
          "the node is back", myth_rendered, 300,
          then=restart_validator),
    Check(MYTH_NO_HELP, myth_no_help, 600),
    Check("the AL2023 node is unaffected: its validator Ready, allocatable 1", others_fine, 60),
    Check("ClusterPolicy status.state notReady", policy_not_ready, 300),
]  # fmt: skip


# --- diagnosis: pods -> events -> logs -> node OS -> toolkit version -> fix --------------------


def diagnose(ctx: Context) -> list[Finding]:
    """Stuck validator -> its Events -> driver-validation's log (benign) -> the node's OS and
    glibc -> the toolkit the operator deploys -> the ClusterPolicy -> the fix."""
    view, ns, node = ctx.view, ctx.lab.operator_namespace, ctx.baseline["node"]
    pod = _pod_on(view, gpu.VALIDATOR_DAEMONSET, node)
    name = gpu.name_of(pod) if pod else "<validator pod>"
    policy = gpu.cluster_policy(view)
    return [
        Finding("1. Pods: which operand does not start?", f"kubectl -n {ns} get pods -o wide",
                f"{crash_looping(ctx)[1]}; {toolkit_looks_fine(ctx)[1]}",
                "the validator on one node never gets past its init containers; the toolkit pod "
                "there is Running", trap="the toolkit pod is Running, so the toolkit works"),
        Finding("2. Its events", f"kubectl -n {ns} describe pod {name}", start_refused(ctx)[1],
                "containerd cannot start the container: the NVIDIA runtime's hook "
                "(nvidia-container-cli from /usr/local/nvidia/toolkit) needs GLIBC_2.27"),
        Finding("3. driver-validation's log", f"kubectl -n {ns} logs {name} -c driver-validation",
                symlink_warnings(ctx)[1], "warnings; it passed. Not the loop's cause",
                trap=f"{MYTH}=true fixes the validator"),
        Finding("4. The node's OS and glibc", f"kubectl get node {node} -o jsonpath="
                "'{.status.nodeInfo.osImage}'; on the node: ldd --version", node_on_al2(ctx)[1],
                "Amazon Linux 2 has glibc 2.26"),
        Finding("5. The toolkit the operator deploys", "kubectl get clusterpolicy cluster-policy "
                "-o jsonpath='{.spec.toolkit}'", str(toolkit_section(policy)),
                "toolkit >= 1.17 is built against glibc >= 2.27"),
        Finding("6. The ClusterPolicy", "kubectl get clusterpolicy cluster-policy -o "
                "jsonpath='{.status.state}'", policy_not_ready(ctx)[1],
                f"fix: kubectl patch clusterpolicy cluster-policy --type=merge -p "
                f'\'{{"spec":{{"toolkit":{{"version":"{FIXED_TOOLKIT}"}}}}}}\' (or move to the '
                "AL2023 NVIDIA AMI with the toolkit off)"),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------


def toolkit_fits(ctx: Context) -> Verdict:
    policy = gpu.cluster_policy(ctx.view)
    held = not (al2_nodes(ctx.view) and toolkit_breaks_al2(policy))
    return held, f"spec.toolkit {toolkit_section(policy)}; AL2 nodes: {al2_nodes(ctx.view)}"


def validator_ready(ctx: Context) -> Verdict:
    pod = _pod_on(ctx.view, gpu.VALIDATOR_DAEMONSET, ctx.baseline["node"])
    ready = gpu.is_ready(pod or {})
    return ready, f"{(gpu.name_of(pod) if pod else '') or '-'} Ready={ready}"


def lab_as_before(ctx: Context) -> Verdict:
    section = toolkit_section(gpu.cluster_policy(ctx.view))
    wanted = ctx.baseline.get("toolkit") or {}
    held = not al2_nodes(ctx.view) and section.get("enabled") == wanted.get("enabled")
    return held, f"spec.toolkit {section}; AL2 nodes: {al2_nodes(ctx.view) or 'none'}"


def probe_again(ctx: Context) -> None:
    probes.recreate_probe(ctx.lab, ctx.lab.settings.probe_timeout)


recovery = [
    Check("the operator deploys a toolkit that runs on the node's glibc", toolkit_fits, 60,
          names_cause=True),
    Check("the validator on the node passes its init containers: Ready", validator_ready, 300),
    Check("ClusterPolicy status.state ready", _checks.policy_ready_again, 300),
    Check("the node back on the AL2023 AMI, the toolkit as the lab had it", lab_as_before, 120,
          tool=True, then=probe_again),
    Check("gpu-probe, run again, prints the baseline's GPU line",
          _checks.probe_output_as_baseline(PROBE), 420, tool=True),
]  # fmt: skip


def state(ctx: Context) -> dict[str, str]:
    """The summary rows, compared between baseline, fault and recovery."""
    policy = gpu.cluster_policy(ctx.view)
    return {
        "GPU nodes on Amazon Linux 2": ", ".join(al2_nodes(ctx.view)) or "none",
        "ClusterPolicy spec.toolkit": str(toolkit_section(policy)),
        "ClusterPolicy status.state": gpu.policy_state(policy),
        "operand DaemonSets (ready/desired)": gpu.describe_operands(ctx.view),
    }


POLICY_PATCH = "kubectl patch clusterpolicy cluster-policy --type=merge -p "
by_hand = ByHand(
    inject=[
        "# no node group of EKS 1.35 boots Amazon Linux 2: on a rehearsal lab "
        "`invoke scenario.inject toolkit-glibc-al2` asks the world to switch a GPU node",
        POLICY_PATCH +
         f'\'{{"spec":{{"toolkit":{{"enabled":true,"version":"{CHART_TOOLKIT}"}}}}}}\'',
    ],
    look=[
        Step("kubectl get nodes -l nvidia.com/gpu.present=true -o jsonpath="
             "'{range .items[*]}{.status.nodeInfo.osImage}{\"\\n\"}{end}'", AL2,
             "one GPU node runs the AL2 AMI"),
        Step("kubectl -n $GPU_OPERATOR_NS get events --field-selector reason=Failed", GLIBC,
             "the NVIDIA runtime's hook cannot load on the node"),
        Step("kubectl -n $GPU_OPERATOR_NS get pods -l app=nvidia-operator-validator", "Init:",
             "the validator never passes its init containers there"),
        Step("kubectl get clusterpolicy cluster-policy -o jsonpath='{.spec.toolkit.version} "
             "{.status.state}{\"\\n\"}'", f"{CHART_TOOLKIT} notReady",
             "the toolkit release the operator deploys, and the state"),
    ],
    revert=[
        POLICY_PATCH + '\'{"spec":{"toolkit":{"enabled":false}}}\'',
        "# on a rehearsal lab `invoke scenario.revert --name toolkit-glibc-al2` also puts the "
        "node back on AL2023",
    ],
)  # fmt: skip


FACTS = Facts(
    summary=f"one GPU node on Amazon Linux 2 with the operator's toolkit {CHART_TOOLKIT}: every "
    "GPU container there fails to start (GLIBC_2.27 not found), the validator in "
    "Init:CrashLoopBackOff, the ClusterPolicy notReady",
    area="operator",
    needs=Needs(
        gpu_nodes=2,
        operator=True,
        rehearsal_only="EKS 1.35 has no Amazon Linux 2 AMI (AL2 AMIs ended on 2025-11-26), so "
        "no node group can boot the node this fault needs",
    ),
    risk="medium on a rehearsal: one node's GPU containers cannot start (its running pods keep "
    "going); one reversible ClusterPolicy section, its old value noted in the lab's record",
    duration="about 5 minutes on a cluster (failure within a minute of the toolkit's start)",
    doctor_finding="toolkit-glibc-mismatch",
    cause=Cause(
        plain="The GPU Operator's container toolkit (1.17) is built against glibc 2.27 and the "
        "Amazon Linux 2 node has glibc 2.26, so the NVIDIA runtime's hook cannot start any GPU "
        "container there.",
        names=(("glibc", "GLIBC_2.27", "libc", "C library"),),
        clues=(
            ("toolkit", "container toolkit", "nvidia-container-toolkit", "nvidia-container-cli"),
            ("Amazon Linux 2", "AL2", "amzn2", "old OS", "AMI"),
            _words.ONE_NODE,
            ("v1.14.6", "ubi8", "downgrade", "older toolkit", "pin the toolkit"),
            ("StartError", "prestart hook", "hook", "failed to create containerd task"),
        ),
    ),
    alerts=("GpuOperandDaemonSetUnavailable", "GpuClusterPolicyNotReady"),
    state=state,
    gauges=gpu.gpu_gauges(PROBE),
    by_hand=by_hand,
    reset=reset,
)
