"""EKS managed node groups: EC2 instances and Kubernetes Nodes follow each group's desiredSize.

It reads moto's EKS API when the world's AWS endpoint reports an EKS write (`wake`), when
a boot or drain falls due, and on the controllers' slow resync; it never polls. The group's
desiredSize is held to [minSize, maxSize], as EKS enforces it (moto accepts desiredSize >
maxSize). Instances of a node group that is gone (deleted, or its cluster deleted) are
drained and terminated, as EKS does when it deletes a node group.
Scale-up launches an instance in the group's subnet at once; after the boot delay (~5.5 min
real) its node comes up as `Machines` runs it: registered Ready by the world's model, or a real
kubelet that registers it NotReady and turns Ready once aws-node has brought its network up.
Scale-down cordons the node, and after the terminate delay stops it, removes its pods and the
Node and terminates the instance. An instance terminated from
outside (`aws ec2 terminate-instances`) loses its Node and pods as the cloud node lifecycle
controller removes them, and the group launches a replacement. Nodes carry the group's labels
and taints; a modelled GPU node NFD's `pci-10de.present` label too, as it would once NFD has
looked at it (on real kubelets, real NFD labels it). Once a group's nodes match its size, its
EKS updates are Successful.
Each instance is listed in its group's Auto Scaling group as Pending while it boots,
InService once its Node joins and Terminating while it drains, as `aws autoscaling` shows.
A node the model registers gets its kubelet's `NodeReady` Event (referring to the node by name,
as kubelet does); kube-controller-manager records `RegisteredNode` and `RemovingNode` itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from labs.kube.gpu import NVIDIA_PCI_LABEL
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import NODES, PODS, KubeApiError, NotFound, now_rfc3339
from labs.sim.aws.answers import list_instance
from labs.sim.aws.eks_updates import UpdateLedger
from labs.sim.aws.seed import ACCOUNT_ID, AMI_NAMES, aux_sg_name, node_sg_name, tag_value
from labs.sim.controllers.base import Controller
from labs.sim.controllers.events import EventRecorder
from labs.sim.node.gpu_faults import HARDWARE_CONDITION, HEALTHY_MESSAGE, HEALTHY_REASON
from labs.sim.node.hardware import (
    AMI_OS_IMAGE,
    DEFAULT_RUNTIME_ANNOTATION,
    DEFAULT_RUNTIMES,
    INSTANCE_TYPE_LABEL,
    MAX_PODS,
    gpus_on,
    node_name_for_ip,
    shape,
)
from labs.sim.timings import Timings

NODEGROUP_TAG = "eks:nodegroup-name"
KUBELET_PORT = 10250
LEFTOVER_RETRY_SECONDS = 1.0
_TAINT_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}


class NodeLifecycle(Controller):
    """Keeps instances and Nodes of every node group of one cluster at desiredSize."""

    def __init__(
        self,
        store: InformedKubeApi,
        timings: Timings,
        clients: Callable[[str], Any],
        cluster: str,
        region: str,
        updates: UpdateLedger,
        machines: Machines,
    ) -> None:
        super().__init__(store, timings)
        self._machines = machines
        self._updates = updates
        self._ec2 = clients("ec2")
        self._eks = clients("eks")
        self._cluster = cluster
        self._region = region
        self._booting: dict[str, tuple[float, dict, dict]] = {}
        self._draining: dict[str, tuple[float, str]] = {}
        # Nodes of terminated instances the API server did not let us remove yet
        self._leftover: set[str] = set()

    def reconcile(self) -> float | None:
        return self._pass(instantly=False)

    def converge_instantly(self) -> None:
        """Bring every group to its size with no boot delay (the state after terraform apply)."""
        self._pass(instantly=True)

    def _pass(self, instantly: bool) -> float | None:
        now = time.monotonic()
        self._remove_leftovers()
        instances = self._instances()
        self._forget_terminated(instances)
        names = self._group_names()
        for name in names:
            updates = self._updates.in_progress(self._cluster, name)  # before the description
            group = self._eks.describe_nodegroup(clusterName=self._cluster, nodegroupName=name)
            # The pace is read after the group: a size a program set after changing the pace
            # boots at that pace, even when this pass began before the change.
            boot_delay = 0.0 if instantly else self.timings.node_boot
            mine = [i for i in instances if tag_value(i, NODEGROUP_TAG) == name]
            self._follow(group["nodegroup"], mine, now, boot_delay)
            if self._settled(mine, _bounded_desired(group["nodegroup"]["scalingConfig"])):
                self._updates.settle(updates)
        for instance in instances:
            if tag_value(instance, NODEGROUP_TAG) not in names:
                self._scale_in(instance, now)
        if self._finish_due(now):
            return 0.0  # a node joined or left: the next pass sees whether its group settled
        due = [at for at, *_ in self._booting.values()] + [at for at, _ in self._draining.values()]
        if self._leftover:
            due.append(now + LEFTOVER_RETRY_SECONDS)
        return min((at - now for at in due), default=None)

    def _forget_terminated(self, instances: list[dict]) -> None:
        """Nodes whose instance was terminated from outside go, with their pods (as the cloud
        node lifecycle controller deletes a Node whose instance is gone); their group, one
        instance short, launches a replacement in the same pass."""
        running = {i["InstanceId"] for i in instances}
        changing = self._booting.keys() | self._draining.keys()
        for node in self.store.list(NODES)[0]:
            provider = (node.get("spec") or {}).get("providerID") or ""
            instance_id = provider.rsplit("/", 1)[-1]
            if not provider.startswith("aws:///") or instance_id in running | changing:
                continue
            self._list(instance_id, None)
            self._leftover.add(node["metadata"]["name"])
        self._remove_leftovers()

    def _group_names(self) -> list[str]:
        """The cluster's node groups now; none once the cluster itself is gone."""
        from botocore.exceptions import ClientError

        try:
            return list(self._eks.list_nodegroups(clusterName=self._cluster)["nodegroups"])
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return []
            raise

    def _follow(self, group: dict, instances: list[dict], now: float, boot_delay: float) -> None:
        desired = _bounded_desired(group["scalingConfig"])
        active = [i for i in instances if i["InstanceId"] not in self._draining]
        for instance in active:
            if instance["InstanceId"] not in self._booting and not self._node_exists(instance):
                self._booting[instance["InstanceId"]] = (now + boot_delay, instance, group)
        for _ in range(desired - len(active)):
            instance = self._launch(group, len(instances))
            self._list(
                instance["InstanceId"],
                "Pending",
                group["resources"]["autoScalingGroups"][0]["name"],
            )
            instances.append(instance)
            self._booting[instance["InstanceId"]] = (now + boot_delay, instance, group)
        surplus = len(active) - desired
        if surplus > 0:
            newest_first = sorted(active, key=lambda i: i["LaunchTime"], reverse=True)
            booting_first = sorted(newest_first, key=lambda i: i["InstanceId"] not in self._booting)
            for instance in booting_first[:surplus]:
                self._scale_in(instance, now)

    def _settled(self, instances: list[dict], desired: int) -> bool:
        """The group runs `desired` instances, none still booting or draining."""
        changing = self._booting.keys() | self._draining.keys()
        return len(instances) == desired and not any(i["InstanceId"] in changing for i in instances)

    def _instances(self) -> list[dict]:
        reservations = self._ec2.describe_instances(
            Filters=[
                {"Name": "tag:eks:cluster-name", "Values": [self._cluster]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )["Reservations"]
        return [i for r in reservations for i in r["Instances"]]

    def _launch(self, group: dict, ordinal: int) -> dict:
        ami_kind = "nvidia" if "NVIDIA" in group["amiType"] else "standard"
        images = self._ec2.describe_images(
            Filters=[{"Name": "name", "Values": [AMI_NAMES[ami_kind]]}]
        )["Images"]
        groups = self._ec2.describe_security_groups(
            Filters=[
                {
                    "Name": "group-name",
                    "Values": [node_sg_name(self._cluster), aux_sg_name(self._cluster)],
                }
            ]
        )["SecurityGroups"]
        subnets = group["subnets"]
        tags = {
            NODEGROUP_TAG: group["nodegroupName"],
            "eks:cluster-name": self._cluster,
            f"kubernetes.io/cluster/{self._cluster}": "owned",
            "Name": group["nodegroupName"],
        }
        return self._ec2.run_instances(
            ImageId=images[0]["ImageId"],
            MinCount=1,
            MaxCount=1,
            InstanceType=group["instanceTypes"][0],
            SubnetId=subnets[ordinal % len(subnets)],
            SecurityGroupIds=[g["GroupId"] for g in groups],
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        )["Instances"][0]

    def _scale_in(self, instance: dict, now: float) -> None:
        instance_id = instance["InstanceId"]
        if instance_id in self._draining:
            return
        if self._booting.pop(instance_id, None) is not None:
            self._terminate(instance_id)
            return
        name = self._node_name(instance)
        try:
            self.store.update(NODES, name, _cordon)
        except KubeApiError:  # gone, or an API server that does not answer: EKS goes on anyway
            pass
        self._draining[instance_id] = (now + self.timings.node_terminate, name)
        self._list(instance_id, "Terminating")

    def _finish_due(self, now: float) -> bool:
        """Join the booted nodes and remove the drained ones; whether any was due."""
        booted = [i for i, (at, *_) in self._booting.items() if at <= now]
        drained = [i for i, (at, _) in self._draining.items() if at <= now]
        for instance_id in booted:
            _, instance, group = self._booting.pop(instance_id)
            subnet = self._ec2.describe_subnets(SubnetIds=[instance["SubnetId"]])["Subnets"][0]
            self._machines.boot(build_node(instance, group, self._region), subnet["CidrBlock"])
            self._list(instance_id, "InService")
        for instance_id in drained:
            _, name = self._draining.pop(instance_id)
            self._terminate(instance_id)  # the instance goes whatever Kubernetes says
            self._leftover.add(name)
        self._remove_leftovers()
        return bool(booted or drained)

    def _terminate(self, instance_id: str) -> None:
        """Terminating in its group first: moto's Auto Scaling replaces an instance still
        InService when EC2 terminates it (as for one terminated by hand), so a scale-in
        without it would launch a new instance for every one it ends."""
        self._list(instance_id, "Terminating")
        self._ec2.terminate_instances(InstanceIds=[instance_id])
        self._list(instance_id, None)

    def _list(self, instance_id: str, state: str | None, group_name: str = "") -> None:
        """The instance's state in its group's Auto Scaling group, as `aws autoscaling` shows it."""
        list_instance(ACCOUNT_ID, self._region, instance_id, state, group_name)

    def _remove_leftovers(self) -> None:
        """Remove the Nodes of terminated instances; one the API server refuses now stays listed
        for the next pass (a stopped API server must not keep instances billing)."""
        for name in sorted(self._leftover):
            try:
                self._remove_node(name)
            except KubeApiError:
                continue
            self._leftover.discard(name)

    def _remove_node(self, name: str) -> None:
        """The terminated instance's Node goes first, then its pods (as the cloud controller
        deletes the Node and the pod garbage collector its orphans): deleted the other way
        round, the DaemonSet controller re-creates each operand pod on the still-listed node,
        and the operands count an unavailable pod until the node is gone."""
        self._machines.halt(name)
        pods, _ = self.store.list(PODS, field_selector=f"spec.nodeName={name}")
        try:
            self.store.delete(NODES, name)
        except NotFound:
            pass
        for pod in pods:
            try:
                meta = pod["metadata"]
                self.store.delete(PODS, meta["name"], meta["namespace"], grace_seconds=0)
            except NotFound:
                pass

    def _node_name(self, instance: dict) -> str:
        return node_name_for_ip(instance["PrivateIpAddress"], self._region)

    def _node_exists(self, instance: dict) -> bool:
        return self._machines.running(self._node_name(instance))


class Machines(Protocol):
    """What runs a booted instance's Node: the world's model of its kubelet (`RegisteredNodes`)
    or the real kubelet (`labs.sim.node.kubelet.KubeletNodes`)."""

    def boot(self, node: dict, subnet: str) -> None:
        """Bring up the instance's node, `node` as the node group registers it, its pods'
        addresses in `subnet`."""

    def running(self, name: str) -> bool: ...

    def halt(self, name: str) -> None:
        """The instance is gone: its node stops (its Node and pods are removed after)."""

    def switch_os(self, name: str, family: str) -> None:
        """The node's AMI family switched in place (`labs.sim.node.node_os`)."""

    def stop(self) -> None:
        """The world stops: every node stops with it."""


class RegisteredNodes:
    """The world's model: the Node created with its status as the kubelet registers one, and
    the kubelet's `NodeReady` Event (the world's kubelet controller runs its pods)."""

    def __init__(self, store: InformedKubeApi) -> None:
        self._store = store
        self._kubelet = EventRecorder(store, "kubelet")

    def boot(self, node: dict, subnet: str) -> None:
        # capacity and allocatable set at once: a Node without them fails every DaemonSet pod
        # the controller makes for it with `Insufficient cpu, Too many pods`; a GPU with the
        # label NFD gives it once it has looked (real NFD runs on real kubelets)
        if gpus_on(node):
            node = {**node, "metadata": {**node["metadata"]}}
            node["metadata"]["labels"] = {**node["metadata"]["labels"], NVIDIA_PCI_LABEL: "true"}
        created = self._store.create(NODES, node)
        name = created["metadata"]["name"]
        by_name = {**created, "metadata": {**created["metadata"], "uid": name}}
        self._kubelet.record(by_name, "NodeReady", f"Node {name} status is now: NodeReady",
                             host=name)  # fmt: skip

    def running(self, name: str) -> bool:
        try:
            self._store.get(NODES, name)
        except NotFound:
            return False
        return True

    def halt(self, name: str) -> None:
        """Nothing runs for a modelled node but its Node."""

    def switch_os(self, name: str, family: str) -> None:
        """The Node's mark and status are the whole modelled node."""

    def stop(self) -> None:
        """The Nodes go with the control plane."""


def _bounded_desired(scaling: dict) -> int:
    """desiredSize held to [minSize, maxSize]: EKS never runs more than maxSize (moto would)."""
    desired = scaling["desiredSize"]
    return max(scaling.get("minSize", 0), min(desired, scaling.get("maxSize", desired)))


def _cordon(node: dict) -> None:
    spec = node.setdefault("spec", {})
    spec["unschedulable"] = True
    taints = spec.setdefault("taints", [])
    unschedulable = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    if unschedulable not in taints:
        taints.append(unschedulable | {"timeAdded": now_rfc3339()})


def build_node(instance: dict, group: dict, region: str) -> dict:
    """The Node object EKS would register for `instance` of managed node group `group`."""
    instance_type = instance["InstanceType"]
    machine = shape(instance_type)
    zone = instance["Placement"]["AvailabilityZone"]
    ip = instance["PrivateIpAddress"]
    name = node_name_for_ip(ip, region)
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "eks.amazonaws.com/capacityType": group.get("capacityType", "ON_DEMAND"),
        "eks.amazonaws.com/nodegroup": group["nodegroupName"],
        "eks.amazonaws.com/nodegroup-image": instance["ImageId"],
        "failure-domain.beta.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        INSTANCE_TYPE_LABEL: instance_type,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
        **(group.get("labels") or {}),
    }
    taints = [
        {"key": t["key"], "value": t.get("value", ""), "effect": _TAINT_EFFECTS[t["effect"]]}
        for t in group.get("taints") or []
    ]
    resources = {"cpu": machine.cpu, "memory": machine.memory, "pods": MAX_PODS}
    stamp = now_rfc3339()
    conditions = [
        _condition(kind, "False", reason, message, stamp)
        for kind, reason, message in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(
        _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", stamp)
    )
    if machine.gpus:  # the node monitoring agent add-on's GPU condition
        conditions.append(
            _condition(HARDWARE_CONDITION, "True", HEALTHY_REASON, HEALTHY_MESSAGE, stamp)
        )
    return {
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": ip,
                DEFAULT_RUNTIME_ANNOTATION: DEFAULT_RUNTIMES.get(group["amiType"], "runc"),
            },
        },
        "spec": {"providerID": f"aws:///{zone}/{instance['InstanceId']}", "taints": taints},
        "status": {
            "capacity": resources | {"ephemeral-storage": "104845292Ki"},
            "allocatable": {
                "cpu": machine.allocatable_cpu,
                "memory": machine.allocatable_memory,
                "pods": MAX_PODS,
                "ephemeral-storage": "95551679124",
            },
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://2.2.4",
                "kernelVersion": "6.12.40-63.114.amzn2023.x86_64",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.35.0-eks-3cfe0ce",
                "operatingSystem": "linux",
                "osImage": AMI_OS_IMAGE,
                "machineID": instance["InstanceId"].replace("i-", "ec2"),
                "systemUUID": instance["InstanceId"].replace("i-", "ec2"),
                "bootID": instance["InstanceId"],
            },
        },
    }


def _condition(kind: str, status: str, reason: str, message: str, stamp: str) -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
