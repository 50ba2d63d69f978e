"""nccl-sg-block and lab.smoke: real workloads, real-GPU recordings, the SG toggles.

The log verdicts are held to the recordings made on two real H200s (healthy and with the
self rule's drop in place) and to the rehearsal's output for the same network states.
One rehearsal world serves every test; each leaves the rules in place.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from lab_support import FIXTURES, ROOT, invoke_env, run_invoke
from scenario_support import (
    YES,
    SimLab,
    assert_alerts_as_declared,
    assert_findings_observed,
    killed_run_is_reverted_from_the_journal,
    quiet,
)
from tool_support import require_tool, require_venv_tool

import scenarios
from labs.aws import stack
from labs.aws.node_network import node_rules
from labs.commands.smoke import render, smoke
from labs.console import Console
from labs.journal import REVERTED
from labs.kube import workloads
from labs.kube.verdicts import allreduce_verdict, cuda_verdict, tcp_verdict
from labs.run.engine import ScenarioError, inject_scenario, revert_scenarios, run_scenario

REAL = FIXTURES / "real-gpu"
NAME = "nccl-sg-block"


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


# Verdicts of the real recordings: rank 0 ran on node-a, rank 1 on node-b.
REAL_ALLREDUCE = {
    state: {rank: allreduce_verdict(real(f"allreduce-{state}.node-{node}.log")).cause
            for rank, node in (("nccl-allreduce-0", "a"), ("nccl-allreduce-1", "b"))}
    for state in ("healthy", "blocked")
}  # fmt: skip
REAL_TCP = {
    state: {"tcp-check-same-node": tcp_verdict(real(f"tcp-{state}.node-a.log")).outcome,
            "tcp-check-cross-node": tcp_verdict(real(f"tcp-{state}.node-b.log")).outcome}
    for state in ("healthy", "blocked")
}  # fmt: skip


def test_the_real_recordings_read_as_expected():
    assert REAL_ALLREDUCE == {
        "healthy": {"nccl-allreduce-0": "passed", "nccl-allreduce-1": "passed"},
        "blocked": {"nccl-allreduce-0": "rendezvous timed out",
                    "nccl-allreduce-1": "rendezvous timed out"},
    }  # fmt: skip
    assert REAL_TCP == {
        "healthy": {"tcp-check-same-node": "connected", "tcp-check-cross-node": "connected"},
        "blocked": {"tcp-check-same-node": "connected", "tcp-check-cross-node": "timed out"},
    }
    healthy = allreduce_verdict(real("allreduce-healthy.node-a.log"))
    assert healthy.busbw == healthy.algbw == 8.77  # 2 ranks: busbw = algbw
    stuck = [allreduce_verdict(real(f"nccl-blocked.node-{n}.log")) for n in "ab"]
    assert {v.cause for v in stuck} == {"NCCL connect timed out"}
    assert "retrying (1/1)" in stuck[1].evidence, "NCCL's own line from the real run"
    assert cuda_verdict(real("cuda-check.log")).available
    assert "nccl-blocked: node-a exit 3, node-b exit 3, 243s" in real("runs.txt")


def _toggles(lab, on: bool) -> None:
    from labs.commands.up import apply_changes

    changes = {stack.ENABLE_AUX_SG_VPC_ALLOW: on, stack.NODE_SG_ENABLE_RECOMMENDED_RULES: on}
    apply_changes(lab, changes, Console(open(os.devnull, "w")))


def _run(lab, workload) -> dict[str, workloads.PodRun]:
    with lab.view() as view:
        workloads.start(lab, workload, 60)
        try:
            return workloads.wait_finished(lab, view, workload, 60)
        finally:
            workloads.remove(lab, workload, 60)


def test_the_rehearsal_output_gives_the_real_verdicts(sim_lab: SimLab):
    lab = sim_lab.lab
    seen = {}
    for state, on in (("healthy", True), ("blocked", False)):
        _toggles(lab, on)
        seen[state] = (
            {n: allreduce_verdict(r.log).cause for n, r in _run(lab, workloads.ALLREDUCE).items()},
            {n: tcp_verdict(r.log).outcome for n, r in _run(lab, workloads.TCP_CHECK).items()},
        )
    _toggles(lab, True)
    assert seen == {state: (REAL_ALLREDUCE[state], REAL_TCP[state]) for state in REAL_TCP}


def test_lab_smoke_passes_with_a_table_and_fails_when_nccl_is_blocked(sim_lab: SimLab):
    lab = sim_lab.lab
    result = smoke(lab, Console(open(os.devnull, "w")))
    table = render(result, simulated=True)
    assert result.ok, table
    assert table[0].split() == ["node", "GPU", "driver", "memory", "CUDA", "ok", "busbw", "GB/s"]
    assert all("NVIDIA A10G  580.126.09  23028 MiB  yes      0.74 (simulated)" in row
               for row in table[1:3]), table  # fmt: skip
    assert table[-1] == "smoke: PASS"
    _toggles(lab, False)
    try:
        blocked = smoke(lab, Console(open(os.devnull, "w")))
    finally:
        _toggles(lab, True)
    text = "\n".join(render(blocked, simulated=True))
    assert not blocked.ok and text.endswith("smoke: FAIL")
    assert "all-reduce rendezvous timed out: DistNetworkError: The client socket" in text
    assert "yes" in text, "the probe and the CUDA check still pass: only the network is at fault"


def test_lab_smoke_cli_exits_0_and_leaves_no_pod(sim_lab: SimLab):
    lab = sim_lab.lab
    env = invoke_env(lab.settings.state_dir)
    done = run_invoke("lab.smoke", "--lab", lab.name, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "==> NCCL all-reduce across two GPU nodes" in done.stdout
    assert done.stdout.rstrip().endswith("smoke: PASS")
    left = lab.snapshot("pods").objects("pods")
    assert [p["metadata"]["name"] for p in left] == [], "smoke removes its pods"


def test_full_run_shows_plan_fault_and_recovery(sim_lab: SimLab):
    lab = sim_lab.lab
    result = run_scenario(lab, scenarios.get(NAME), out=quiet, confirm=YES)

    assert result.ok, result.failed_checks
    report = json.loads((result.report_dir / "report.json").read_text())
    assert_findings_observed(report, NAME)
    assert_alerts_as_declared(report, NAME)
    steps = {finding["step"]: finding["saw"] for finding in report["findings"]}
    assert "1/2 clients joined." in steps["1. the job's logs"], steps
    assert "timed out after 10 s" in steps["3. the same-node control"], steps
    plan = report["plan"]
    assert any('"ingress_nodes_ephemeral"] (destroy)' in line for line in plan), plan
    assert any("node_aux_from_vpc" in line and "(destroy)" in line for line in plan), plan
    assert all("(destroy)" in line and "security_group" in line for line in plan), plan
    seen = {check["name"]: check["seen"] for check in report["checks"]}
    rendezvous = seen["all-reduce fails within its bound: rendezvous timeout on both ranks"]
    assert "1/2 clients joined." in rendezvous and ", 29500)." in rendezvous
    assert "busbw 0.74 GB/s" in seen["all-reduce passes again, busbw near the baseline"]
    assert "timed out after 10 s" in seen[scenarios.get(NAME).symptoms[1].name]
    assert report["states"]["fault"] == {
        "node-to-node rules": "absent",
        "cross-node TCP check": "timed out",
        "all-reduce": "fails: rendezvous timed out",
    }
    assert (
        report["states"]["recovered"]
        == report["states"]["baseline"]
        == {
            "node-to-node rules": "present",
            "cross-node TCP check": "connected",
            "all-reduce": "passes",
        }
    )
    markdown = (result.report_dir / "report.md").read_text()
    assert "## Infrastructure plan of the injection" in markdown
    assert "![timeline](timeline.png)" in markdown, "every run draws its timeline"
    assert (result.report_dir / "timeline.png").read_bytes().startswith(b"\x89PNG")
    assert [e["state"] for e in lab.journal.entries()] == [REVERTED]


def test_without_confirmation_nothing_is_injected(sim_lab: SimLab):
    lab = sim_lab.lab
    with pytest.raises(ScenarioError, match="not confirmed, nothing was injected"):
        run_scenario(lab, scenarios.get(NAME), out=quiet, confirm=lambda _q: False)
    assert lab.journal.entries() == []
    assert node_rules(lab).self_rule and node_rules(lab).vpc_rule


def _cli_rule_ids(lab) -> set[str]:
    """`aws ec2 describe-security-group-rules` on the two node SGs, as a person runs it."""
    aws = require_venv_tool("aws")
    groups = f"{lab.outputs['node_security_group_id']},{lab.outputs['auxiliary_node_sg_id']}"
    env = {**os.environ, **lab.backend.env_exports(lab)}
    done = subprocess.run(
        [aws, "ec2", "describe-security-group-rules", "--region", lab.region,
         "--filters", f"Name=group-id,Values={groups}", "--query",
         "SecurityGroupRules[].SecurityGroupRuleId", "--output", "json"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return set(json.loads(done.stdout))


def test_inject_is_seen_with_the_aws_cli_and_revert_all_brings_the_rules_back(sim_lab: SimLab):
    lab = sim_lab.lab
    kubectl = require_tool("kubectl")
    before = node_rules(lab)
    inject_scenario(lab, scenarios.get(NAME), out=quiet, speed=lab.speed, confirm=YES)
    gone = _cli_rule_ids(lab)
    assert before.self_rule not in gone and before.vpc_rule not in gone

    assert revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet) == [NAME]
    after = node_rules(lab)
    assert {after.self_rule, after.vpc_rule} <= _cli_rule_ids(lab)
    policy = subprocess.run(
        [kubectl, "--kubeconfig", str(lab.paths.kubeconfig), "get", "clusterpolicy"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert policy.returncode == 0 and "cluster-policy" in policy.stdout, policy.stderr


def test_a_run_killed_after_the_apply_is_reverted_from_the_journal(sim_lab: SimLab):
    lab = sim_lab.lab
    try:
        killed_run_is_reverted_from_the_journal(lab, NAME, ROOT)
        assert node_rules(lab).self_rule and node_rules(lab).vpc_rule
    finally:
        workloads.remove(lab, workloads.TCP_CHECK, 60)  # what the killed run had started
        workloads.remove(lab, workloads.ALLREDUCE, 60)
