"""The GPU facts and probe helpers the scenarios read their evidence with."""

from __future__ import annotations

import pytest

from labs.kube import changes
from labs.kube import gpu as gpu_facts
from labs.kube.probes import gpu_summary, load_probe
from labs.kube.view import Snapshot
from labs.run.contract import Context
from scenarios._one_node import pinned_ran_on_node

PROBE_LOG = """GPU 0: NVIDIA A10G (UUID: GPU-1a2b3c4d-0000-1111-2222-333344445555)
name, driver_version, memory.total [MiB]
NVIDIA A10G, 580.126.09, 23028 MiB
"""


def test_the_scenario_patches_fit_the_cluster_policy_schema():
    for enabled in (False, True):
        changes.validate_policy_patch({"spec": {"devicePlugin": {"enabled": enabled}}})
    marker = [{"name": "GFD_SLEEP_INTERVAL", "value": "60s"}]
    for env in (marker, None):  # None: merge-patch null, the chart's "no env"
        changes.validate_policy_patch({"spec": {"gfd": {"env": env}}})


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"spec": {"devicePlugins": {"enabled": False}}}, "'spec.devicePlugins'"),
        ({"spec": {"devicePlugin": {"enabled": "false"}}}, "must be bool, got 'false'"),
        ({"spec": {"devicePlugin": False}}, "'spec.devicePlugin' must be an object"),
        ({"status": {"state": "ready"}}, "no patchable field 'status'"),
        ({"spec": {"gfd": {"env": {"GFD_SLEEP_INTERVAL": "60s"}}}}, "list of {name, value}"),
        ({"spec": {"gfd": {"env": [{"name": "X", "value": 60}]}}}, "list of {name, value}"),
    ],
)
def test_a_patch_outside_the_schema_is_refused(patch, message):
    with pytest.raises(ValueError, match=message):
        changes.validate_policy_patch(patch)


def test_a_pinned_probe_is_the_probe_renamed_with_a_hostname_selector():
    pinned = load_probe(name="gpu-probe-pinned", node="ip-192-168-12-5")
    assert pinned["metadata"]["name"] == "gpu-probe-pinned"
    assert pinned["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "ip-192-168-12-5"}
    assert "nodeName" not in pinned["spec"]  # the scheduler still decides, and says why not
    assert "nodeSelector" not in load_probe()["spec"]


def test_scheduler_reasons_are_counted_and_sorted_as_text():
    reasons = {gpu_facts.SELECTOR_MISMATCH: 3, gpu_facts.UNTOLERATED_TAINT: 1}
    assert gpu_facts.fit_error(4, reasons) == (
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), "
        "3 node(s) didn't match Pod's node affinity/selector."
    )


def test_probe_output_is_compared_without_the_per_gpu_uuid():
    assert gpu_summary(PROBE_LOG) == "NVIDIA A10G, 580.126.09, 23028 MiB"
    assert gpu_summary("Failed to initialize NVML: Unknown Error") == ""


def test_the_probe_manifest_asks_for_one_gpu_and_tolerates_the_taint():
    probe = load_probe()
    spec = probe["spec"]
    assert probe["metadata"]["name"] == "gpu-probe" and spec["restartPolicy"] == "Never"
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        spec["tolerations"]
    )


def test_the_operator_step_line_is_found_among_other_log_lines():
    wanted = (
        '{"level":"info","logger":"controllers.ClusterPolicy","msg":"ClusterPolicy step '
        'completed","state:":"state-device-plugin","status":"disabled"}'
    )
    lines = [
        "not json at all",
        '{"msg":"ClusterPolicy step completed","state:":"state-device-plugin","status":"ready"}',
        wanted,
        '{"msg":"ClusterPolicy step completed","state:":"state-dcgm","status":"disabled"}',
    ]
    assert gpu_facts.operator_step_line(lines, "state-device-plugin", "disabled") == wanted
    assert gpu_facts.operator_step_line(lines[:2], "state-device-plugin", "disabled") is None


def test_event_story_order_and_repeats():
    failed = {"reason": "FailedScheduling", "count": 3}
    scheduled = {"reason": "Scheduled", "count": 1}
    assert gpu_facts.waited_then_scheduled([failed, scheduled])
    assert not gpu_facts.waited_then_scheduled([scheduled, failed])
    assert not gpu_facts.waited_then_scheduled([scheduled])
    assert gpu_facts.event_reasons([failed, scheduled]) == ["FailedScheduling (x3)", "Scheduled"]


def test_a_pinned_probe_its_kubelet_rejected_is_reported_with_the_kubelets_reason():
    rejected = "Pod was rejected: Allocate failed due to no healthy devices present"
    pod = {
        "metadata": {"name": "gpu-probe-pinned", "namespace": "default"},
        "spec": {"nodeName": "ip-192-168-12-5"},
        "status": {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": rejected},
    }
    view = Snapshot({"pods": [pod], "events": []})
    context = Context(lab=None, view=view, baseline={"node": "ip-192-168-12-5"})  # type: ignore[arg-type]

    held, seen = pinned_ran_on_node(context)

    assert not held
    assert seen.startswith(f"gpu-probe-pinned Failed on ip-192-168-12-5 ({rejected})")
