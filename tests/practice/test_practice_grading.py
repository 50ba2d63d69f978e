"""Grading an answer by what it means: a paraphrase corpus, numbered choices, the dispute.

The corpus is answers as people write them, each labelled with the grade a person applying
the lab's rules gives (right; the right layer: another cause of the same area, or the area
itself; wrong). Every second answer of each fault is held out: the vocabulary on the scenarios
was tuned against the other half only, so the held-out figures say how the grader does on
answers it has not seen.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from lab_support import invoke_env, run_invoke

import scenarios
from labs.practice.exercise import PracticeError, answer, dispute, list_choices
from labs.practice.grading import GRADE_WORDS, grade, read, understood
from labs.practice.history import area_grades
from labs.practice.record import FIXED, Record
from labs.run.contract import Cause

R, L, W = 1.0, 0.5, 0.0  # right, the right layer, wrong
KINDS = {R: "right", L: "right layer", W: "wrong"}
GOOD_ENOUGH = 0.95  # of each kind of answer, graded as labelled
WHO, LAB = "ann", "myeks"

# Per fault: answers in the order written; even positions are the development half, odd ones
# the held-out half. Each fault has right answers first, then right-layer ones, then wrong ones.
CORPUS: dict[str, list[tuple[str, float]]] = {
    "device-plugin-off": [
        ("device plugin disabled in the ClusterPolicy", R),
        ("someone set devicePlugin.enabled=false in the cluster policy", R),
        ("dp turned off via clusterpolicy", R),
        ("The GPU operator's ClusterPolicy has the device plugin switched off, so the daemonset "
         "got deleted and nodes advertise 0 GPUs", R),
        ("nvidia-device-plugin-daemonset is gone because the operator disabled it", R),
        ("device-plugin-disabled", R),
        ("clusterpolicy spec.devicePlugin.enabled false", R),
        ("the device plugins were disabled", R),
        ("the gpu operator controller is scaled down to zero", L),
        ("something in the GPU operator is broken", L),
        ("operator-scaled-to-zero", L),
        ("the clusterpolicy is misconfigured", L),
        ("pods are missing the nvidia.com/gpu toleration", W),
        ("the GPU node group was scaled to 0", W),
        ("CUDA driver version mismatch", W),
        ("device plugin label set to false on one node", W),
        ("k get clusterpolicy -o yaml shows devicePlugin: enabled: false", R),
        ("Somebody flipped the DP off at the ClusterPolicy level so the daemonset was torn down on "
         "every node", R),
        ("the operator is not reconciling anything", L),
        ("GPU operator config issue", L),
        ("the device plugin has no toleration for the taint", W),
        ("pods need the nvidia runtimeclass", W),
    ],
    "device-plugin-off-one-node": [
        ("one GPU node has the nvidia.com/gpu.deploy.device-plugin label set to false", R),
        ("someone opted a node out of the device plugin with the deploy label", R),
        ("deploy-label-false", R),
        ("device plugin disabled on a single node through its node label", R),
        ("the dp daemonset doesn't run on one of the gpu nodes because the node is labelled "
         "device-plugin=false", R),
        ("node label gpu.deploy.device-plugin=false on one node", R),
        ("The device plugin pod is missing on one node: its node label opts it out", R),
        ("a node was labeled to not deploy the device-plugin", R),
        ("a taint on one of the GPU nodes", L),
        ("it's a problem with a single node", L),
        ("gpu-node-taint-not-tolerated", L),
        ("one node's GPU is broken", L),
        ("the device plugin is disabled in the ClusterPolicy", W),
        ("the gpu operator is scaled to zero", W),
        ("pods lack the gpu limit", W),
        ("security group blocks NCCL", W),
        ("kubectl get nodes -L nvidia.com/gpu.deploy.device-plugin shows false for "
         "ip-10-0-1-23", R),
        ("the plugin was opted-out on that single node via the deploy label", R),
        ("NoExecute taint on a node", L),
        ("problem is on one specific GPU node", L),
        ("dp off in clusterpolicy for all nodes", W),
        ("the GPU pods forgot their limits", W),
    ],
    "device-plugin-config-missing": [
        ("the node label nvidia.com/device-plugin.config names a config the ConfigMap lacks", R),
        ("specified config a10g-24gb does not exist: wrong sharing config name on one node", R),
        ("device-plugin-config-missing", R),
        ("time-slicing config missing for the label on that node", R),
        ("config-manager init container crash loops: the node's config label has a typo", R),
        ("the device-plugin.config label points at a key not in the time-slicing ConfigMap", R),
        ("one node asks for a sharing config that does not exist", R),
        ("wrong config name in the node label, the configmap has no such key", R),
        ("the plugin pod on one node is stuck in Init:CrashLoopBackOff", L),
        ("device plugin crash looping on one node", L),
        ("something wrong with one node's device plugin", L),
        ("one node advertises 0 GPUs", L),
        ("device plugin disabled in the ClusterPolicy", W),
        ("a maintenance taint on one GPU node", W),
        ("the gpu operator is scaled to zero", W),
        ("the pod has no GPU limit", W),
        ("the configmap lacks the config the node label names, so config-manager fails", R),
        ("missing time-slicing key a10g-24gb in the sharing configmap", R),
        ("an init container of the plugin keeps failing on a node", L),
        ("problem with one node", L),
        ("security groups block NCCL traffic", W),
        ("the GPU node group was scaled to 0", W),
    ],
    "gpu-node-foreign-taint": [
        ("a taint on one GPU node that the operands do not tolerate", R),
        ("another team put a maintenance=true:NoExecute taint on a gpu node", R),
        ("foreign NoExecute taint on one node evicted the nvidia operand pods", R),
        ("gpu-node-taint-not-tolerated", R),
        ("node tainted with maintenance, operator daemonsets don't tolerate it", R),
        ("The operator's DaemonSets have no toleration for the new maintenance taint on one GPU "
         "node, so the device plugin got evicted there", R),
        ("someone tainted one of the gpu nodes", R),
        ("an untolerated taint on a GPU node kicked off the device plugin", R),
        ("device plugin opted out on one node via label", L),
        ("one of the nodes is bad", L),
        ("deploy-label-false", L),
        ("node-level problem", L),
        ("the pod spec is missing the nvidia.com/gpu toleration", W),
        ("device plugin disabled in clusterpolicy", W),
        ("the gpu operator controller is down", W),
        ("no GPU nodes in the node group", W),
        ("kubectl describe node shows Taints: maintenance=true:NoExecute, and the nvidia "
         "daemonsets don't have a toleration for it", R),
        ("someone cordoned/tainted a gpu box for maintenance and the operator pods got "
         "evicted", R),
        ("that node is unhealthy", L),
        ("node label deploy.device-plugin=false", L),
        ("the pod is missing tolerations, so it can't land on the tainted GPU nodes", W),
        ("the whole node group was scaled in", W),
    ],
    "gpu-xid-79": [
        ("the GPU fell off the bus, Xid 79", R),
        ("device plugin log shows XidCriticalError Xid=79 and marked the GPU unhealthy", R),
        ("xid-79", R),
        ("one node's GPU is lost: hardware failure (Xid 79), the node must be replaced", R),
        ("GPU has fallen off the PCIe bus on one node", R),
        ("gpu-xid-error", R),
        ("a hardware XID error took one node's GPU out; AcceleratedHardwareReady is False", R),
        ("nvidia-smi says GPU is lost on that node", R),
        ("one of the GPU nodes has a problem", L),
        ("something is wrong on a single node", L),
        ("a node-level issue on one GPU node", L),
        ("only that node offers 0 GPUs", L),
        ("the device plugin is disabled in the ClusterPolicy", W),
        ("pods are missing the nvidia.com/gpu toleration", W),
        ("the GPU node group was scaled to 0", W),
        ("security groups block NCCL traffic", W),
        ("dcgm exporter reports XID 79 for the GPU of one node: it fell off the bus", R),
        ("Xid 79 on one node, the GPU dropped off the bus", R),
        ("problem with one node", L),
        ("per node issue", L),
        ("the gpu operator is scaled to zero", W),
        ("the pod has no GPU limit", W),
    ],
    "gpus-scaled-to-zero": [
        ("gpu node group scaled to zero", R),
        ("desiredSize=0 on the GPU nodegroup", R),
        ("nobody scaled the GPU nodes back up after lab.down, there are 0 GPU nodes", R),
        ("gpu-nodes-scaled-to-zero", R),
        ("no gpu nodes at all; the ASG is at 0 and there's no cluster autoscaler", R),
        ("the cost guard scaled GPUs to 0", R),
        ("GPU nodes were scaled down and nothing scales them back up", R),
        ("the nodegroup's desired size is zero", R),
        ("not enough GPU capacity in the cluster", L),
        ("a capacity problem", L),
        ("insufficient nvidia.com/gpu, need more GPUs", L),
        ("we ran out of GPU capacity", L),
        ("device plugin is disabled so nodes advertise 0 gpus", W),
        ("the pods have no toleration for the GPU taint", W),
        ("GPU operator scaled to 0 replicas", W),
        ("security groups drop traffic between GPU nodes", W),
        ("aws eks describe-nodegroup says desiredSize 0 for the gpu group", R),
        ("there are simply no GPU instances running, the lab was torn down (scaled to 0) and no "
         "autoscaler brings them back", R),
        ("pending because of insufficient GPUs in the cluster", L),
        ("capacity: there is nothing to schedule onto", L),
        ("the operator's deployment is at zero replicas", W),
        ("gpu nodes advertise nvidia.com/gpu: 0 because the device plugin is off", W),
    ],
    "mig-on-a10g": [
        ("pod requests a MIG slice on A10G, which can't do MIG", R),
        ("nvidia.com/mig-1g.5gb requested but the nodes are A10G", R),
        ("mig-resource-unavailable", R),
        ("asks for mig 1g.5gb, no node advertises it", R),
        ("MIG not supported on A10Gs", R),
        ("the probe wants a MIG profile the GPUs don't have (mig.capable=false)", R),
        ("wrong resource name: a mig partition instead of nvidia.com/gpu", R),
        ("multi-instance GPU slice requested on a GPU that does not support it", R),
        ("the pod has no GPU limit", L),
        ("something wrong in the pod spec", L),
        ("runtimeclass-missing", L),
        ("the pod's runtimeClassName doesn't exist", L),
        ("device plugin disabled", W),
        ("gpu node group at zero", W),
        ("GPU node tainted by another team", W),
        ("the nvidia driver is too old", W),
        ("resources.limits asks for nvidia.com/mig-1g.5gb; A10G isn't MIG capable", R),
        ("requested a mig instance on hardware that can't be partitioned", R),
        ("the pod is missing a toleration", L),
        ("bad resource limits in the pod yaml", L),
        ("the GPU operator isn't reconciling", W),
        ("a foreign taint on one node", W),
    ],
    "missing-gpu-limit": [
        ("probe pods were written without a GPU limit", R),
        ("no gpu limit", R),
        ("pod-without-gpu-limit", R),
        ("the pods don't set resources.limits nvidia.com/gpu", R),
        ("forgot to request a GPU in the pod spec", R),
        ("GPU limits missing from the pods so the scheduler never allocated a GPU", R),
        ("the container requests no nvidia.com/gpu, so it got no GPU on the system node and an "
         "unallocated one on the gpu node", R),
        ("missing nvidia.com/gpu limit", R),
        ("the pods have no nvidia.com/gpu toleration", L),
        ("the pod asks for a mig slice", L),
        ("pod-untolerated-taint", L),
        ("the workload's spec is wrong", L),
        ("device plugin off on one node", W),
        ("nvidia container toolkit misconfigured on the nodes", W),
        ("operator down", W),
        ("the node group has no GPU nodes", W),
        ("no resources.limits for nvidia.com/gpu in the probe spec", R),
        ("The pod never asked for a GPU (limits nvidia.com/gpu: missing), so it either lands on a "
         "system node without nvidia-smi or silently shares a GPU", R),
        ("runtimeClassName is wrong", L),
        ("the probe yaml is broken", L),
        ("the device plugin never registered the GPU", W),
        ("security group blocks pod traffic", W),
    ],
    "missing-toleration": [
        ("a pod pinned to the GPU nodes by nodeSelector asks for no GPU, so it never got the "
         "nvidia.com/gpu toleration and the GPU node taint keeps it Pending", R),
        ("missing toleration", R),
        ("pod-untolerated-taint", R),
        ("the gpu-node-agent pod has no toleration for nvidia.com/gpu:NoSchedule", R),
        ("pods lack tollerations for the GPU taint", R),
        ("no toleration on the pod that doesn't request a GPU, so the taint keeps it off the GPU "
         "nodes", R),
        ("tolerations missing in the pod spec", R),
        ("the agent pod cant tolerate the gpu taint", R),
        ("the pod has no nvidia.com/gpu limit", L),
        ("pod spec problem", L),
        ("mig-on-a10g", L),
        ("the deployment names a runtimeclass that doesn't exist", L),
        ("a GPU node was tainted maintenance:NoExecute by another team", W),
        ("device plugin is turned off", W),
        ("nccl blocked by security groups", W),
        ("gpu nodes scaled to zero", W),
        ("agent pod w/o tolerations can't schedule on tainted gpu nodes", R),
        ("add tolerations: - key: nvidia.com/gpu operator: Exists effect: NoSchedule to the "
         "pod", R),
        ("the probe asks for a MIG slice", L),
        ("something wrong with how the pod is written", L),
        ("the GPU nodes have a foreign NoExecute taint that the operands don't tolerate", W),
        ("nodes scaled to zero", W),
    ],
    "nccl-sg-block": [
        ("security group rules block NCCL between nodes", R),
        ("the node SG's ephemeral self rule was removed", R),
        ("sg-blocks-nccl", R),
        ("SG toggles off: enable_aux_sg_vpc_allow and node_sg_enable_recommended_rules are "
         "false", R),
        ("cross-node traffic is dropped by the security groups, so the all-reduce rendezvous "
         "times out", R),
        ("firewall (sg) blocks ports 1025-65535 between gpu nodes", R),
        ("securty group blocks nccl", R),
        ("the aux SG lost its allow-all rule from the VPC", R),
        ("a network problem between the nodes", L),
        ("pods on different nodes can't talk to each other", L),
        ("network issue", L),
        ("NCCL fails across nodes", L),
        ("device plugin disabled", W),
        ("a gpu node was tainted", W),
        ("operator is down", W),
        ("the pod has no gpu limit", W),
        ("the SG ingress self-rule for 1025-65535 is gone so nccl can't connect across nodes", R),
        ("node security group doesnt allow traffic between the gpu nodes anymore", R),
        ("cross-node pod connectivity is broken", L),
        ("the all-reduce can't rendezvous between the two nodes", L),
        ("the operator is scaled to 0", W),
        ("the pods don't tolerate the taint", W),
    ],
    "operator-down": [
        ("gpu-operator deployment scaled to 0", R),
        ("the GPU operator controller is down", R),
        ("operator-scaled-to-zero", R),
        ("nobody reconciles: the operator pod isn't running (replicas 0)", R),
        ("gpu operator scaled to zero replicas so ClusterPolicy edits are never applied", R),
        ("operator not running", R),
        ("The gpu-operator Deployment has 0 replicas", R),
        ("the operater is dead, nothing reconciles the clusterpolicy", R),
        ("device plugin disabled in the clusterpolicy", L),
        ("GPU operator problem", L),
        ("device-plugin-disabled", L),
        ("something with the clusterpolicy", L),
        ("the gpu nodes are scaled to zero", W),
        ("a node has a foreign taint", W),
        ("pods lack gpu limits", W),
        ("sg blocks nccl", W),
        ("kubectl -n gpu-operator get deploy gpu-operator shows 0/0, nobody is reconciling", R),
        ("the operator controller has no running pod, so edits to the cluster policy are "
         "ignored", R),
        ("the nvidia device plugin daemonset was disabled by the ClusterPolicy", L),
        ("the operator's config is off somewhere", L),
        ("a node has the device-plugin deploy label set to false", W),
        ("the nodegroup is at 0", W),
    ],
    "runtimeclass-missing": [
        ("runtimeClassName points to a RuntimeClass that doesn't exist", R),
        ("runtimeclass-missing", R),
        ("the deployment uses runtimeClassName nvidia-container-runtime, which is not a "
         "runtimeclass", R),
        ("no such runtime class", R),
        ("RuntimeClass not found, pods are forbidden at admission", R),
        ("wrong runtimeclass name in the pod template", R),
        ("missing runtimeclass", R),
        ("the runtime class nvidia-container-runtime is missing", R),
        ("the pods have no gpu limit", L),
        ("bad deployment spec", L),
        ("missing-toleration", L),
        ("the pod requests a mig slice", L),
        ("device plugin disabled", W),
        ("the nvidia container runtime isn't installed on the nodes", W),
        ("the GPU operator is scaled down", W),
        ("security group blocks traffic", W),
        ("deploy references runtimeclass nvidia-container-runtime which doesnt exist; replicaset "
         "shows FailedCreate", R),
        ("pods rejected at admission: RuntimeClass not found", R),
        ("gpu limit missing on the pod", L),
        ("the deployment yaml is wrong", L),
        ("containerd on the nodes lacks the nvidia runtime", W),
        ("device plugin pods are missing on one node", W),
    ],
    "containerd-runtime-missing": [
        ("the clusterpolicy's runtimeClass names a handler containerd doesn't have", R),
        ("containerd on the nodes has no runtime called nvidia-experimental", R),
        ("operator.runtimeClass set to nvidia-experimental, which isn't configured in containerd, "
         "so the operand pods fail FailedCreatePodSandBox", R),
        ("no runtime configured for the handler the RuntimeClass names", R),
        ("the runtime handler is missing from the container runtime's config", R),
        ("containerd-runtime-missing", R),
        ("sandbox creation fails: no runtime for nvidia-experimental is configured", R),
        ("the runtime class handler isn't known to containerd on the gpu nodes", R),
        ("the GPU operator's operands are not ready", L),
        ("the clusterpolicy is misconfigured", L),
        ("operand-not-ready", L),
        ("the operator is not reconciling", L),
        ("device plugin disabled in the cluster policy", L),
        ("pods name a RuntimeClass that does not exist", W),
        ("a foreign taint on one GPU node", W),
        ("the gpu node group was scaled to zero", W),
        ("the security group blocks the nodes", W),
        ("the nvidia driver crashed", W),
        ("ClusterPolicy points the operands at a container runtime the nodes lack", R),
        ("the pods were stuck ContainerCreating because containerd lacks that runtime", R),
        ("something is wrong with the gpu operator", L),
        ("missing nvidia.com/gpu toleration", W),
    ],
    "toolkit-glibc-al2": [
        ("the container toolkit needs glibc 2.27 but the Amazon Linux 2 node has 2.26", R),
        ("GLIBC_2.27 not found: the toolkit 1.17 is too new for the AL2 node's libc", R),
        ("nvidia-container-cli from the operator's toolkit can't load on AL2's old glibc", R),
        ("toolkit-glibc-mismatch", R),
        ("the node's C library is older than the toolkit was built for", R),
        ("glibc on the amzn2 node is too old for the toolkit, pin v1.14.6-ubi8", R),
        ("the prestart hook fails because of a glibc version mismatch", R),
        ("glibc mismatch between the toolkit and the node OS", R),
        ("an operand of the GPU operator fails on one node", L),
        ("the GPU operator's operands are not ready", L),
        ("clusterpolicy-not-ready", L),
        ("the operator's DaemonSets are not all ready", L),
        ("the validator crash-loops on duplicate symlinks", W),
        ("CUDA_DRIVER_SKIP_DUPLICATE_LINKS is missing from the validator", W),
        ("containerd has no nvidia runtime configured", L),
        ("a foreign taint on one GPU node", W),
        ("the gpu node group was scaled to zero", W),
        ("device plugin disabled in the cluster policy", L),
        ("the GPU fell off the bus", W),
        ("missing nvidia.com/gpu toleration", W),
        ("the security group blocks the nodes", W),
        ("the time-slicing config does not exist", W),
    ],
    "validator-gpu-busy": [
        ("pods were holding every GPU so the validator's workload pod got Available: 0", R),
        ("the GPUs are busy: gpu-holder pods hold them and the validator can't run its test", R),
        ("validator-workload-blocked", R),
        ("with WITH_WORKLOAD=true the validator needs a free GPU, but each one was in use", R),
        ("the validation pod was rejected because another pod occupied the node's GPU", R),
        ("a running pod held the GPU, so plugin-validation gave up waiting for its pod", R),
        ("nvidia.com/gpu 1/1 allocated to other pods, the validator's test pod had no GPU", R),
        ("GPU in use by a sleeping pod, the operator validator kept failing", R),
        ("the operator validator pod is stuck in Init:CrashLoopBackOff", L),
        ("the clusterpolicy is notReady because of state-operator-validation", L),
        ("operand-not-ready", L),
        ("the gpu operator validator is broken", L),
        ("something is wrong with the gpu operator", L),
        ("the device plugin is switched off", L),
        ("a foreign taint on one GPU node", W),
        ("the gpu node group was scaled to zero", W),
        ("the GPU fell off the bus", W),
        ("the nvidia driver crashed", W),
        ("the pods were given no GPU limit", W),
        ("missing nvidia.com/gpu toleration", W),
        ("the security group blocks the nodes", W),
        ("the nodes' gpus advertise nothing because their driver is broken", W),
    ],
}  # fmt: skip


def half(held_out: bool) -> list[tuple[str, str, float]]:
    """(fault, answer, label) of one half: every second answer of each fault is held out."""
    return [
        (name, text, label)
        for name, answers in CORPUS.items()
        for text, label in answers[int(held_out) :: 2]
    ]


def figures(entries: list[tuple[str, str, float]]) -> dict[float, tuple[int, int]]:
    """Per kind of answer: (graded as labelled, how many)."""
    catalogue = scenarios.all_scenarios()
    counts: dict[float, tuple[int, int]] = {}
    for name, text, label in entries:
        hit, total = counts.get(label, (0, 0))
        counts[label] = (hit + (grade(text, catalogue[name], catalogue) == label), total + 1)
    return counts


def shown(counts: dict[float, tuple[int, int]]) -> str:
    return ", ".join(f"{KINDS[k]} {hit}/{total}" for k, (hit, total) in counts.items())


def test_the_corpus_has_six_answers_or_more_of_every_fault_and_every_kind():
    assert set(CORPUS) == set(scenarios.all_scenarios()), "write answers for every fault"
    for name, answers in CORPUS.items():
        assert len(answers) >= 6, name
        assert {label for _, label in answers[1::2]} == {R, L, W}, name


@pytest.mark.parametrize("held_out", [False, True], ids=["development", "held-out"])
def test_each_kind_of_answer_is_graded_as_a_person_would(held_out: bool):
    counts = figures(half(held_out))
    print(f"{'held-out' if held_out else 'development'}: {shown(counts)}")
    for kind, (hit, total) in counts.items():
        assert hit / total >= GOOD_ENOUGH, f"{KINDS[kind]}: {hit}/{total}"


def test_right_answers_in_a_persons_words_are_right():
    catalogue = scenarios.all_scenarios()
    quoted = {
        "missing-toleration": "a pod pinned to the GPU nodes by nodeSelector asks for no GPU, so "
        "it never got the nvidia.com/gpu toleration and the GPU node taint keeps it Pending",
        "missing-gpu-limit": "probe pods were written without a GPU limit",
        "gpu-node-foreign-taint": "a taint on one GPU node that the operands do not tolerate",
    }
    for name, text in quoted.items():
        assert grade(text, catalogue[name], catalogue) == R, (name, text)


def test_word_forms_field_names_and_a_typo_are_understood():
    catalogue = scenarios.all_scenarios()
    reading = read("the operater's DaemonSets don't tolerate a tainted node", catalogue)
    assert {"GPU Operator", "operands", "toleration", "taint"} <= set(reading.concepts)
    for said in ("runtime class", "runtimeClassName", "RuntimeClass"):
        assert "RuntimeClass" in read(said, catalogue).concepts, said


def test_a_grade_that_is_not_right_says_what_was_understood_and_what_names_it():
    catalogue = scenarios.all_scenarios()
    reading = read("the device plugin is off on one node", catalogue)
    assert reading.causes == ("device-plugin-off-one-node",)
    said = understood(reading, catalogue)
    assert said.startswith("understood: device plugin, switched off, one node; that names: ")
    assert "(device-plugin-off-one-node, area node)" in said
    assert understood(read("a network problem", catalogue), catalogue) == (
        "understood: network; that names no cause, only the area: network"
    )
    assert understood(read("cosmic rays", catalogue), catalogue).startswith(
        "understood: nothing the grader knows"
    )


def test_a_cause_written_wrong_is_refused_with_what_to_write():
    with pytest.raises(ValueError, match=r'each concept group is a tuple of phrases.*\("taint",\)'):
        Cause("a taint", names=("taint",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeats the summary; say the cause itself"):
        replace(scenarios.get("operator-down"), cause=Cause(scenarios.get("operator-down").summary,
                                                           names=(("operator",),)))  # fmt: skip


# --- answering an exercise: a record in a temp dir, no lab --------------------------------------


def a_lab(state_dir: Path) -> SimpleNamespace:
    """What answering reads of a lab: its name and its state directory."""
    return SimpleNamespace(name=LAB, settings=SimpleNamespace(state_dir=state_dir))


def an_exercise(state_dir: Path, name: str, who: str = WHO) -> int:
    """An open exercise of `name` for `who`, waiting for its answer."""
    record = Record(state_dir)
    exercise = record.begin(who, LAB, [(name, scenarios.get(name).area)])
    record.opened(exercise, [{}])
    return exercise


def said(call, *args) -> list[str]:
    lines: list[str] = []
    call(*args, out=lines.append)
    return lines


def numbered(lines: list[str]) -> list[str]:
    """The plain causes of a --choices listing, in its order."""
    return [line.split(". ", 1)[1] for line in lines[1:]]


def test_choices_list_every_cause_in_an_order_that_stays_with_the_exercise(tmp_path: Path):
    catalogue = scenarios.all_scenarios()
    lab = a_lab(tmp_path)
    first = an_exercise(tmp_path, "missing-toleration")
    listed = said(list_choices, lab, catalogue, WHO)
    assert listed[0].startswith(f"the causes, in the order of exercise {first} ")
    assert sorted(numbered(listed)) == sorted(s.cause.plain for s in catalogue.values())
    assert [line.split(".")[0].strip() for line in listed[1:]] == [
        str(n) for n in range(1, len(catalogue) + 1)
    ]
    assert said(list_choices, lab, catalogue, WHO) == listed  # the same order every time
    assert all(s.cause.plain != s.summary for s in catalogue.values())
    Record(tmp_path).ended(first, FIXED)
    Record(tmp_path).answered(first, "skip", [0.0])
    an_exercise(tmp_path, "missing-toleration")
    assert numbered(said(list_choices, lab, catalogue, WHO)) != numbered(listed)


def test_a_number_an_id_or_a_name_is_graded_exactly(tmp_path: Path):
    catalogue = scenarios.all_scenarios()
    lab = a_lab(tmp_path)
    plains = {s.cause.plain: s.name for s in catalogue.values()}
    expected = {"missing-toleration": "right", "runtimeclass-missing": "the right layer, not the "
                "cause", "operator-down": "wrong"}  # fmt: skip
    for picked, grade_said in expected.items():
        exercise = an_exercise(tmp_path, "missing-toleration")
        order = [plains[p] for p in numbered(said(list_choices, lab, catalogue, WHO))]
        lines = said(answer, lab, catalogue, str(order.index(picked) + 1), WHO)
        assert lines[1].startswith(f"fault 1: {grade_said}: it is missing-toleration"), lines
        Record(tmp_path).ended(exercise, FIXED)
    for text, grade_given in [("pod-untolerated-taint", R), ("mig-on-a10g", L),
                              ("operator-scaled-to-zero", W)]:  # fmt: skip
        exercise = an_exercise(tmp_path, "missing-toleration")
        lines = said(answer, lab, catalogue, text, WHO)
        assert lines[1].startswith(f"fault 1: {GRADE_WORDS[grade_given]}: "), (text, lines)
        Record(tmp_path).ended(exercise, FIXED)
    an_exercise(tmp_path, "missing-toleration")
    count = len(catalogue)  # one choice per fault of the catalogue
    refusal = (
        f"there is no choice {count + 1}: the choices are 1 to {count}; `invoke practice.choices "
        f"--lab {LAB} --who {WHO}` lists them"
    )
    with pytest.raises(PracticeError, match=refusal):
        said(answer, lab, catalogue, str(count + 1), WHO)


def test_a_grade_not_right_shows_what_was_understood_and_the_cause(tmp_path: Path):
    catalogue = scenarios.all_scenarios()
    an_exercise(tmp_path, "gpu-node-foreign-taint")
    lines = said(answer, a_lab(tmp_path), catalogue, "the pod has no toleration", WHO)
    assert lines[1] == (
        "fault 1: wrong: it is gpu-node-foreign-taint (cause gpu-node-taint-not-tolerated, "
        "area node)"
    )
    assert lines[2].startswith("  understood: pod, toleration; that names: A pod meant for the")
    assert lines[3] == f"  the cause: {catalogue['gpu-node-foreign-taint'].cause.plain}"
    assert lines[4] == (
        f"graded unfairly? `invoke practice.dispute --lab {LAB} --who {WHO}` (once) leaves this "
        "grade out of your per-area means"
    )
    assert "traps:" in "\n".join(lines)  # the runbook follows


def test_only_the_learner_answers_and_disputes_once(tmp_path: Path):
    catalogue = scenarios.all_scenarios()
    lab, record = a_lab(tmp_path), Record(tmp_path)
    with pytest.raises(PracticeError, match=f"no answered exercise on lab {LAB} to dispute"):
        said(dispute, lab, WHO)
    exercise = an_exercise(tmp_path, "operator-down")
    theirs = f"exercise {exercise} on lab {LAB} is ann's, not bob's: only ann can answer it"
    with pytest.raises(PracticeError, match=rf"{theirs} \(if that is you, pass --who ann\)"):
        said(answer, lab, catalogue, "operator down", "bob")
    with pytest.raises(PracticeError, match="say what you think the cause is"):
        said(answer, lab, catalogue, "  ", WHO)
    said(answer, lab, catalogue, "device plugin disabled", WHO)
    record.ended(exercise, FIXED)
    assert area_grades(record.of(WHO))["operator"][0].grade == 0.5
    with pytest.raises(PracticeError, match="is ann's, not bob's: only ann can dispute its grade"):
        said(dispute, lab, "bob")
    assert said(dispute, lab, WHO) == [
        f"the grade of exercise {exercise} (0.5) is recorded as disputed: it counts in no "
        "per-area mean, and `invoke practice.history` shows it as disputed"
    ]
    [fault] = record.of(WHO)[0].faults
    assert fault.disputed and fault.grade == 0.5  # kept as given, not as a zero
    assert area_grades(record.of(WHO)) == {}  # left out of the means that steer the pick
    with pytest.raises(PracticeError, match="is disputed already; a grade is disputed once"):
        said(dispute, lab, WHO)
    right = an_exercise(tmp_path, "operator-down")
    said(answer, lab, catalogue, "operator-scaled-to-zero", WHO)
    with pytest.raises(PracticeError, match=f"exercise {right} was graded right: nothing"):
        said(dispute, lab, WHO)


def test_the_cli_offers_numbered_choices_and_a_dispute_beside_the_answer(tmp_path: Path):
    env = invoke_env(tmp_path)
    listing = run_invoke("--list", env=env).stdout
    assert "  practice.choices " in listing and "  practice.dispute " in listing, listing
    answer_help = run_invoke("--help", "practice.answer", env=env).stdout
    assert "doctor finding id or scenario" in answer_help, answer_help
    assert "practice.choices" in answer_help and "--who" in answer_help, answer_help
    for task in ("practice.choices", "practice.dispute"):
        shown = run_invoke("--help", task, env=env).stdout
        assert "whose exercise (default: your user name)" in shown, shown
    refused = run_invoke("practice.dispute", "--lab", "nosuch", env=env)
    assert refused.returncode == 1 and "no lab named 'nosuch'" in refused.stderr
