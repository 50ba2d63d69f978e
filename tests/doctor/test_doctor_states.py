"""The doctor on states no scenario injects, built on a held-still API server (objects, Events,
logs).

Each test puts one real-world failure into an otherwise healthy GPU cluster, the way the
write-ups met it, and requires the doctor to name it as the probable cause with the evidence a
person would look at: the toolkit's glibc on Amazon Linux 2 (with the validator's duplicate
symlink warnings called benign), containerd without the nvidia runtime, an XID in the device
plugin's log, an OOMKilled operator. The faults the newer scenarios inject are read here too,
so those scenarios only have to declare the finding's name.
"""

from __future__ import annotations

import pytest
import yaml
from doctor_support import (
    GPU_NODES,
    NS,
    PREEMPTION,
    VALIDATOR,
    StaticCluster,
    policy_conditions,
    ready_status,
    stuck_status,
)
from lab_support import invoke_env, run_invoke

from labs.doctor.catalog import UNKNOWN
from labs.doctor.model import DoctorFinding, Report
from labs.kube.resources import (
    CLUSTER_POLICIES,
    DAEMON_SETS,
    DEPLOYMENTS,
    NODES,
    PODS,
    REPLICA_SETS,
)
from labs.sim.controlplane.run import free_port

SYMLINK_WARNINGS = "".join(
    f'driver-validation time="2025-08-12T02:21:46Z" level=info msg="Creating link '
    f'/host-dev-char/243:{n} => /dev/nvidia-caps/nvidia-cap{n}"\n'
    f'driver-validation time="2025-08-12T02:21:46Z" level=warning msg="Could not create '
    f'symlink: symlink /dev/nvidia-caps/nvidia-cap{n} /host-dev-char/243:{n}: file exists"\n'
    for n in (112, 136, 137)
)
GLIBC = (
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
    "/usr/bin/nvidia-container-cli.real: /lib64/libc.so.6: version `GLIBC_2.27' not found "
    "(required by /usr/bin/nvidia-container-cli.real): unknown"
)
NO_RUNTIME = (
    "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox "
    'runtime: no runtime for "nvidia" is configured'
)
XID = (
    "I0723 04:12:09.118 1 health.go:152] XidCriticalError: Xid=79 on Device=GPU-3f6a1c2e-"
    "8b1d-5e0f-9a44-2c7d5e1b9f03; marking device as unhealthy."
)


@pytest.fixture
def cluster(still, tmp_path) -> StaticCluster:
    built = StaticCluster(still, tmp_path / "labs")
    built.build_healthy()
    return built


def diagnosed(report: Report) -> dict[str, DoctorFinding]:
    """Findings by name (the first of each), after checking every template was filled in."""
    assert report.error is None, report.error
    for finding in report.findings:
        assert UNKNOWN not in finding.meaning + finding.fix, finding
    return {r.finding.name: r.finding for r in reversed(report.ranked)}


def explained_by(report: Report, name: str) -> str | None:
    ranked = next(r for r in report.ranked if r.finding.name == name)
    return ranked.explained_by.name if ranked.explained_by else None


def values(finding: DoctorFinding) -> str:
    return "\n".join(f"{e.object} {e.field} = {e.value}" for e in finding.evidence)


def crash_loop_validator(cluster: StaticCluster, log: str) -> None:
    """The validator DaemonSet 0/2 ready, its pods in Init:CrashLoopBackOff logging `log`."""
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}}
    status = stuck_status("driver-validation", waiting, init=True)
    for pod in cluster.pods_of(VALIDATOR):
        cluster.update(PODS, pod["metadata"]["name"], lambda p: p.update(status=status), NS)
        cluster.log(pod, log, "driver-validation")
    cluster.update(
        DAEMON_SETS,
        VALIDATOR,
        lambda d: d["status"].update(numberReady=0, numberAvailable=0),
        NS,
    )
    message = "ClusterPolicy is not ready, states not ready: [state-operator-validation]"
    cluster.update(
        CLUSTER_POLICIES,
        "cluster-policy",
        lambda p: p["status"].update(
            state="notReady",
            conditions=policy_conditions(
                [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "OperandNotReady",
                        "message": message,
                    },
                    {
                        "type": "Error",
                        "status": "True",
                        "reason": "OperandNotReady",
                        "message": message,
                    },
                ]
            ),
        ),
    )


def test_the_healthy_cluster_has_no_problem_and_nothing_is_written(cluster):
    report = cluster.examine()

    assert (report.exit_code, report.probable_cause) == (0, None)
    assert [f.name for f in report.findings if f.problem] == []
    assert {c.stage for c in report.checked} >= {"pods", "nodes", "operands", "operator", "logs"}
    assert not cluster.state_dir.exists()


def test_toolkit_glibc_on_amazon_linux_2_is_the_cause_and_duplicate_symlinks_are_benign(cluster):
    cluster.gpu_nodes_run(osImage="Amazon Linux 2", kernelVersion="5.10.240-238.959.amzn2.x86_64")
    cluster.update(
        CLUSTER_POLICIES,
        "cluster-policy",
        lambda p: p["spec"].update(
            toolkit={"enabled": True, "version": "v1.17.8-ubuntu20.04"},
            validator={
                "plugin": {
                    "env": [
                        {"name": "WITH_WORKLOAD", "value": "false"},
                        {"name": "CUDA_DRIVER_SKIP_DUPLICATE_LINKS", "value": "true"},
                    ]
                }
            },
        ),
    )
    cluster.enable("nvidia-container-toolkit-daemonset")  # Running, as in the write-up
    crash_loop_validator(cluster, SYMLINK_WARNINGS)
    validator = cluster.pods_of(VALIDATOR)[0]
    cluster.event(validator, "Failed", GLIBC, host=GPU_NODES[0])

    report = cluster.examine()
    found = diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and cause.name == "toolkit-glibc-mismatch"
    assert cause.confidence == "high" and "Amazon Linux 2" in values(cause)
    assert "version `GLIBC_2.27' not found" in values(cause) and "v1.17.8" in values(cause)
    assert "v1.14.6-ubi8" in cause.fix and "AL2023" in cause.fix
    assert explained_by(report, "operand-not-ready") == "toolkit-glibc-mismatch"
    benign = found["validator-duplicate-symlinks"]
    assert benign.severity == "info" and benign.explains == ()
    assert "benign" in benign.meaning and "DISABLE_DEV_CHAR_SYMLINK_CREATION" in benign.meaning
    assert "sets CUDA_DRIVER_SKIP_DUPLICATE_LINKS=true: it does nothing" in benign.meaning
    assert "file exists" in values(benign)
    assert report.exit_code == 1


def test_a_validator_rolling_out_after_a_toggle_is_no_root_cause_but_a_crash_loop_is(cluster):
    """devicePlugin.enabled=false makes the operator drop plugin-validation from the
    validator's template, so its pods are replaced node by node: one starting pod (nothing
    restarted) is a rollout to look at again, ranked below the switch that caused it."""
    cluster.update(
        CLUSTER_POLICIES,
        "cluster-policy",
        lambda p: p["spec"]["devicePlugin"].update(enabled=False),
    )
    cluster.delete(DAEMON_SETS, "nvidia-device-plugin-daemonset", NS)
    starting = {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False"}],
        "initContainerStatuses": [
            {"name": "driver-validation", "ready": True, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "cuda-validation", "ready": False, "restartCount": 0,
             "state": {"running": {"startedAt": "2026-11-23T07:01:00Z"}}},
        ],
        "containerStatuses": [
            {"name": VALIDATOR, "ready": False, "restartCount": 0,
             "state": {"waiting": {"reason": "PodInitializing"}}},
        ],
    }  # fmt: skip
    rolling = cluster.pods_of(VALIDATOR)[0]
    cluster.update(PODS, rolling["metadata"]["name"], lambda p: p.update(status=starting), NS)
    cluster.update(DAEMON_SETS, VALIDATOR, lambda d: d["status"].update(numberReady=1), NS)

    report = cluster.examine()
    rollout = diagnosed(report)["operand-not-ready"]
    assert report.probable_cause is not None
    assert report.probable_cause.name == "device-plugin-disabled"
    assert (rollout.severity, rollout.confidence) == ("warning", "medium")
    assert "1/2 ready (pods starting, none restarted: a rollout?" in rollout.summary
    assert "status = PodInitializing" in values(rollout)

    crash_loop_validator(cluster, "")  # the same DaemonSet, its pods restarting
    looping = diagnosed(cluster.examine())["operand-not-ready"]
    assert (looping.severity, looping.confidence) == ("error", "high")
    assert "rollout" not in looping.summary


def test_duplicate_symlink_warnings_alone_are_not_called_the_cause(cluster):
    crash_loop_validator(cluster, SYMLINK_WARNINGS)

    report = cluster.examine()
    found = diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and cause.name == "operand-not-ready"
    assert cause.subject == f"daemonset/{NS}/nvidia-operator-validator"
    assert "Init:CrashLoopBackOff" in values(cause)
    assert found["validator-duplicate-symlinks"].severity == "info"
    assert explained_by(report, "clusterpolicy-not-ready") == "operand-not-ready"


def test_containerd_without_the_nvidia_runtime_is_named_from_the_sandbox_event(cluster):
    cluster.gpu_nodes_run(
        osImage="Ubuntu 22.04.5 LTS", containerRuntimeVersion="containerd://1.7.24"
    )
    status = stuck_status("cuda", {"waiting": {"reason": "ContainerCreating"}})
    pod = cluster.pod(
        "cuda-vectoradd",
        "default",
        GPU_NODES[1],
        ["cuda"],
        status=status,
        spec={
            "runtimeClassName": "nvidia",
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    )
    cluster.event(pod, "FailedCreatePodSandBox", NO_RUNTIME, host=GPU_NODES[1])

    report = cluster.examine()
    diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and cause.name == "containerd-runtime-missing"
    assert cause.subject == f"node/{GPU_NODES[1]}"
    assert f"pod/default/cuda-vectoradd event FailedCreatePodSandBox = {NO_RUNTIME}" in values(
        cause
    )
    assert "CONTAINERD_CONFIG" in cause.fix and "v1.16.2" in cause.fix


def test_an_xid_in_the_device_plugin_log_explains_the_missing_gpu(cluster):
    node = GPU_NODES[0]
    cluster.update(
        NODES, node, lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "0"})
    )
    plugin = next(
        p
        for p in cluster.pods_of("nvidia-device-plugin-daemonset")
        if p["spec"]["nodeName"] == node
    )
    cluster.log(plugin, f"I0723 04:11:58 main.go] ok\n{XID}\n")

    report = cluster.examine()
    diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and (cause.name, cause.subject) == ("gpu-xid-error", f"node/{node}")
    assert XID in values(cause) and "XID 79" in cause.meaning and "drain" in cause.fix
    assert explained_by(report, "gpu-allocatable-zero") == "gpu-xid-error"


def test_capacity_lagging_allocatable_is_explained_as_kubelets_grace_period(cluster):
    gpu_dark(cluster, GPU_NODES[0])
    cluster.update(
        NODES, GPU_NODES[0], lambda n: n["status"]["capacity"].update({"nvidia.com/gpu": "1"})
    )

    found = diagnosed(cluster.examine())

    evidence = values(found["gpu-allocatable-zero"])
    assert "allocatable 0, capacity 1 (capacity still counts GPUs kubelet no longer" in evidence
    assert "5-minute grace period" in evidence


def test_an_oomkilled_operator_is_named_with_its_restarts(cluster):
    cluster.update(
        DEPLOYMENTS,
        "gpu-operator",
        lambda d: d["status"].update(readyReplicas=0, availableReplicas=0, unavailableReplicas=1),
        NS,
    )
    status = ready_status(["gpu-operator"], "")
    status["conditions"] = [{"type": "Ready", "status": "False"}]
    status["containerStatuses"][0].update(
        ready=False,
        restartCount=6,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    )
    cluster.update(PODS, "gpu-operator-5798b5b564-xbq5h", lambda p: p.update(status=status), NS)
    cluster.delete(DAEMON_SETS, "nvidia-dcgm-exporter", NS)

    report = cluster.examine()
    diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and cause.name == "operator-oomkilled"
    assert "OOMKilled" in values(cause) and "6 restart(s)" in cause.summary
    assert "operator.resources.limits.memory" in cause.fix
    assert explained_by(report, "operand-daemonset-missing") == "operator-oomkilled"


# --- the faults the newer scenarios inject ---------------------------------------------------


def test_a_gpu_pod_without_the_gpu_nodes_toleration(cluster):
    # EKS adds the nvidia.com/gpu toleration to every pod asking for a GPU (the plane enables
    # the same admission plugin), so the taint a GPU pod misses is another one: a team's own.
    team = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    for node in GPU_NODES:
        cluster.update(NODES, node, lambda n: n["spec"]["taints"].append(dict(team)))
    message = (
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) had "
        f"untolerated taint(s). {PREEMPTION}"
    )
    cluster.pending_gpu_pod("gpu-probe", message, tolerations=[])

    report = cluster.examine()
    found = diagnosed(report)

    # the operands do not tolerate it either: the node's taint is the root, the pod's Pending
    # one of its symptoms
    cause = report.probable_cause
    assert cause is not None and cause.name == "gpu-node-taint-not-tolerated"
    pod = next(f for f in report.findings if f.name == "pod-untolerated-taint")
    assert "dedicated=ml:NoSchedule" in pod.summary and "dedicated" in pod.fix
    assert "nvidia.com/gpu=true" not in pod.summary, "admission added that toleration"
    assert "pod-insufficient-gpu" not in found  # the system nodes' reason says nothing


def test_a_pod_that_wants_a_gpu_without_a_limit(cluster):
    status = stuck_status("cuda", {"terminated": {"reason": "Error", "exitCode": 1}}, "Failed")
    probe = cluster.pod(
        "gpu-probe",
        "default",
        GPU_NODES[0],
        ["cuda"],
        status=status,
        spec={
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "nodeSelector": {"tier": "gpu"},
        },
    )
    cluster.log(probe, "Failed to initialize NVML: Unknown Error\n")

    report = cluster.examine()
    diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and (cause.name, cause.severity) == ("pod-without-gpu-limit", "error")
    assert "Failed to initialize NVML: Unknown Error" in values(cause)
    assert "it runs a GPU image (nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04)" in cause.meaning


AGENT_SPEC = {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
}


def test_a_node_agent_on_the_gpu_nodes_is_not_told_to_take_a_gpu(cluster):
    busybox = "public.ecr.aws/docker/library/busybox:1.37"
    node = GPU_NODES[0]
    cluster.pod("gpu-node-agent", "default", node, ["agent"], image=busybox, spec=AGENT_SPEC)

    assert "pod-without-gpu-limit" not in diagnosed(cluster.examine())


def test_nvidia_visible_devices_in_the_spec_is_evidence_of_gpu_use(cluster):
    agent = {"name": "agent", "image": "public.ecr.aws/docker/library/busybox:1.37",
             "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}  # fmt: skip
    cluster.pod("smi", "default", GPU_NODES[0], [], spec={**AGENT_SPEC, "containers": [agent]})

    found = diagnosed(cluster.examine())

    assert "it sets NVIDIA_VISIBLE_DEVICES=all" in found["pod-without-gpu-limit"].meaning


def test_a_mig_slice_asked_of_an_a10g(cluster):
    message = f"0/4 nodes are available: 4 Insufficient nvidia.com/mig-1g.5gb. {PREEMPTION}"
    cluster.pending_gpu_pod("mig-probe", message, limits={"nvidia.com/mig-1g.5gb": "1"})

    report = cluster.examine()
    diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and cause.name == "mig-resource-unavailable"
    assert "mig.capable=false product=NVIDIA-A10G" in cause.meaning


def test_a_runtime_class_that_does_not_exist(cluster):
    selector = {"app": "cuda-job"}
    template = {
        "metadata": {"labels": selector},
        "spec": {
            "runtimeClassName": "nvidia-cdi",
            "containers": [
                {"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
            ],
        },
    }
    cluster.still.put(
        DEPLOYMENTS,
        {
            "metadata": {"name": "cuda-job"},
            "spec": {"replicas": 1, "selector": {"matchLabels": selector}, "template": template},
        },
        "default",
    )
    replicaset = cluster.still.put(
        REPLICA_SETS,
        {"metadata": {"name": "cuda-job-5d9f8c7b6"},
         "spec": {"replicas": 1, "selector": {"matchLabels": selector}, "template": template}},
        "default",
    )  # fmt: skip
    cluster.event(replicaset, "FailedCreate", REFUSED_CDI)

    report = cluster.examine()
    diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and cause.name == "runtimeclass-missing"
    assert cause.subject == "runtimeclass/nvidia-cdi" and "there are: nvidia" in cause.meaning
    assert "deployment/default/cuda-job runtimeClassName = nvidia-cdi" in values(cause)
    assert "replicaset/default/cuda-job-5d9f8c7b6 event FailedCreate" in values(cause)


REFUSED_CDI = (
    'Error creating: pods "cuda-job-5d9f8c7b6-" is forbidden: pod rejected: RuntimeClass '
    '"nvidia-cdi" not found'
)


def test_a_refusal_reported_by_a_replicaset_since_deleted_is_no_finding(cluster):
    """Events outlive their object by an hour: a reverted Deployment's refusals are history."""
    gone = {"kind": "ReplicaSet", "metadata": {"name": "cuda-job-5d9f8c7b6",
                                               "namespace": "default", "uid": "rs-1"}}  # fmt: skip
    cluster.event(gone, "FailedCreate", REFUSED_CDI)

    assert "runtimeclass-missing" not in diagnosed(cluster.examine())


def test_a_refusal_by_a_daemonset_that_names_another_class_since_is_no_finding(cluster):
    """A DaemonSet re-rendered after a revert (its template names nvidia again) keeps the
    refusals it reported while it named a class that is gone: history, not the cause."""
    [plugin] = cluster.still.api.list(DAEMON_SETS, NS, label_selector=None)[0][:1] or [None]
    assert plugin is not None, "the healthy lab has operand DaemonSets"
    about = {"kind": "DaemonSet", "metadata": plugin["metadata"]}
    refused = REFUSED_CDI.replace("cuda-job-5d9f8c7b6-", f"{plugin['metadata']['name']}-")
    cluster.event(about, "FailedCreate", refused)

    assert "runtimeclass-missing" not in diagnosed(cluster.examine())
    cluster.update(DAEMON_SETS, plugin["metadata"]["name"],
                   lambda d: d["spec"]["template"]["spec"].update(runtimeClassName="nvidia-cdi"),
                   NS)  # fmt: skip
    assert "runtimeclass-missing" in diagnosed(cluster.examine())


def test_gpu_nodes_scaled_to_zero_while_a_gpu_pod_waits(cluster):
    for node in GPU_NODES:
        cluster.delete(NODES, node)
        for pod in cluster.still.api.list(PODS, field_selector=f"spec.nodeName={node}")[0]:
            cluster.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
    for ds in cluster.still.api.list(DAEMON_SETS, NS)[0]:
        cluster.update(
            DAEMON_SETS,
            ds["metadata"]["name"],
            lambda d: d["status"].update(
                desiredNumberScheduled=0, currentNumberScheduled=0, numberReady=0
            ),
            NS,
        )
    message = f"0/2 nodes are available: 2 Insufficient nvidia.com/gpu. {PREEMPTION}"
    cluster.pending_gpu_pod("gpu-probe", message.replace("0/4", "0/2").replace("4 Pre", "2 Pre"))

    report = cluster.examine()
    diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and cause.name == "gpu-nodes-scaled-to-zero"
    assert "pod/default/gpu-probe" in values(cause)
    assert explained_by(report, "pod-insufficient-gpu") == "gpu-nodes-scaled-to-zero"


def test_pod_focuses_the_triage_on_one_pod_and_a_missing_one_cannot_be_checked(cluster):
    cluster.pending_gpu_pod(
        "gpu-probe",
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
        f"2 node(s) had untolerated taint(s). {PREEMPTION}",
        tolerations=[],
    )
    cluster.pending_gpu_pod(
        "mig-probe",
        f"0/4 nodes are available: 4 Insufficient nvidia.com/mig-1g.5gb. {PREEMPTION}",
        limits={"nvidia.com/mig-1g.5gb": "1"},
    )

    focused = cluster.examine(pod="default/mig-probe")
    missing = cluster.examine(pod="default/nope")
    malformed = cluster.examine(pod="mig-probe")

    assert [f.name for f in focused.findings if f.problem] == ["mig-resource-unavailable"]
    assert missing.exit_code == 2 and "pod default/nope not found" in str(missing.error)
    assert malformed.exit_code == 2 and "is not NAMESPACE/NAME" in str(malformed.error)


def test_an_unreachable_cluster_exits_2_saying_so(still, tmp_path):
    """The plane's kubeconfig, its server moved to a port nothing listens on."""
    document = yaml.safe_load(still.kubeconfig.read_text())
    document["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    kubeconfig = tmp_path / "gone.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(document))
    env = invoke_env(tmp_path / "labs")
    args = ["--kubeconfig", str(kubeconfig), "--context", still.context]

    text = run_invoke("lab.doctor", *args, env=env)
    document = run_invoke("lab.doctor", *args, "--json", env=env)

    assert text.returncode == 2, text.stdout + text.stderr
    assert "could not check: the Kubernetes API at https://127.0.0.1:" in text.stdout
    assert "connection refused: nothing listens there" in text.stdout
    assert document.returncode == 2 and '"status": "could-not-check"' in document.stdout


# --- the rest of the catalogue, one small state each --------------------------------------------


def plugin_on(cluster: StaticCluster, node: str) -> dict:
    """The device-plugin pod on `node`."""
    pods = cluster.pods_of("nvidia-device-plugin-daemonset")
    return next(p for p in pods if p["spec"]["nodeName"] == node)


def gpu_dark(cluster: StaticCluster, node: str, allocatable: str | None = "0") -> None:
    """`node` advertises `allocatable` GPUs (None: no key) and its plugin is not ready."""

    def advertise(n: dict) -> None:
        for field in ("allocatable", "capacity"):
            n["status"][field].pop("nvidia.com/gpu")
            if allocatable is not None:
                n["status"][field]["nvidia.com/gpu"] = allocatable

    cluster.update(NODES, node, advertise)


def plugin_log(cluster: StaticCluster, node: str, log: str, state: dict | None = None) -> None:
    """The device plugin on `node` logs `log` (and is stuck in `state` when given)."""
    plugin = plugin_on(cluster, node)
    cluster.log(plugin, log)
    if state is not None:
        status = stuck_status("nvidia-device-plugin", state, "Running")
        cluster.update(PODS, plugin["metadata"]["name"], lambda p: p.update(status=status), NS)
        cluster.update(
            DAEMON_SETS,
            "nvidia-device-plugin-daemonset",
            lambda d: d["status"].update(numberReady=1),
            NS,
        )


def pending(cluster: StaticCluster, message: str, **spec) -> None:
    """A pod (no GPU asked) the scheduler turned away with `message`."""
    pod = cluster.pod(
        "web", "default", None, ["web"], image="nginx:1.27", spec=spec, status={"phase": "Pending"}
    )
    cluster.event(pod, "FailedScheduling", message)


def unbound_pvc(cluster: StaticCluster) -> None:
    pending(
        cluster,
        f"0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. {PREEMPTION}",
    )


def spread(cluster: StaticCluster) -> None:
    pending(
        cluster,
        "0/4 nodes are available: 2 node(s) didn't match pod topology spread "
        f"constraints, 2 node(s) had untolerated taint(s). {PREEMPTION}",
    )


def short_memory(cluster: StaticCluster) -> None:
    pending(cluster, f"0/4 nodes are available: 4 Insufficient memory. {PREEMPTION}")


def image_pull(cluster: StaticCluster) -> None:
    waiting = {
        "waiting": {
            "reason": "ImagePullBackOff",
            "message": 'Back-off pulling image "nvcr.io/nvidia/cuda:12.4.1-bse"',
        }
    }
    cluster.pod(
        "gpu-probe", "default", GPU_NODES[0], ["cuda"], status=stuck_status("cuda", waiting)
    )


def admission(cluster: StaticCluster) -> None:
    message = (
        "Pod was rejected: Allocate failed due to no healthy devices present; cannot "
        "allocate unhealthy devices nvidia.com/gpu, which is unexpected"
    )
    cluster.pod(
        "gpu-probe",
        "default",
        GPU_NODES[0],
        ["cuda"],
        status={"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": message},
    )


def not_ready(cluster: StaticCluster) -> None:
    cluster.update(
        NODES,
        GPU_NODES[0],
        lambda n: n["status"].update(
            conditions=[{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
        ),
    )


def no_operator(cluster: StaticCluster) -> None:
    cluster.delete(CLUSTER_POLICIES, "cluster-policy")
    for ds in cluster.still.api.list(DAEMON_SETS, NS)[0]:
        for pod in cluster.pods_of(ds["metadata"]["name"]):
            cluster.delete(PODS, pod["metadata"]["name"], NS)
        cluster.delete(DAEMON_SETS, ds["metadata"]["name"], NS)
    for node in GPU_NODES:
        gpu_dark(cluster, node, None)


def operator_crashing(cluster: StaticCluster) -> None:
    cluster.update(
        DEPLOYMENTS,
        "gpu-operator",
        lambda d: d["status"].update(readyReplicas=0, availableReplicas=0, unavailableReplicas=1),
        NS,
    )
    crash = {"waiting": {"reason": "CrashLoopBackOff"}}
    cluster.update(
        PODS,
        "gpu-operator-5798b5b564-xbq5h",
        lambda p: p.update(status=stuck_status("gpu-operator", crash, "Running")),
        NS,
    )
    cluster.update(
        NODES,
        GPU_NODES[1],
        lambda n: [
            n["metadata"]["labels"].pop(label)
            for label in ("nvidia.com/gpu.present", "nvidia.com/gpu.deploy.device-plugin")
        ],
    )


def config_missing(cluster: StaticCluster) -> None:
    gpu_dark(cluster, GPU_NODES[0])
    plugin_log(
        cluster,
        GPU_NODES[0],
        "config-manager-init: E0723 main.go:188] Error: specified "
        "config nvidia-sharing does not exist\n",
        {"waiting": {"reason": "CrashLoopBackOff"}},
    )


def not_registered(cluster: StaticCluster) -> None:
    gpu_dark(cluster, GPU_NODES[0], None)
    plugin_log(
        cluster,
        GPU_NODES[0],
        "E0723 server.go:205] Could not register device plugin: "
        "context deadline exceeded\nE0723 main.go:370] Failed to start one or more "
        "plugins. Retrying in 30s...\n",
    )


def nvml_crash(cluster: StaticCluster) -> None:
    gpu_dark(cluster, GPU_NODES[0])
    plugin_log(
        cluster,
        GPU_NODES[0],
        "E0723 factory.go:112] Failed to initialize NVML: "
        "ERROR_LIBRARY_NOT_FOUND.\nE0723 main.go:132] error starting plugins: error "
        "creating plugin manager: nvml init failed: ERROR_LIBRARY_NOT_FOUND\n",
        {"waiting": {"reason": "CrashLoopBackOff"}},
    )


def no_devices(cluster: StaticCluster) -> None:
    gpu_dark(cluster, GPU_NODES[0], None)
    plugin_log(
        cluster,
        GPU_NODES[0],
        "I0723 main.go:279] Retrieving plugins.\n"
        "I0723 factory.go:31] No devices found. Waiting indefinitely.\n",
    )


def workload_blocked(cluster: StaticCluster) -> None:
    crash_loop_validator(
        cluster,
        'plugin-validation time="2026-07-23T04:12:09Z" level=info '
        'msg="gave up waiting for pod nvidia-cuda-validator-8x2kq to be '
        'available"\n',
    )


CATALOGUE_STATES = {
    unbound_pvc: ("pod-unbound-pvc", "pod has unbound immediate PersistentVolumeClaims"),
    spread: ("pod-topology-spread", "didn't match pod topology spread constraints"),
    short_memory: ("pod-insufficient-resource", "4 Insufficient memory"),
    image_pull: ("pod-image-pull", "ImagePullBackOff: Back-off pulling image"),
    admission: ("pod-admission-rejected", "Allocate failed due to no healthy devices"),
    not_ready: ("gpu-node-not-ready", "NotReady"),
    no_operator: ("operator-not-installed", "clusterpolicies.nvidia.com LIST = no objects"),
    operator_crashing: ("operator-not-running", "spec.replicas 1, 0/1 available"),
    config_missing: ("device-plugin-config-missing", "specified config nvidia-sharing"),
    not_registered: ("device-plugin-registration-failed", "Could not register device plugin"),
    nvml_crash: ("nvml-init-failed", "nvml init failed: ERROR_LIBRARY_NOT_FOUND"),
    no_devices: ("no-devices-found", "No devices found. Waiting indefinitely."),
    workload_blocked: ("validator-workload-blocked", "gave up waiting for pod"),
}


@pytest.mark.parametrize("state", CATALOGUE_STATES, ids=lambda s: s.__name__)
def test_each_finding_is_the_probable_cause_of_its_state(cluster, state):
    state(cluster)
    name, seen = CATALOGUE_STATES[state]

    report = cluster.examine()
    diagnosed(report)

    cause = report.probable_cause
    assert cause is not None and cause.name == name, [r.finding.name for r in report.ranked]
    assert seen in values(cause) + cause.summary, values(cause)
    assert report.exit_code == 1
