"""A rehearsal world whose nodes run the real kubelet (`start_world(kubelets="real")`): the node
groups' instances become real nodes, aws-node brings each node's network up, scaling the GPU node
group starts and stops a kubelet, and the real GPU Operator runs as a pod whose operands bring
the GPU to the kubelet, as `kubectl` and the aws CLI's calls show.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane_support import kubectl_command, kubectl_on, processes
from lab_support import one_real_kubelet_lab
from scenario_support import own_world
from sim_support import wait_for

from labs.kube.gpu import (
    DCGM_EXPORTER_DAEMONSET,
    DEVICE_PLUGIN_DAEMONSET,
    GPU_NODE_LABELS,
    GPU_RESOURCE,
    OPERATOR_POD_SELECTOR,
)
from labs.settings import OPERATOR_NAMESPACE, REAL_KUBELETS
from labs.sim.aws.seed import gpu_node_group_name, moto_clients
from labs.sim.controlplane.build import NODE_RUNTIME
from labs.sim.controlplane.gpu_operator import release
from labs.sim.gpu_operator_release import VALUES_FILE, Helm
from labs.sim.node.gpu_faults import lose_gpu
from labs.sim.node.hardware import INSTANCE_SHAPES, gpu_uuid
from labs.sim.world import World

CLUSTER = "myeks"
CNI_READY = "Successfully copied CNI plugin binary and config file."


@dataclass
class RealWorld:
    world: World
    cache: Path

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        done = kubectl_on(self.world.kubeconfig_path, self.cache, *args, stdin=stdin)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def logs(self, *args: str) -> str:
        """`kubectl logs` in the operator's namespace; "" while there is nothing to show."""
        done = kubectl_on(self.world.kubeconfig_path, self.cache, "logs", "-n", OPERATOR_NAMESPACE,
                          *args)  # fmt: skip
        return done.stdout if done.returncode == 0 else ""

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def nodes(self) -> list[dict]:
        return self.json("get", "nodes")["items"]

    def aws(self, service: str) -> Any:
        return moto_clients(self.world.endpoints)(service)

    def instances(self) -> dict[str, dict]:
        """The cluster's running EC2 instances by private IP."""
        reservations = self.aws("ec2").describe_instances(
            Filters=[
                {"Name": "tag:eks:cluster-name", "Values": [CLUSTER]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )["Reservations"]
        return {i["PrivateIpAddress"]: i for r in reservations for i in r["Instances"]}

    def scale_gpus(self, size: int) -> None:
        self.aws("eks").update_nodegroup_config(
            clusterName=CLUSTER,
            nodegroupName=gpu_node_group_name(CLUSTER),
            scalingConfig={"minSize": 0, "maxSize": 2, "desiredSize": size},
        )


def ready(node: dict) -> bool:
    conditions = node["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def internal_ip(node: dict) -> str:
    return next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def world_runtimes(world: World, ip: str = "") -> list[str]:
    """The node runtime processes of this world's nodes (their state is under its directory),
    or of its node at `ip`."""
    home = str(world.kubeconfig_path.parent)
    return processes(
        lambda argv: (
            argv[0].endswith(f"/{NODE_RUNTIME}")
            and any(home in a for a in argv)
            and (not ip or f"--node-ip={ip}" in argv)
        )
    )


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealWorld]:
    home = tmp_path_factory.mktemp("real")
    with one_real_kubelet_lab():
        world = own_world(home / "w", speed=600, kubelets=REAL_KUBELETS)
        try:
            made = RealWorld(world, home / "kube-cache")
            wait_for(
                what="the system nodes turn Ready",
                check=lambda: len(nodes := made.nodes()) == 2 and all(ready(n) for n in nodes),
            )
            yield made
        finally:
            world.stop()


def test_every_instance_is_a_node_running_the_real_kubelet(real: RealWorld) -> None:
    """`kubectl get nodes -o wide`: the kubelet's own version and the instances' addresses;
    each Node's providerID names its EC2 instance."""
    wide = real.kubectl("get", "nodes", "-o", "wide")
    instances = real.instances()
    assert len(wide.splitlines()) == 1 + len(instances) == 3, wide
    for line in wide.splitlines()[1:]:
        assert " Ready " in line and "v1.35.4" in line and "containerd://2.2.4" in line, line
        assert any(f" {ip} " in line for ip in instances), line
    for node in real.nodes():
        instance = instances[internal_ip(node)]
        assert node["spec"]["providerID"].endswith(f"/{instance['InstanceId']}")
        capacity = INSTANCE_SHAPES[instance["InstanceType"]]
        assert node["status"]["capacity"]["cpu"] == capacity.cpu
        assert node["status"]["allocatable"]["memory"] == capacity.allocatable_memory
        assert len(world_runtimes(real.world, internal_ip(node))) == 1


def test_aws_node_brings_each_node_network_up(real: RealWorld) -> None:
    """The node is NotReady until aws-node writes its CNI configuration; its log says so."""
    logs = real.kubectl("logs", "-n", "kube-system", "ds/aws-node")
    assert CNI_READY in logs
    assert 'level=info msg="Checking for IPAM connectivity... "' in logs


def test_host_network_pods_have_the_node_ip_and_no_two_pods_share_one(real: RealWorld) -> None:
    pods = real.json("get", "pods", "-n", "kube-system")["items"]
    wait_for(
        what="kube-system's pods run",
        check=lambda: all(
            p["status"].get("phase") == "Running"
            for p in real.json("get", "pods", "-n", "kube-system")["items"]
        ),
    )
    pods = real.json("get", "pods", "-n", "kube-system")["items"]
    host_network = [p for p in pods if p["spec"].get("hostNetwork")]
    assert {p["metadata"]["labels"]["k8s-app"] for p in host_network} == {"aws-node", "kube-proxy"}
    for pod in host_network:
        assert pod["status"]["podIP"] == pod["status"]["hostIP"]
    others = [p["status"]["podIP"] for p in pods if not p["spec"].get("hostNetwork")]
    node_ips = {internal_ip(n) for n in real.nodes()}
    assert len(others) == len(set(others)) >= 2 and not set(others) & node_ips, others
    for pod in pods:
        subnet = ipaddress.ip_network(f"{pod['status']['hostIP']}/22", strict=False)
        assert ipaddress.ip_address(pod["status"]["podIP"]) in subnet


def test_gpu_node_group_scale_starts_and_stops_a_kubelet(real: RealWorld) -> None:
    """Desired 1: a g5.xlarge joins with the group's labels and taint (4 CPU, its memory);
    desired 0: its Node goes, its kubelet and runtime stop, its instance terminates."""
    real.scale_gpus(1)
    gpu = wait_for(
        what="the GPU node turns Ready",
        check=lambda: [n for n in real.nodes() if n["metadata"]["labels"].get("tier") and ready(n)],
    )[0]
    labels = gpu["metadata"]["labels"]
    assert GPU_NODE_LABELS.items() <= labels.items()
    assert labels["node.kubernetes.io/instance-type"] == "g5.xlarge"
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in [
        {k: t.get(k) for k in ("key", "value", "effect")} for t in gpu["spec"]["taints"]
    ]
    assert gpu["status"]["capacity"]["cpu"] == "4"
    assert gpu["status"]["capacity"]["memory"] == INSTANCE_SHAPES["g5.xlarge"].memory
    ip = internal_ip(gpu)
    assert len(world_runtimes(real.world, ip)) == 1
    real.scale_gpus(0)
    wait_for(what="the GPU node leaves", check=lambda: len(real.nodes()) == 2)
    wait_for(what="its runtime stops", check=lambda: not world_runtimes(real.world, ip), timeout=30)
    assert ip not in real.instances()


@pytest.fixture(scope="module")
def operator(real: RealWorld) -> RealWorld:
    """The GPU node up and the GPU Operator installed with the stack's values, by hand as the
    README says (`helm upgrade --install ... --no-hooks`), and its operands Ready."""
    real.scale_gpus(1)
    kubeconfig = yaml.safe_load(real.world.kubeconfig_path.read_text())
    Helm(kubeconfig).run(
        "upgrade", "--install", "gpu-operator", str(release().chart),
        "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
        "--values", str(VALUES_FILE), "--no-hooks",
    )  # fmt: skip
    wait_for(what="the ClusterPolicy is ready", check=lambda: policy(real) == "ready", timeout=240)
    return real


def policy(real: RealWorld) -> str:
    found = real.json("get", "clusterpolicies")["items"]
    return found[0].get("status", {}).get("state", "") if found else ""


def gpu_node(real: RealWorld) -> dict:
    return next(n for n in real.nodes() if n["metadata"]["labels"].get("tier") == "gpu")


def gpus(node: dict) -> tuple[str, str]:
    status = node["status"]
    return (
        status["capacity"].get(GPU_RESOURCE, "none"),
        status["allocatable"].get(GPU_RESOURCE, "none"),
    )


def operator_pods(real: RealWorld) -> list[dict]:
    return real.json("get", "pods", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_POD_SELECTOR)["items"]


def ready_operator(real: RealWorld) -> dict:
    """The operator's container status once its one pod is Ready, else {}."""
    pods = operator_pods(real)
    if len(pods) != 1:
        return {}
    (status,) = pods[0]["status"].get("containerStatuses") or [{}]
    return status if status.get("ready") else {}


def test_the_gpu_operator_is_a_real_pod_running_nvidias_operator(operator: RealWorld) -> None:
    # Ready once the kubelet's readiness probe reaches its health port on the pod's address
    status = wait_for(what="the operator's pod is Ready", check=lambda: ready_operator(operator))
    assert status["containerID"].startswith("containerd://") and status["restartCount"] == 0
    logs = operator.kubectl("logs", "-n", OPERATOR_NAMESPACE, "deploy/gpu-operator")
    assert '"msg":"version: v25.3.4' in logs


def test_the_operators_container_ends_on_sigterm_well_inside_its_grace_period(
    operator: RealWorld,
) -> None:
    """`kubectl delete pod` on the operator: its container ends once the operator has stopped,
    so the pod goes at once rather than when a long grace period runs out (its process once
    hung in its own SIGTERM handler until the runtime's SIGKILL); the Deployment's next pod
    comes up Ready."""
    (old,) = operator_pods(operator)
    name = old["metadata"]["name"]
    operator.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, name, "--grace-period=600",
                     "--wait=false")  # fmt: skip

    def gone() -> bool:
        return all(pod["metadata"]["name"] != name for pod in operator_pods(operator))

    wait_for(what="the deleted pod gone", check=gone, timeout=90)
    wait_for(what="the Deployment's next pod is Ready", check=lambda: ready_operator(operator),
             timeout=120)  # fmt: skip


def test_the_gpu_reaches_the_kubelet_after_the_validator_clears_the_driver(
    operator: RealWorld,
) -> None:
    """The validator's driver-validation leaves driver-ready on the node; the operator's
    device-plugin entrypoint waits for it, then the plugin registers with the kubelet, and the
    validator's workload pod gets the GPU."""
    wait_for(what="the GPU advertised", check=lambda: gpus(gpu_node(operator)) == ("1", "1"))
    plugin = operator.kubectl(
        "logs", "-n", OPERATOR_NAMESPACE, f"ds/{DEVICE_PLUGIN_DAEMONSET}", "-c",
        "nvidia-device-plugin",
    )  # fmt: skip
    assert "IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\n" in plugin
    assert "Starting nvidia-device-plugin" in plugin
    wait_for(
        what="the validator's workload pod succeeds",
        check=lambda: (
            "have run successfully"
            in operator.logs("ds/nvidia-operator-validator", "-c", "plugin-validation")
        ),
    )
    main = wait_for(
        what="the validator's own container runs",
        check=lambda: operator.logs("ds/nvidia-operator-validator"),
    )
    assert main == "all validations are successful\n"


def test_device_plugin_off_leaves_capacity_for_the_kubelets_grace_period(
    operator: RealWorld,
) -> None:
    """device-plugin-off: the operator removes the plugin's DaemonSet; the kubelet's device
    manager drops allocatable to 0 at once and keeps capacity (its 5-minute grace period)."""
    patch = '{"spec": {"devicePlugin": {"enabled": false}}}'
    operator.kubectl("patch", "clusterpolicy", "cluster-policy", "--type=merge", "-p", patch)
    try:
        wait_for(
            what="allocatable drops to 0", check=lambda: gpus(gpu_node(operator)) == ("1", "0")
        )
        daemonsets = operator.json("get", "daemonsets", "-n", OPERATOR_NAMESPACE)["items"]
        plugin_sets = [d for d in daemonsets if d["metadata"]["name"] == DEVICE_PLUGIN_DAEMONSET]
        selector = f"app={DEVICE_PLUGIN_DAEMONSET}"
        pods = operator.json("get", "pods", "-n", OPERATOR_NAMESPACE, "-l", selector)["items"]
        # the DaemonSet and its pod are gone or going: the plugin ended on its SIGTERM
        assert all(o["metadata"].get("deletionTimestamp") for o in [*plugin_sets, *pods])
    finally:
        on = '{"spec": {"devicePlugin": {"enabled": true}}}'
        operator.kubectl("patch", "clusterpolicy", "cluster-policy", "--type=merge", "-p", on)
    wait_for(what="the GPU comes back", check=lambda: gpus(gpu_node(operator)) == ("1", "1"))


def test_nfd_labels_each_node_from_its_pci_devices(operator: RealWorld) -> None:
    """The chart's Node Feature Discovery is the real one: its worker reads each node's PCI
    devices, its master labels the nodes, so the GPU node gets `pci-10de.present` (the label the
    operator schedules its operands by) and every Nitro node Amazon's `pci-1d0f.present`."""
    vendor = "feature.node.kubernetes.io/pci-{}.present"
    wait_for(
        what="NFD labels the GPU node",
        check=lambda: gpu_node(operator)["metadata"]["labels"].get(vendor.format("10de")) == "true",
    )
    for node in operator.nodes():
        labels = node["metadata"]["labels"]
        gpu = labels.get("tier") == "gpu"
        assert labels.get(vendor.format("1d0f")) == "true", labels
        assert (vendor.format("10de") in labels) == gpu, labels
    features = operator.json("get", "nodefeatures", "-n", OPERATOR_NAMESPACE)["items"]
    assert {f["metadata"]["name"] for f in features} == {
        n["metadata"]["name"] for n in operator.nodes()
    }
    worker = operator.logs("ds/gpu-operator-node-feature-discovery-worker")
    assert '"Node Feature Discovery Worker" version="v0.17.3"' in worker, worker[-2000:]


def test_gfd_labels_reach_the_gpu_node_through_nfd(operator: RealWorld) -> None:
    """GPU feature discovery writes its labels into NFD's features.d on the node; NFD's worker
    reads them on its next pass (every 60 s, real time, as on EKS) and its master labels the
    node, nvidia.com being one of the chart's extra label namespaces."""
    product = wait_for(
        what="GFD's labels on the GPU node",
        check=lambda: gpu_node(operator)["metadata"]["labels"].get("nvidia.com/gpu.product"),
        timeout=150,
    )
    assert product == "NVIDIA-A10G"
    labels = gpu_node(operator)["metadata"]["labels"]
    assert labels["nvidia.com/gpu.count"] == "1" and labels["nvidia.com/mig.capable"] == "false"
    gfd = operator.logs("ds/gpu-feature-discovery", "-c", "gpu-feature-discovery")
    assert (
        "Writing labels to output file /etc/kubernetes/node-feature-discovery/features.d/gfd" in gfd
    )


def test_dcgm_exporter_serves_its_nodes_gpu_metrics_on_its_pods_port(
    operator: RealWorld,
) -> None:
    """`kubectl port-forward` to the exporter's pod reaches its /metrics inside the pod's own
    network namespace: the GPU node's A10G, labelled by its UUID."""
    selector = f"app={DCGM_EXPORTER_DAEMONSET}"
    pod = wait_for(
        what="the exporter runs",
        check=lambda: [
            p
            for p in operator.json("get", "pods", "-n", OPERATOR_NAMESPACE, "-l", selector)["items"]
            if all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])
        ],
    )[0]
    command = [*kubectl_command(operator.world.kubeconfig_path, operator.cache), "port-forward",
               "-n", OPERATOR_NAMESPACE, f"pod/{pod['metadata']['name']}", ":9400"]  # fmt: skip
    forward = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()  # Forwarding from 127.0.0.1:PORT -> 9400
        port = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert port, line
        with urllib.request.urlopen(f"http://127.0.0.1:{port[1]}/metrics", timeout=10) as answer:
            page = answer.read().decode()
    finally:
        forward.terminate()
        forward.wait()
    uuid = gpu_uuid(pod["spec"]["nodeName"])
    assert re.search(rf'^DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{uuid}".*}} 26$', page, re.M), page
    # and by the pod's address, as Prometheus scrapes it: through the API server's pod proxy
    proxied = operator.kubectl(
        "get", "--raw",
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods/{pod['metadata']['name']}:9400/proxy/metrics",
    )  # fmt: skip
    assert proxied == page


def test_the_gpu_nodes_default_runtime_is_nvidias(operator: RealWorld) -> None:
    """missing-gpu-limit's trap: on the NVIDIA AMI containerd's default runtime is nvidia, so a
    CUDA container that asks for no GPU still sees the node's A10G (the image sets
    NVIDIA_VISIBLE_DEVICES=all); nothing is allocated to it."""
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-limit"},
        "spec": {
            "restartPolicy": "Never", "nodeSelector": {"tier": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                            "command": ["nvidia-smi", "-L"]}],
        },
    }  # fmt: skip
    operator.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    wait_for(
        what="the pod ends",
        check=lambda: (
            operator.json("get", "pod", "no-limit")["status"].get("phase")
            in ("Succeeded", "Failed")
        ),
    )
    assert operator.json("get", "pod", "no-limit")["status"]["phase"] == "Succeeded"
    assert operator.kubectl("logs", "no-limit").startswith("GPU 0: NVIDIA A10G (UUID: GPU-")
    assert gpus(gpu_node(operator)) == ("1", "1")


def test_a_gpu_off_the_bus_is_unhealthy_at_the_kubelet(operator: RealWorld) -> None:
    """gpu-xid-79: the device plugin sees the Xid (here the world's mark on the Node, as NVML
    tells the real one), logs it as k8s-device-plugin does and streams the device Unhealthy, so
    the kubelet keeps capacity 1 and drops allocatable to 0. Last of the GPU tests: the GPU
    stays lost until its node is replaced."""
    node = gpu_node(operator)
    name, uuid = node["metadata"]["name"], gpu_uuid(node["metadata"]["name"])
    lose_gpu(operator.world.endpoints, name, 79)
    wait_for(what="allocatable drops to 0", check=lambda: gpus(gpu_node(operator)) == ("1", "0"))
    plugin = operator.logs(f"ds/{DEVICE_PLUGIN_DAEMONSET}", "-c", "nvidia-device-plugin")
    assert (
        f"health.go:186] XidCriticalError: Xid=79 on Device={uuid}; marking device as "
        "unhealthy." in plugin
    ), plugin[-2000:]
    assert f"server.go:276] 'nvidia.com/gpu' device marked unhealthy: {uuid}" in plugin
    assert ready(gpu_node(operator))


def test_a_stopped_world_leaves_no_node_running(real: RealWorld) -> None:
    assert len(world_runtimes(real.world)) >= 2
    real.world.stop()
    wait_for(
        what="every node runtime ends", check=lambda: not world_runtimes(real.world), timeout=20
    )
