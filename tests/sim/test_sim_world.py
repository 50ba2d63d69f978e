"""The rehearsal world end to end on one world with the lab's GPU Operator, driven only through
boto3 (moto), the aws CLI, kubectl and the kubernetes client; each test starts with no GPU node."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lab_support import node_group_instances
from sim_support import TEST_SPEED, kube, lab_variables, probe_pod, running_world, wait_for
from tool_support import require_tool, require_venv_tool

from labs.sim import pace
from labs.sim.aws.seed import moto_clients
from labs.sim.controllers.node_lifecycle import NodeLifecycle
from labs.sim.infra import SimInfra
from labs.sim.world import World

GPU_LABEL = "node.kubernetes.io/instance-type=g5.xlarge"
NOT_AVAILABLE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


@pytest.fixture(scope="module")
def operator_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One world for the tests that scale GPU nodes, with the lab's GPU Operator applied."""
    for world in running_world(tmp_path_factory.mktemp("world")):
        SimInfra(world.endpoints).apply(lab_variables(enable_gpu_operator=True))
        yield world


@pytest.fixture
def world(operator_world: World) -> World:
    """The module's world with no GPU node, as lab.up finds a new lab's before it scales."""
    scale_gpu(operator_world, 0)
    core = client.CoreV1Api(kube(operator_world))
    wait_for(
        lambda: (
            not gpu_instances(operator_world) and not core.list_node(label_selector=GPU_LABEL).items
        ),
        what="no GPU node or instance left",
    )
    return operator_world


def eks_client(world: World):
    return moto_clients(world.endpoints)("eks")


def scale_gpu(world: World, desired: int, max_size: int = 2) -> str:
    """Scale the GPU group as lab.scale does; the id of the update EKS started."""
    return eks_client(world).update_nodegroup_config(
        clusterName="myeks",
        nodegroupName="myeks-ng-gpu",
        scalingConfig={"minSize": 0, "maxSize": max_size, "desiredSize": desired},
    )["update"]["id"]


def update_status(world: World, update_id: str) -> str:
    return eks_client(world).describe_update(
        name="myeks", updateId=update_id, nodegroupName="myeks-ng-gpu"
    )["update"]["status"]


def gpu_nodes_once_successful(world: World, core: client.CoreV1Api, update_id: str) -> int:
    """How many GPU nodes exist when EKS first reports the update Successful."""
    wait_for(lambda: update_status(world, update_id) == "Successful", what="update Successful")
    return len(core.list_node(label_selector=GPU_LABEL).items)


def gpu_instances(world: World) -> list[dict]:
    ec2 = moto_clients(world.endpoints)("ec2")
    reservations = ec2.describe_instances(
        Filters=[
            {"Name": "instance-type", "Values": ["g5.xlarge"]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]
    return [instance for r in reservations for instance in r["Instances"]]


def gpu_allocatable(core: client.CoreV1Api) -> list:
    nodes = core.list_node(label_selector=GPU_LABEL).items
    return [(n.status.allocatable or {}).get("nvidia.com/gpu") for n in nodes]


def test_gpu_nodes_follow_the_node_group(world: World) -> None:
    core = client.CoreV1Api(kube(world))
    try:
        _scale_up_and_down(world, core)
    finally:
        pace.write_speed(world.endpoints, TEST_SPEED)


def gpu_group_instances(world: World) -> dict[str, str]:
    """The GPU node group's Auto Scaling group's instances and their lifecycle states, as
    `aws autoscaling describe-auto-scaling-groups` lists them."""
    autoscaling = moto_clients(world.endpoints)("autoscaling")
    groups = autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
    return node_group_instances(groups, "myeks-ng-gpu")


def node_instance_ids(core: client.CoreV1Api) -> set[str]:
    """The instance ids in the GPU Nodes' provider ids (aws:///zone/i-...)."""
    nodes = core.list_node(label_selector=GPU_LABEL).items
    return {n.spec.provider_id.rsplit("/", 1)[-1] for n in nodes}


def system_daemonset_pods_failed_scheduling(core: client.CoreV1Api) -> list[str]:
    """FailedScheduling of kube-system's DaemonSet pods (aws-node, kube-proxy), which each
    joining node gets."""
    daemonsets = client.AppsV1Api(core.api_client).list_namespaced_daemon_set("kube-system")
    prefixes = tuple(f"{d.metadata.name}-" for d in daemonsets.items)
    events = core.list_namespaced_event("kube-system", field_selector="reason=FailedScheduling")
    return [f"{e.involved_object.name}: {e.message}" for e in events.items
            if e.involved_object.name.startswith(prefixes)]  # fmt: skip


def _scale_up_and_down(world: World, core: client.CoreV1Api) -> None:
    # At a person's pace a node boots in a real cluster's 5.5 minutes, so what the update and
    # the group read meanwhile is no race with a busy machine; instances still booting end at
    # once when the group goes back to 0.
    pace.write_speed(world.endpoints, 1)
    update = scale_gpu(world, 2)
    assert update_status(world, update) == "InProgress", "nodes take minutes to join"
    booting = wait_for(
        lambda: gpu_group_instances(world), what="the GPU instances in their Auto Scaling group"
    )
    assert set(booting.values()) == {"Pending"}, booting
    assert update_status(world, update) == "InProgress", booting
    assert gpu_nodes_once_successful(world, core, scale_gpu(world, 0)) == 0
    assert wait_for(lambda: gpu_instances(world) == [], what="the booting instances ended")
    # Then at a program's pace: EKS says Successful only once both nodes joined, and again only
    # once both are gone.
    pace.write_speed(world.endpoints, 60)
    assert gpu_nodes_once_successful(world, core, scale_gpu(world, 2)) == 2
    assert wait_for(lambda: gpu_allocatable(core) == ["1", "1"], what="2 GPU nodes with 1 GPU")
    listed = gpu_group_instances(world)
    assert set(listed) == node_instance_ids(core) and set(listed.values()) == {"InService"}
    # the kubelet registers its Node with capacity: no DaemonSet pod fails on a joining node
    assert system_daemonset_pods_failed_scheduling(core) == []
    for node in core.list_node(label_selector=GPU_LABEL).items:
        assert node.metadata.labels["tier"] == "gpu"
        assert node.metadata.labels["nvidia.com/gpu.present"] == "true"
        assert node.metadata.labels["topology.kubernetes.io/zone"] == "ap-northeast-2a"
        assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
            ("nvidia.com/gpu", "true", "NoSchedule")
        ]
    assert gpu_nodes_once_successful(world, core, scale_gpu(world, 0)) == 0
    # each Node goes first, then its instance is terminated: wait for the last termination
    assert wait_for(lambda: gpu_instances(world) == [], what="GPU instances terminated")
    assert gpu_group_instances(world) == {}


def lifecycle_of(world: World) -> NodeLifecycle:
    return next(c for c in world._controllers if isinstance(c, NodeLifecycle))


def in_lifecycle(lifecycle: NodeLifecycle) -> bool:
    """Whether this botocore hook runs in the node lifecycle controller's own pass."""
    return threading.current_thread().name == f"{lifecycle.name}-loop"


def passes_until_changed(
    lifecycle: NodeLifecycle, hooks: list[tuple[str, Callable[..., None], Any]], what: str
) -> list[str]:
    """Hook the controller's AWS calls (event, hook, client), wake it pass after pass until a
    hook has made its change (the update ids it appends to the list returned), then unhook."""
    changed: list[str] = []
    bound = [(event, functools.partial(hook, changed=changed), aws) for event, hook, aws in hooks]
    for event, hook, aws in bound:
        aws.meta.events.register(event, hook)

    def another_pass() -> list[str]:
        lifecycle.wake()
        return changed

    try:
        wait_for(another_pass, what=what)
    finally:
        for event, hook, aws in bound:
            aws.meta.events.unregister(event, hook)
    return changed


def test_a_size_set_after_a_pace_change_boots_at_the_new_pace_mid_pass(world: World) -> None:
    """A program speeds the world up and scales while the node lifecycle controller is half-way
    through a pass begun at a person's pace: the nodes boot at the program's pace (a pass that
    read the pace before the size booted them in 5.5 minutes and lab.up waited in vain)."""
    core = client.CoreV1Api(kube(world))
    lifecycle = lifecycle_of(world)
    passes: list[str] = []

    def pass_begins(changed: list[str], **_: object) -> None:  # its first AWS call
        if in_lifecycle(lifecycle):
            passes.append("began")

    def group_read(changed: list[str], **_: object) -> None:
        # the second pass that began since the pace went to 1 surely began at that pace
        if in_lifecycle(lifecycle) and len(passes) >= 2 and not changed:
            pace.write_speed(world.endpoints, TEST_SPEED)
            changed.append(scale_gpu(world, 1))

    pace.write_speed(world.endpoints, 1)
    try:
        changed = passes_until_changed(lifecycle, [
            ("before-call.ec2.DescribeInstances", pass_begins, lifecycle._ec2),
            ("before-call.eks.DescribeNodegroup", group_read, lifecycle._eks),
        ], "two node lifecycle passes at a person's pace")  # fmt: skip
    finally:
        pace.write_speed(world.endpoints, TEST_SPEED)
    assert gpu_nodes_once_successful(world, core, changed[0]) == 1


def test_an_update_made_after_the_pass_read_its_group_stays_in_progress(world: World) -> None:
    """A program scales up just after the node lifecycle controller read the group at 0 and
    before it settled that group: EKS reports the new update Successful only once the nodes
    joined (a pass that settled every update in progress called it Successful at 0 nodes)."""
    core = client.CoreV1Api(kube(world))
    gpu_nodes_once_successful(world, core, scale_gpu(world, 0))
    lifecycle = lifecycle_of(world)

    def group_read(changed: list[str], parsed: dict, **_: object) -> None:
        at_zero = parsed["nodegroup"]["scalingConfig"]["desiredSize"] == 0
        if in_lifecycle(lifecycle) and at_zero and not changed:
            changed.append(scale_gpu(world, 2))

    changed = passes_until_changed(
        lifecycle,
        [("after-call.eks.DescribeNodegroup", group_read, lifecycle._eks)],
        "a node lifecycle pass that read the group at 0",
    )
    assert gpu_nodes_once_successful(world, core, changed[0]) == 2
    assert gpu_nodes_once_successful(world, core, scale_gpu(world, 0)) == 0


def test_desired_size_above_max_size_never_launches_more_than_max(world: World) -> None:
    core = client.CoreV1Api(kube(world))
    scale_gpu(world, 3, max_size=2)  # moto accepts it; EKS holds the group at maxSize
    wait_for(lambda: len(core.list_node(label_selector=GPU_LABEL).items) == 2, what="2 GPU nodes")
    # one pass launches every instance the group is short of, so a third would be here now
    assert len(gpu_instances(world)) == 2


def all_gpu_instances(world: World) -> list[dict]:
    """Every GPU instance the account ever ran, terminated ones too."""
    ec2 = moto_clients(world.endpoints)("ec2")
    found = ec2.describe_instances(Filters=[{"Name": "instance-type", "Values": ["g5.xlarge"]}])
    return [instance for r in found["Reservations"] for instance in r["Instances"]]


def test_an_instance_terminated_by_hand_is_replaced_once_and_scaling_to_zero_settles(
    world: World,
) -> None:
    """`aws ec2 terminate-instances` on a GPU node (the way gpu-xid-79 is mended), then the cost
    guard at once: the group replaces the instance once and scaling to 0 completes."""
    core = client.CoreV1Api(kube(world))
    gpu_nodes_once_successful(world, core, scale_gpu(world, 2))
    before = len(all_gpu_instances(world))
    victim = gpu_instances(world)[0]["InstanceId"]
    moto_clients(world.endpoints)("ec2").terminate_instances(InstanceIds=[victim])
    wait_for(lambda: len(gpu_instances(world)) == 2, what="a replacement of the terminated one")
    assert gpu_nodes_once_successful(world, core, scale_gpu(world, 0)) == 0
    assert wait_for(lambda: gpu_instances(world) == [], what="GPU instances terminated")
    launched = len(all_gpu_instances(world)) - before
    assert launched == 1, f"{launched} instances launched to replace one terminated by hand"


def kubectl(world: World, tmp_path: Path, *args: str) -> str:
    command = [require_tool("kubectl"), "--kubeconfig", str(world.kubeconfig_path)]
    command += ["--cache-dir", str(tmp_path / "kubectl-cache"), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def operator_pods(core: client.CoreV1Api) -> list:
    return core.list_namespaced_pod("gpu-operator", label_selector="app=gpu-operator").items


def test_kubectl_scales_the_operator_down_and_a_restarted_operator_logs_again(
    world: World, tmp_path: Path
) -> None:
    api = kube(world)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    first = wait_for(
        lambda: [p for p in operator_pods(core) if "step completed" in read_log(core, p)],
        what="operator logging its steps",
    )[0]
    scale = ("-n", "gpu-operator", "scale", "deploy", "gpu-operator")
    assert kubectl(world, tmp_path, *scale, "--replicas=0").strip() == (
        "deployment.apps/gpu-operator scaled"
    )
    wait_for(lambda: not operator_pods(core), what="operator pod gone")

    def scale_reading():
        return apps.read_namespaced_deployment_scale("gpu-operator", "gpu-operator")

    # the controller deletes the pod, then writes the Deployment's status
    wait_for(lambda: scale_reading().status.replicas == 0, what="the status counting 0 pods")
    reading = scale_reading()
    # the API server omits a zero spec.replicas of the scale subresource (omitempty)
    assert (reading.spec.replicas or 0, reading.status.replicas) == (0, 0)

    kubectl(world, tmp_path, *scale, "--replicas=1")
    restarted = wait_for(
        lambda: [
            p
            for p in operator_pods(core)
            if p.metadata.uid != first.metadata.uid
            and '"state:":"state-device-plugin"' in read_log(core, p)
        ],
        what="the new operator pod logging its steps",
    )[0]
    log = read_log(core, restarted).splitlines()
    # Go's automaxprocs on the container's /proc first (no CPU quota here), then NVIDIA's
    # controller itself: its version, then its states in its own order
    assert re.search(r" maxprocs: Leaving GOMAXPROCS=\d+: CPU quota undefined$", log[0]), log[0]
    assert json.loads(log[1])["msg"] == "version: v25.3.4, commit: d73a0086a6ba"
    steps = [json.loads(line)["state:"] for line in log if "step completed" in line]
    assert steps[:3] == ["pre-requisites", "state-operator-metrics", "state-driver"]
    assert "state-device-plugin" in steps


def read_log(core: client.CoreV1Api, pod) -> str:
    """The pod's log; empty while its kubelet has not started the container yet (a 400, as
    on a real cluster between the binding and the container's creation). The client answered
    None once for a pod just started (a fresh-clone run): read as nothing yet."""
    try:
        return core.read_namespaced_pod_log(pod.metadata.name, "gpu-operator") or ""
    except ApiException as error:
        if error.status == 400:
            return ""
        raise


def test_device_plugin_off_reference_scenario(world: World) -> None:
    api = kube(world)
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    scale_gpu(world, 2)
    wait_for(lambda: gpu_allocatable(core) == ["1", "1"], what="baseline allocatable")
    baseline_uid = apps.read_namespaced_daemon_set(
        "nvidia-device-plugin-daemonset", "gpu-operator"
    ).metadata.uid

    custom.patch_cluster_custom_object(
        "nvidia.com",
        "v1",
        "clusterpolicies",
        "cluster-policy",
        {"spec": {"devicePlugin": {"enabled": False}}},
    )

    def daemonset_gone() -> bool:
        try:
            apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", "gpu-operator")
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(daemonset_gone, what="device-plugin DaemonSet deleted")
    assert wait_for(lambda: gpu_allocatable(core) == ["0", "0"], what="allocatable 0")

    def policy_state() -> str:
        policy = custom.get_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy"
        )
        return (policy.get("status") or {}).get("state", "")

    # the reconcile that deleted the DaemonSet also writes the state: a disable stays ready
    assert wait_for(lambda: policy_state() == "ready", what="state written after the disable")
    operator_pod = core.list_namespaced_pod("gpu-operator", label_selector="app=gpu-operator")
    disabled = '"state:":"state-device-plugin","status":"disabled"'
    # that reconcile logs its steps last: the DaemonSet can be gone before the line is written
    wait_for(
        lambda: disabled in read_log(core, operator_pod.items[0]),
        what="the operator logging state-device-plugin disabled",
    )
    log = core.read_namespaced_pod_log(operator_pod.items[0].metadata.name, "gpu-operator")
    assert disabled in log

    core.create_namespaced_pod("default", probe_pod())

    def failed_scheduling() -> list:
        events = core.list_namespaced_event(
            "default", field_selector="involvedObject.name=gpu-probe,reason=FailedScheduling"
        ).items
        return events

    event = wait_for(failed_scheduling, what="FailedScheduling event")[0]
    assert event.type == "Warning"
    assert event.reporting_component == "default-scheduler"
    assert event.message.startswith(NOT_AVAILABLE)
    assert core.read_namespaced_pod("gpu-probe", "default").status.phase == "Pending"

    custom.patch_cluster_custom_object(
        "nvidia.com",
        "v1",
        "clusterpolicies",
        "cluster-policy",
        {"spec": {"devicePlugin": {"enabled": True}}},
    )
    wait_for(
        lambda: core.read_namespaced_pod("gpu-probe", "default").status.phase == "Succeeded",
        what="probe Succeeded",
    )
    recreated = apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", "gpu-operator")
    assert recreated.metadata.uid != baseline_uid
    log = core.read_namespaced_pod_log("gpu-probe", "default")
    assert log.splitlines()[0].startswith("GPU 0: NVIDIA A10G (UUID: GPU-")
    assert log.splitlines()[-1] == "NVIDIA A10G, 580.126.09, 23028 MiB"
    story = {
        e.reason: e
        for e in core.list_namespaced_event(
            "default", field_selector="involvedObject.name=gpu-probe"
        ).items
    }
    assert {"FailedScheduling", "Scheduled", "Pulled", "Created", "Started"} <= set(story)

    # kube-scheduler's events (events.k8s.io) carry eventTime, the kubelet's firstTimestamp
    def when(event):
        return event.first_timestamp or event.event_time

    assert when(story["FailedScheduling"]) <= when(story["Scheduled"])


def test_aws_cli_scales_the_world(world: World) -> None:
    aws_cli = require_venv_tool("aws")
    environment = dict(
        os.environ,
        AWS_ENDPOINT_URL=world.endpoints["aws_endpoint_url"],
        AWS_ACCESS_KEY_ID=world.endpoints["aws_access_key_id"],
        AWS_SECRET_ACCESS_KEY=world.endpoints["aws_secret_access_key"],
        AWS_DEFAULT_REGION="ap-northeast-2",
    )
    subprocess.run(
        [
            aws_cli,
            "eks",
            "update-nodegroup-config",
            "--cluster-name",
            "myeks",
            "--nodegroup-name",
            "myeks-ng-gpu",
            "--scaling-config",
            "minSize=0,maxSize=2,desiredSize=2",
        ],
        env=environment,
        check=True,
        capture_output=True,
        timeout=60,
    )
    core = client.CoreV1Api(kube(world))
    wait_for(lambda: len(core.list_node(label_selector=GPU_LABEL).items) == 2, what="2 GPU nodes")


def test_only_an_ec2_change_wakes_the_node_groups_not_their_own_reads(world: World) -> None:
    """EC2's query API POSTs reads too: a describe call must not wake the node-group controller
    (it reads EC2 on every pass, and would wake itself for ever, a core busy while idle), and a
    change (tagging an instance, as terminating one by hand) must."""
    woken: list[str] = []
    world._aws.on_write("/", lambda: woken.append("woken"))
    ec2 = moto_clients(world.endpoints)("ec2")
    reservations = ec2.describe_instances()["Reservations"]
    ec2.describe_subnets()
    assert woken == []
    instance = reservations[0]["Instances"][0]["InstanceId"]
    ec2.create_tags(Resources=[instance], Tags=[{"Key": "touched-by", "Value": "test"}])
    assert woken == ["woken"]
