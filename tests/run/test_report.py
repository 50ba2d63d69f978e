"""The run report: what a reader finds in report.md, report.json and timeline.png."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from guard_support import NOSPACE, fill, small_tmpfs

from labs.backends import backend_named
from labs.run.alerts import AlertMoment
from labs.run.contract import CheckResult, Finding, Trap
from labs.run.report import RunRecord, render_markdown, write_report
from labs.state import StateWriteError

TRAP = Trap(
    "status.state stays ready", "notReady", "ready", "a disable reconciles fine",
    shown_by="status.state stays ready",
)  # fmt: skip


def record(backend: str = "sim", **changes) -> RunRecord:
    run = RunRecord(
        scenario="device-plugin-off",
        summary="devicePlugin.enabled=false",
        lab="myeks",
        backend=backend,
        backend_label="rehearsal, 60x speed" if backend == "sim" else "AWS EKS",
        proof=backend_named(backend).proof(),
        speed=60.0 if backend == "sim" else 1.0,
        started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:02:00Z",
        journal_id="abc123",
        baseline={"probe_output": "NVIDIA A10G, 580.126.09, 23028 MiB"},
        states={
            "baseline": {"device-plugin DaemonSet": "2/2/2", "status.state": "ready"},
            "fault": {"device-plugin DaemonSet": "NotFound", "status.state": "ready"},
            "recovered": {"device-plugin DaemonSet": "2/2/2", "status.state": "ready"},
        },
        checks=[
            CheckResult("symptom", "DaemonSet deleted", True, 0.15, "NotFound", 1.0),
            CheckResult("symptom", "status.state stays ready", True, 0.2, "ready", 1.0),
            CheckResult("recovery", "DaemonSet re-created", True, 0.5, "uid new", 2.0),
        ],
        findings=[
            Finding(
                "4b. ClusterPolicy status",
                "kubectl get clusterpolicy",
                "ready",
                "status hides it",
                trap=TRAP.name,
            ),
            Finding(
                "5. Node socket",
                "kubectl debug node/x",
                "kubelet.sock only",
                "unregistered",
                real_cluster_only=True,
            ),
        ],  # fmt: skip
        traps=[TRAP],
        reverted_at=1.25,
        timeline={
            "gauges": ["GPUs", "probe phase"],
            "samples": [
                {"t": -0.2, "GPUs": 2, "probe phase": "Succeeded"},
                {"t": 0.1, "GPUs": 0, "probe phase": "absent"},
                {"t": 0.3, "GPUs": None, "probe phase": "Pending"},
                {"t": 1.6, "GPUs": 2, "probe phase": "Succeeded"},
            ],
            "marks": [{"t": 0.0, "label": "inject", "kind": "phase"}],
        },
    )
    for key, value in changes.items():
        setattr(run, key, value)
    return run


def test_markdown_tells_the_whole_story():
    text = render_markdown(record())

    assert "- result: **OK**" in text
    assert "| device-plugin DaemonSet | 2/2/2 | NotFound | 2/2/2 |" in text
    # T+ as measured, and scaled back to real time on the rehearsal (0.15 s x 60).
    assert "| symptom | 0.15 | 9.00 | DaemonSet deleted | yes | NotFound |" in text
    assert "T+1.25 s after injection" in text
    assert "**4b. ClusterPolicy status** _(trap: status.state stays ready)_" in text
    assert "**5. Node socket** _(real cluster only: not observed by this run)_" in text
    assert "| status.state stays ready | notReady | ready | a disable reconciles fine | 4b." in text
    assert "anything about AWS or EKS" in text
    assert text.index("## Summary") < text.index("## Timeline") < text.index("## Debugging path")


def test_an_aws_report_claims_the_cluster_and_has_no_scaled_column():
    text = render_markdown(record(backend="aws"))

    assert "backend: AWS EKS" in text
    assert "real-time (s)" not in text
    assert "on this EKS cluster" in text


def test_failures_are_named_at_the_top():
    failed = CheckResult("recovery", "DaemonSet re-created", False, None, "NotFound")
    run = record(checks=[failed], exit_code=1, differences=["DaemonSet: 2/2/2 -> NotFound"])

    text = render_markdown(run)

    assert "- result: **FAILED** (exit 1): recovery: DaemonSet re-created; recovered state" in text
    assert "| recovery | - | - | DaemonSet re-created | NO | NotFound |" in text
    assert "- DaemonSet: 2/2/2 -> NotFound" in text


def test_write_report_writes_markdown_json_and_a_png(tmp_path: Path):
    report = write_report(record(), tmp_path / "run")

    assert report == tmp_path / "run" / "report.md"
    assert "![timeline](timeline.png)" in report.read_text()
    assert (tmp_path / "run" / "timeline.png").read_bytes().startswith(b"\x89PNG")
    data = json.loads((tmp_path / "run" / "report.json").read_text())
    assert data["result"] == {
        "ok": True,
        "exit_code": 0,
        "failed_checks": [],
        "error": None,
        "fault_kept": False,
    }
    assert data["traps"][0]["observed"] is True and data["traps"][0]["step"].startswith("4b")
    assert data["checks"][0]["t"] == 0.15 and data["checks"][0]["phase"] == "symptom"
    assert data["proof"]["does_not_prove"]


def test_no_samples_means_no_plot(tmp_path: Path):
    report = write_report(record(timeline={}), tmp_path / "run")

    assert not (tmp_path / "run" / "timeline.png").exists()
    text = report.read_text()
    assert "![timeline]" not in text
    assert "No timeline.png: the run stopped before it sampled or checked anything." in text


def test_a_scenario_without_gauges_still_draws_its_checks(tmp_path: Path):
    marks = [{"t": 0.0, "label": "inject", "kind": "phase"},
             {"t": 1.5, "label": "rules absent", "kind": "check"}]  # fmt: skip
    report = write_report(record(timeline={"marks": marks}), tmp_path / "run")

    assert (tmp_path / "run" / "timeline.png").read_bytes().startswith(b"\x89PNG")
    assert "![timeline](timeline.png)" in report.read_text()


def test_a_trap_counts_as_observed_only_when_its_check_held(tmp_path: Path):
    unseen = [
        CheckResult("symptom", "status.state stays ready", False, None, "notReady", 1.0),
    ]
    data = json.loads(
        (write_report(record(checks=unseen), tmp_path / "run").with_suffix(".json")).read_text()
    )
    assert data["traps"][0]["observed"] is False
    assert data["traps"][0]["step"].startswith("4b")


def test_a_trap_shown_in_its_step_counts_as_observed_only_when_the_step_saw_it(tmp_path: Path):
    nvml = Trap("NVML error in a debug pod", "driver dead", "NVML fails", "no /dev/nvidia*",
                shown_in="Failed to initialize NVML")  # fmt: skip

    def observed(saw: str) -> bool:
        step = Finding("5b. Node: is the driver dead?", "kubectl debug node/x -- nvidia-smi -L",
                       saw, "no devices in the debug pod", trap=nvml.name)  # fmt: skip
        run = record(findings=[step], traps=[nvml])
        report = write_report(run, tmp_path / saw[:6]).with_suffix(".json")
        return bool(json.loads(report.read_text())["traps"][0]["observed"])

    assert observed("Failed to initialize NVML: Unknown Error")
    assert not observed("GPU 0: NVIDIA A10G (UUID: GPU-1)")


def test_a_report_that_does_not_fit_names_the_file_not_a_pil_traceback(tmp_path: Path):
    with small_tmpfs(tmp_path / "tmpfs") as disk:
        run_dir = disk / "run"
        run_dir.mkdir()
        fill(disk)
        with pytest.raises(StateWriteError) as refused:
            write_report(record(), run_dir)

    assert str(refused.value) == f"could not write {run_dir / 'timeline.png'}: {NOSPACE}"


def test_the_alerts_table_shows_what_fired_when_and_the_silent_trap(tmp_path: Path):
    seen = [
        # `for: 2m` as the rehearsal's Prometheus runs it at 60x: 2 wall seconds
        AlertMoment(
            "GpuAllocatableZeroOnGpuNode",
            True,
            False,
            1.02,
            2.034,
            "node offers 0",
            for_seconds=2.0,
        ),  # fmt: skip
        AlertMoment("GpuAllocatableAbsentNaive", False, True, None, None, ""),
        AlertMoment("GpuOperatorDown", False, False, 0.0, 0.0, "no operator", before=True),
    ]
    marks = [*record().timeline["marks"], {"t": 2.034, "label": "alert X firing", "kind": "alert"}]
    run = record(alerts=[a.to_dict() for a in seen], timeline={**record().timeline, "marks": marks})

    text = render_markdown(run)

    on_eks = "120-180 s after its condition holds"  # for: 2m, then a scrape and an evaluation
    assert f"| GpuAllocatableZeroOnGpuNode | yes | 1.02 | 2.03 | {on_eks} | node offers 0 |" in text
    assert "| GpuAllocatableAbsentNaive (trap) | no | - | silent | - |  |" in text
    assert "| GpuOperatorDown (already before the injection) | no | 0.00 | 0.00 | - |" in text
    assert "T+ times the speed overstates an alert" in text, "the pace's distortion is said"
    # what is modelled today is listed, and what runs for real is said to be real
    [node_side] = [line for line in run.proof["does_not_prove"] if "kubelets" in line]
    modelled, real = node_side.split("; ")
    assert "scheduler" not in modelled and "Prometheus" not in modelled, modelled
    assert "scheduler, controller manager" in real and real.endswith("the real programs"), real
    assert text.index("## Timeline") < text.index("## Alerts") < text.index("## Debugging path")
    assert "Not recorded" in render_markdown(record())
    write_report(run, tmp_path / "run")
    assert (tmp_path / "run" / "timeline.png").read_bytes().startswith(b"\x89PNG")


def test_a_dead_prometheus_is_reported_as_dead_not_as_no_monitoring():
    why = "the lab's monitoring is installed but did not answer: Prometheus did not answer"
    run = record(alerts_unrecorded=why)

    text = render_markdown(run)

    assert f"Not recorded: {why}." in text
    assert "has no monitoring" not in text
    assert run.to_dict()["alerts_unrecorded"] == why
