"""Every finding the doctor can report, by its stable name: stage, severity, meaning and fix.

Names are what `--json` reports and what a scenario declares as the finding that must be its
probable cause (`Scenario.doctor_finding`), so they never change meaning. Meanings and fixes
are templates a check fills in with the object's names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labs.doctor.model import DoctorFinding, Evidence, Link, LogRequest

UNKNOWN = "(unknown)"


@dataclass(frozen=True)
class Kind:
    """One kind of finding: where in the flowchart it sits, how bad it is, what it means."""

    name: str
    stage: str
    severity: str
    meaning: str
    fix: str

    def found(
        self,
        subject: str,
        summary: str,
        evidence: Sequence[Evidence],
        *,
        severity: str | None = None,
        confidence: str = "high",
        explains: Sequence[Link] = (),
        tags: Sequence[str] = (),
        read_logs: Sequence[LogRequest] = (),
        fields: Mapping[str, object] | None = None,
        **more: object,
    ) -> DoctorFinding:
        """A finding of this kind about `subject`; `fields` and `more` fill the meaning and fix
        templates (a name no check filled in reads "(unknown)")."""
        filled = _Fields({**(fields or {}), **more})
        return DoctorFinding(
            name=self.name,
            stage=self.stage,
            severity=severity or self.severity,
            confidence=confidence,
            subject=subject,
            summary=summary,
            evidence=tuple(evidence),
            meaning=self.meaning.format_map(filled),
            fix=self.fix.format_map(filled),
            explains=tuple(explains),
            tags=frozenset(tags),
            read_logs=tuple(read_logs),
        )


class _Fields(dict[str, object]):
    def __missing__(self, key: str) -> str:
        return UNKNOWN


def _kinds(*kinds: Kind) -> dict[str, Kind]:
    return {kind.name: kind for kind in kinds}


KINDS = _kinds(
    # --- pods: the Pending-pod triage table, first branch on the scheduler's message ----------
    Kind(
        "pod-untolerated-taint",
        "pods",
        "error",
        "the scheduler turns the pod away from the GPU nodes because of a taint it does not "
        "tolerate ({taints}); since Kubernetes 1.35 the message only says `had untolerated "
        "taint(s)`, so the pod's tolerations are compared with the nodes' taints here. GPU "
        "nodes carry nvidia.com/gpu=true:NoSchedule: every GPU pod needs its toleration",
        "add the toleration to the pod spec: tolerations: {tolerations} "
        "(kubectl get pod -n {namespace} {pod} -o yaml, edit, kubectl replace --force -f -)",
    ),
    Kind(
        "pod-insufficient-gpu",
        "pods",
        "error",
        "no node the pod may use has a free nvidia.com/gpu ({detail}); the system nodes are "
        "counted too, they have none",
        "free a GPU (kubectl get pods -A -o wide | grep <gpu node>) or add GPU nodes "
        "(aws eks update-nodegroup-config ... desiredSize=N; on a lab: invoke lab.scale N)",
    ),
    Kind(
        "pod-insufficient-resource",
        "pods",
        "warning",
        "the scheduler found too little {resources} on every node the pod may use",
        "lower the pod's requests or add nodes: kubectl describe pod -n {namespace} {pod}",
    ),
    Kind(
        "pod-selector-mismatch",
        "pods",
        "error",
        "no node carries the labels the pod selects ({selector}); GPU labels "
        "(nvidia.com/gpu.present, gpu.product, ...) come from the GPU Operator and GFD",
        "fix the pod's nodeSelector/affinity or the node labels: kubectl get nodes --show-labels",
    ),
    Kind(
        "pod-unbound-pvc",
        "pods",
        "error",
        "the pod waits for a PersistentVolumeClaim that is not bound",
        "kubectl get pvc -n {namespace}; check its StorageClass (EBS CSI driver installed? "
        "volumeBindingMode) and any PV it names",
    ),
    Kind(
        "pod-topology-spread",
        "pods",
        "warning",
        "the pod's topology spread constraints cannot be met on the nodes there are",
        "relax the spread rule (whenUnsatisfiable: ScheduleAnyway) or add nodes",
    ),
    Kind(
        "pod-unschedulable",
        "pods",
        "warning",
        "the scheduler gives reasons no GPU check explains: {message}",
        "kubectl describe pod -n {namespace} {pod}",
    ),
    Kind(
        "pod-image-pull",
        "pods",
        "error",
        "the image cannot be pulled ({reason}: {message})",
        "check the image name and tag and the pull credentials: kubectl describe pod -n "
        "{namespace} {pod}",
    ),
    Kind(
        "pod-admission-rejected",
        "pods",
        "error",
        "kubelet rejected the pod after scheduling ({message}): its device manager had no "
        "healthy GPU at admission, e.g. a device plugin that re-registered after a kubelet "
        "restart, or a GPU marked unhealthy",
        "look at the device plugin on that node (log, restarts) and re-create the pod",
    ),
    Kind(
        "mig-resource-unavailable",
        "pods",
        "error",
        "the pod asks for {resource}, a MIG slice; MIG exists only on A100/A30/H100-class GPUs "
        "and no node offers it (GPU nodes: {capable})",
        "request nvidia.com/gpu: 1 instead, or use MIG-capable instances (p4d, p5) with the "
        "operator's mig.strategy set",
    ),
    Kind(
        "runtimeclass-missing",
        "pods",
        "error",
        'RuntimeClass "{runtime_class}" does not exist (there are: {known}): the API rejects '
        'pods naming it (`pod rejected: RuntimeClass "{runtime_class}" not found`), so a '
        "controller never gets its pods created",
        "name an existing class (runtimeClassName: nvidia, which the GPU Operator creates) or "
        "none on nodes where nvidia is containerd's default runtime (the AL2023 NVIDIA AMI): "
        "kubectl get runtimeclass",
    ),
    Kind(
        "pod-without-gpu-limit",
        "pods",
        "warning",
        "the pod wants a GPU ({why}) but sets no nvidia.com/gpu limit: the scheduler does not "
        "count it and the device plugin mounts no /dev/nvidia*, so NVML fails (`Failed to "
        "initialize NVML: Unknown Error`); with nvidia as containerd's default runtime and "
        "NVIDIA_VISIBLE_DEVICES=all in the image it may instead see every GPU behind the "
        "scheduler's back",
        "set resources.limits nvidia.com/gpu: 1 on the container that uses the GPU",
    ),
    # --- nodes: allocatable and capacity, labels, taints ---------------------------------------
    Kind(
        "gpu-nodes-scaled-to-zero",
        "nodes",
        "error",
        "no GPU node exists{nodegroup}, so every GPU pod waits; a node group at 0 is a lab's "
        "idle state (new nodes take ~5-6 min to join)",
        "scale it up: aws eks update-nodegroup-config --cluster-name {cluster} --nodegroup-name "
        "{group} --scaling-config minSize=0,maxSize=2,desiredSize=2 (on a lab: invoke lab.scale 2)",
    ),
    Kind(
        "gpu-node-not-ready",
        "nodes",
        "error",
        "the GPU node is {state}: the scheduler places nothing there",
        "kubectl describe node {node} (its conditions); cordoned: kubectl uncordon {node}",
    ),
    Kind(
        "gpu-allocatable-zero",
        "nodes",
        "error",
        "the node keeps the nvidia.com/gpu key with allocatable 0: the device plugin stopped "
        "advertising (allocatable drops at once, capacity follows after 5 minutes, the key never "
        "goes, so absent()-based alerts miss it; system nodes have no key at all)",
        "see what explains it; the node's GPU pods: kubectl get pods -A -o wide "
        "--field-selector spec.nodeName={node}",
    ),
    Kind(
        "gpu-not-advertised",
        "nodes",
        "error",
        "a GPU node without the nvidia.com/gpu key: no device plugin ever registered on it",
        "see what explains it: is a device plugin DaemonSet there and admitted on this node?",
    ),
    Kind(
        "gpu-allocatable-below-capacity",
        "nodes",
        "warning",
        "allocatable {allocatable} < capacity {capacity}: kubelet counts a GPU unhealthy (an "
        "XID), or the plugin just went away (capacity follows within 5 minutes)",
        "read the device plugin's log on {node}",
    ),
    Kind(
        "deploy-label-false",
        "nodes",
        "error",
        "{label}=false opts this node out of the {component} DaemonSet; the operator adds the "
        "label only where it is missing, so a false set by hand or by automation stays",
        "kubectl label node {node} {label}=true --overwrite",
    ),
    Kind(
        "gpu-node-taint-not-tolerated",
        "nodes",
        "error",
        "taint {taint} on the GPU node is not tolerated by {operands}: the DaemonSet controller "
        "runs no operand pod there (NoExecute also evicts the running ones), so the node stays "
        "Ready with 0 GPUs and the ClusterPolicy stays ready",
        "kubectl taint node {node} {key}:{effect}- ; or, if GPUs must work on tainted nodes, add "
        '{{"key":"{key}","operator":"Exists","effect":"{effect}"}} to ClusterPolicy '
        "spec.daemonsets.tolerations (keep the nvidia.com/gpu one)",
    ),
    Kind(
        "gpu-labels-missing",
        "nodes",
        "warning",
        "NFD found an NVIDIA GPU (pci-10de) but the operator's labels ({missing}) are missing: "
        "the operator has not labelled the node, so no operand is scheduled there",
        "kubectl -n {namespace} get deploy gpu-operator; kubectl -n {namespace} logs "
        "deploy/gpu-operator --tail=50",
    ),
    # --- operand DaemonSets --------------------------------------------------------------------
    Kind(
        "operand-daemonset-missing",
        "operands",
        "error",
        "the ClusterPolicy enables {component} but DaemonSet {daemonset} does not exist; the "
        "operator deletes it only for a disabled component and re-creates it within seconds",
        "kubectl -n {namespace} get deploy gpu-operator; kubectl -n {namespace} logs "
        "deploy/gpu-operator --tail=100",
    ),
    Kind(
        "operand-not-ready",
        "operands",
        "error",
        "{daemonset}: {ready} of {desired} pods ready (not ready: {pods})",
        "kubectl -n {namespace} describe pod {pod}; kubectl -n {namespace} logs {pod} "
        "--all-containers --tail=100",
    ),
    Kind(
        "operand-missing-on-gpu-nodes",
        "operands",
        "error",
        "{daemonset} runs no pod on {nodes} though its nodeSelector admits them",
        "see what explains it (taints, node readiness): kubectl -n {namespace} describe ds "
        "{daemonset}",
    ),
    Kind(
        "device-plugin-config-missing",
        "operands",
        "error",
        "the device plugin's config-manager cannot find the sharing config the node's "
        "nvidia.com/device-plugin.config label names ({line}); the plugin stays in "
        "Init:CrashLoopBackOff",
        "fix the node label or add the key to the ConfigMap devicePlugin.config.name names",
    ),
    Kind(
        "device-plugin-registration-failed",
        "operands",
        "error",
        "the device plugin cannot register with kubelet ({line}): a wrong KUBELET_SOCKET, or "
        "kubelet restarted and the socket was re-created",
        "check devicePlugin.env in the ClusterPolicy; restart the plugin pod: kubectl -n "
        "{namespace} delete pod {pod}",
    ),
    Kind(
        "validator-workload-blocked",
        "operands",
        "warning",
        "the validator's CUDA workload could not get a GPU ({line}): with WITH_WORKLOAD=true it "
        "needs the node's GPU free, so a busy single-GPU node keeps the validator and the "
        "ClusterPolicy notReady",
        "let the node's GPU go idle, or set validator.plugin.env WITH_WORKLOAD=false",
    ),
    # --- ClusterPolicy and the operator -----------------------------------------------------
    Kind(
        "operator-not-installed",
        "operator",
        "error",
        "GPU nodes exist but there is no ClusterPolicy and no device plugin DaemonSet: nothing "
        "advertises nvidia.com/gpu",
        "install the GPU Operator (on a lab: invoke lab.up; terraform -var "
        "enable_gpu_operator=true) or the NVIDIA device plugin",
    ),
    Kind(
        "operator-scaled-to-zero",
        "operator",
        "error",
        "Deployment {namespace}/gpu-operator wants 0 replicas: nothing reconciles. Operands keep "
        "running and GPUs stay advertised, but ClusterPolicy edits are ignored, deleted "
        "DaemonSets are not re-created, new GPU nodes are never labelled, and status.state stays "
        "at the last value written",
        "kubectl -n {namespace} scale deploy gpu-operator --replicas=1",
    ),
    Kind(
        "operator-oomkilled",
        "operator",
        "error",
        "the operator's container was OOMKilled ({restarts} restart(s)): while it crash-loops "
        "nothing reconciles, exactly as with a stopped operator",
        "raise its memory limit: helm upgrade gpu-operator nvidia/gpu-operator -n {namespace} "
        "--reuse-values --set operator.resources.limits.memory=1Gi",
    ),
    Kind(
        "operator-not-running",
        "operator",
        "error",
        "Deployment {namespace}/gpu-operator has no available replica ({detail}): nothing "
        "reconciles the ClusterPolicy",
        "kubectl -n {namespace} describe pods -l app=gpu-operator; kubectl -n {namespace} logs "
        "deploy/gpu-operator --previous --tail=50",
    ),
    Kind(
        "device-plugin-disabled",
        "operator",
        "error",
        "ClusterPolicy spec.devicePlugin.enabled is false: the operator deleted the device "
        "plugin DaemonSet (it deletes, never scales to 0), so GPU nodes advertise nvidia.com/gpu "
        "0 with the key kept. status.state is {state}: a deliberate disable is a successful "
        "reconcile, so a ready ClusterPolicy proves nothing (trap)",
        "kubectl patch clusterpolicy {policy} --type=merge -p "
        '\'{{"spec":{{"devicePlugin":{{"enabled":true}}}}}}\'',
    ),
    Kind(
        "component-disabled",
        "operator",
        "info",
        "ClusterPolicy spec.{component}.enabled is false: {what}",
        "if wanted: kubectl patch clusterpolicy {policy} --type=merge -p "
        '\'{{"spec":{{"{component}":{{"enabled":true}}}}}}\'',
    ),
    Kind(
        "clusterpolicy-not-ready",
        "operator",
        "error",
        "ClusterPolicy status.state is {state}: {condition}",
        "look at the states it names: kubectl -n {namespace} get ds,pods; kubectl -n "
        "{namespace} logs deploy/gpu-operator --tail=100",
    ),
    # --- node internals (read from logs and events; the doctor never runs commands) ------------
    Kind(
        "gpu-xid-error",
        "node-internals",
        "error",
        "the device plugin saw XID {xid} and marked the GPU unhealthy: capacity stays, "
        "allocatable drops until the plugin restarts. XID 79 is a GPU fallen off the bus, 48 a "
        "double-bit ECC error: hardware, not Kubernetes",
        "kubectl cordon {node} && kubectl drain {node} --ignore-daemonsets "
        "--delete-emptydir-data, then replace the instance (terminate it; the node group "
        "launches a new one)",
    ),
    Kind(
        "nvml-init-failed",
        "node-internals",
        "error",
        "the device plugin cannot initialise NVML ({line}): driver not loaded, an AMI without "
        "libnvidia-ml.so.1, or a container without the devices; the node offers 0 GPUs",
        "check the driver from a pod with the devices mounted (kubectl -n {namespace} exec "
        "ds/nvidia-dcgm-exporter -- nvidia-smi), not from kubectl debug node, where NVML fails "
        "even on a healthy node",
    ),
    Kind(
        "no-devices-found",
        "node-internals",
        "error",
        "`No devices found. Waiting indefinitely.`: NVML found no GPU, yet the plugin pod stays "
        "Running and Ready (FAIL_ON_INIT_ERROR=false hides the error) and the DaemonSet and "
        "ClusterPolicy look ready while the node offers 0 GPUs",
        "check the driver from a pod with the devices mounted (kubectl -n {namespace} exec "
        "ds/nvidia-dcgm-exporter -- nvidia-smi)",
    ),
    Kind(
        "toolkit-glibc-mismatch",
        "node-internals",
        "error",
        "the container toolkit ({toolkit}) needs glibc >= 2.27 and the node runs {os} (glibc "
        "2.26): nvidia-container-cli fails (`version 'GLIBC_2.27' not found`), so the validator "
        "and every GPU container fail. Amazon Linux 2 EKS AMIs ended on 2025-11-26 and the GPU "
        "Operator does not support AL2",
        "move the GPU node group to AL2023_x86_64_NVIDIA (driver and toolkit in the AMI, "
        "toolkit.enabled=false); to keep AL2 meanwhile: kubectl patch clusterpolicy {policy} "
        '--type=merge -p \'{{"spec":{{"toolkit":{{"version":"v1.14.6-ubi8"}}}}}}\'',
    ),
    Kind(
        "containerd-runtime-missing",
        "node-internals",
        "error",
        "containerd on the node has no runtime `{handler}` ({line}), so no pod whose "
        "RuntimeClass names that handler gets a sandbox; the operand pods' RuntimeClass is the "
        "ClusterPolicy's spec.operator.runtimeClass, created by the operator with a handler of "
        "the same name, so the class exists while containerd lacks the runtime. Where the "
        "missing one is `nvidia`, the toolkit never added it: toolkit >= 1.17 (operator v24.9+) "
        "reads containerd's config through its CLI, which fails on distributions with their "
        "own containerd (k0s, k3s, RKE2)",
        "name a runtime the node's containerd has (on the node: containerd config dump | grep "
        "-A3 'runtimes\\.'; `nvidia` and runc on EKS's NVIDIA AMI): kubectl patch clusterpolicy "
        '{policy} --type=merge -p \'{{"spec":{{"operator":{{"runtimeClass":"nvidia"}}}}}}\'; '
        "deleting the stuck pods changes nothing. Where containerd lacks nvidia itself (k0s): "
        "pin the toolkit and point it at the distribution's containerd: helm upgrade ... --set "
        "toolkit.version=v1.16.2-ubuntu20.04 and toolkit.env CONTAINERD_CONFIG, "
        "CONTAINERD_SOCKET, CONTAINERD_RUNTIME_CLASS=nvidia",
    ),
    Kind(
        "validator-duplicate-symlinks",
        "node-internals",
        "info",
        "benign: `Could not create symlink ... file exists` is a warning; the validator goes on "
        "(CreateLinks returns no error), so it is not why a validator crash-loops. The "
        "`CUDA_DRIVER_SKIP_DUPLICATE_LINKS=true` fix a write-up gives exists in no gpu-operator "
        "or toolkit release (the real switch is DISABLE_DEV_CHAR_SYMLINK_CREATION): look for the "
        "real cause (on Amazon Linux 2, the toolkit's glibc){myth}",
        "nothing to fix for these lines",
    ),
    # --- network -------------------------------------------------------------------------------
    Kind(
        "sg-blocks-nccl",
        "network",
        "error",
        "neither the node security group's ephemeral self rule (tcp 1025-65535) nor the "
        "auxiliary group's all-traffic rule from the VPC ({vpc}) exists: new connections between "
        "pods on different nodes are dropped, so NCCL's bootstrap (and torch's rendezvous on "
        "29500) between GPU nodes times out and hangs; admission webhook ports from the cluster "
        "SG are closed too",
        "terraform apply -var enable_aux_sg_vpc_allow=true -var "
        "node_sg_enable_recommended_rules=true (on a lab: invoke scenario.revert --all)",
    ),
)


def kind(name: str) -> Kind:
    """The kind called `name`; KeyError lists the known names."""
    if name not in KINDS:
        raise KeyError(f"no doctor finding {name!r}; known: {', '.join(sorted(KINDS))}")
    return KINDS[name]
