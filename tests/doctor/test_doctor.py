"""lab.doctor on one rehearsal world: healthy, then every registered scenario's fault.

The accuracy matrix: for each scenario in the registry, inject it as `scenario.inject` does,
run the doctor on the lab, and require that the probable cause is the finding the scenario
declares; the same doctor through `--kubeconfig/--context` (no lab state) must find the same,
and the API server's audit log must show it only read. Then the faults reached through AWS:
security-group rules removed (through `invoke lab.doctor --json`), and the GPU node group
scaled to zero.
"""

from __future__ import annotations

import io
import json
import subprocess
import time
from pathlib import Path

import pytest
from controlplane_support import READS, audited_verbs
from lab_support import ROOT, invoke_env, run_invoke
from scenario_support import LAB_NAME, SimLab, by_hand_env, quiet, wait_ready

import scenarios
from labs.commands.scale import scale
from labs.console import Console
from labs.doctor.model import Report
from labs.doctor.render import SCHEMA, as_document, as_text
from labs.doctor.run import doctor
from labs.kube import probes
from labs.lab import Lab
from labs.run.engine import inject_scenario, revert_scenarios
from labs.settings import load_settings
from labs.sim.aws.access import VIEWER, user_arn
from labs.sim.aws.seed import ACCOUNT_ID
from labs.sim.world import VIEWER_KUBECONFIG

# The read-only identity's kubeconfig and context (its EKS access entry has the view policy)
CONTEXT = f"{VIEWER}@{LAB_NAME}"
READ_ONLY = "**Read-only, proved by Kubernetes.**"  # the README's paragraph with its lines
DOCTOR_ACCOUNT = "system:serviceaccount:kube-system:gpu-doctor"
UNDO_READ_ONLY = (
    "kubectl delete clusterrolebinding/gpu-doctor-read clusterrole/gpu-doctor-read; "
    "kubectl delete serviceaccount gpu-doctor -n kube-system"
)


def attached(sim_lab: SimLab, state_dir: Path) -> Report:
    """The doctor through the world's read-only kubeconfig and context, with no lab state."""
    settings = load_settings(
        None,
        {
            "kubeconfig": str(sim_lab.world.kubeconfig_path.parent / VIEWER_KUBECONFIG),
            "context": CONTEXT,
            "state_dir": str(state_dir),
        },
    )
    return doctor(lambda: Lab.open(settings))


def readme_block(after: str) -> str:
    """The first ```bash block of the README after the line starting with `after`."""
    text = (ROOT / "README.md").read_text()
    rest = text[text.index(after) :]
    return rest.split("```bash\n", 1)[1].split("```", 1)[0]


def lab_doctor(lab: Lab, *args: str) -> tuple[int, dict]:
    """`invoke lab.doctor --lab L --json`: exit code and the document."""
    env = invoke_env(lab.settings.state_dir)
    result = run_invoke("lab.doctor", "--lab", lab.name, "--json", *args, env=env)
    assert result.stdout.startswith("{"), result.stdout + result.stderr
    return result.returncode, json.loads(result.stdout)


def kubernetes_findings(document: dict) -> list[tuple]:
    """(name, subject, severity, explained by) of every finding a kubeconfig can show."""
    return [
        (f["name"], f["subject"], f["severity"], json.dumps(f["explained_by"]))
        for f in document["findings"]
        if f["stage"] != "network"
    ]


def test_a_healthy_lab_exits_0_says_so_and_lists_what_it_checked(sim_lab: SimLab):
    lab = sim_lab.lab

    result = run_invoke("lab.doctor", "--lab", lab.name, env=invoke_env(lab.settings.state_dir))

    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "no problem found" in out and "probable cause" not in out
    assert "read: nodes 4 (2 GPU)" in out and "clusterpolicy cluster-policy ready" in out
    for stage in ("pods", "nodes", "operands", "operator", "logs", "node-internals", "network"):
        assert f"\n  {stage:<14} " in out, stage
    assert "NOT CHECKED: validation files, nvidia-smi" in out


def test_a_read_only_service_account_is_all_the_doctor_needs(sim_lab: SimLab, tmp_path: Path):
    """The README's lines: a ServiceAccount with get/list/watch only, a token, the doctor as it."""
    audit_log = sim_lab.world.control_plane.home / "logs" / "audit.log"
    env = by_hand_env(sim_lab.lab, tmp_path / "cache") | {"TMPDIR": str(tmp_path)}
    since = audit_log.stat().st_size
    try:
        run = subprocess.run(["bash", "-ec", readme_block(READ_ONLY)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        verbs = audited_verbs(audit_log, since, DOCTOR_ACCOUNT)
    finally:
        subprocess.run(["bash", "-c", UNDO_READ_ONLY], env=env, capture_output=True, timeout=60)

    assert run.returncode == 0, run.stdout + run.stderr
    assert "no problem found" in run.stdout and "gpu-doctor (existing cluster" in run.stdout
    assert "list" in verbs and verbs <= READS, verbs


@pytest.mark.parametrize("name", sorted(scenarios.all_scenarios()))
def test_the_probable_cause_is_each_scenarios_declared_finding(
    sim_lab: SimLab, name: str, tmp_path: Path
):
    lab = sim_lab.lab
    audit_log = sim_lab.world.control_plane.home / "logs" / "audit.log"
    scenario = scenarios.get(name)
    inject_scenario(lab, scenario, out=quiet, speed=lab.speed, confirm=lambda _question: True)
    try:
        since = audit_log.stat().st_size
        # the real controllers settle the fault over a few seconds: compare two readings of
        # one settled state (the same findings through the lab and through the kubeconfig)
        for _attempt in range(10):
            on_lab = doctor(lambda: Lab.open(lab.settings))
            from_kubeconfig = as_document(attached(sim_lab, tmp_path / "no-lab"))
            if kubernetes_findings(from_kubeconfig) == kubernetes_findings(as_document(on_lab)):
                break
            time.sleep(1.0)
        verbs = audited_verbs(audit_log, since, user_arn(ACCOUNT_ID))
    finally:
        revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet)
    wait_ready(lab)

    document = as_document(on_lab)
    cause = document["probable_cause"]
    if scenario.doctor_finding is None:  # nothing left to read: no wrong cause either
        assert (cause, on_lab.exit_code) == (None, 0), as_text(on_lab)
    else:
        assert cause and cause["name"] == scenario.doctor_finding, as_text(on_lab)
        assert (on_lab.exit_code, document["status"]) == (1, "problems")
        assert document["findings"][0]["name"] == scenario.doctor_finding
    assert kubernetes_findings(from_kubeconfig) == kubernetes_findings(document)
    assert verbs and verbs <= READS, verbs
    assert not (tmp_path / "no-lab").exists()


def test_a_gpu_node_agent_is_not_told_to_take_a_gpu(sim_lab: SimLab):
    """missing-toleration's busybox agent wants the GPU nodes, not a GPU: a GPU limit would
    take one from real work, so the doctor must not advise it."""
    lab = sim_lab.lab
    inject_scenario(lab, scenarios.get("missing-toleration"), out=quiet, speed=lab.speed)
    try:
        code, document = lab_doctor(lab)
    finally:
        revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet)
    wait_ready(lab)

    assert (code, document["probable_cause"]["name"]) == (1, "pod-untolerated-taint")
    flagged = [f["subject"] for f in document["findings"] if f["name"] == "pod-without-gpu-limit"]
    assert flagged == [], flagged


def test_the_json_document_keeps_its_schema(sim_lab: SimLab, tmp_path: Path):
    document = as_document(attached(sim_lab, tmp_path / "no-lab"))

    assert document["schema"] == SCHEMA and document["status"] == "healthy"
    assert (document["exit_code"], document["probable_cause"], document["error"]) == (0, None, None)
    assert set(document) == {
        "schema",
        "target",
        "status",
        "exit_code",
        "error",
        "probable_cause",
        "findings",
        "checked",
        "not_checked",
        "seconds",
    }
    assert document["target"]["backend"] == "existing"
    assert {f["severity"] for f in document["findings"]} <= {"info"}
    assert {"stage", "check", "looked_at"} == set(document["checked"][0])
    network = [s for s in document["not_checked"] if s["stage"] == "network"]
    assert network and "no AWS access" in network[0]["why"]


def test_security_group_rules_that_block_nccl_are_named_on_a_lab(sim_lab: SimLab):
    lab = sim_lab.lab
    toggles = {"enable_aux_sg_vpc_allow": False, "node_sg_enable_recommended_rules": False}
    lab.infra().apply({**lab.variables, **toggles})
    try:
        report = doctor(lambda: Lab.open(lab.settings))
    finally:
        lab.infra().apply(lab.variables)

    cause = report.probable_cause
    assert cause is not None and cause.name == "sg-blocks-nccl", as_text(report)
    assert cause.subject == f"securitygroup/{lab.outputs['node_security_group_id']}"
    assert "tcp 1025-65535" not in " ".join(e.value for e in cause.evidence)
    assert (
        "192.168.0.0/16" in cause.meaning and "node_sg_enable_recommended_rules=true" in cause.fix
    )
    assert doctor(lambda: Lab.open(lab.settings)).exit_code == 0


def test_gpu_nodes_scaled_to_zero_are_named_with_the_node_group(sim_lab: SimLab):
    lab = sim_lab.lab
    console = Console(io.StringIO())
    scale(lab, 0, console)
    try:
        probes.create_probe(lab)
        deadline = time.monotonic() + 30
        while (report := doctor(lambda: Lab.open(lab.settings))).probable_cause is None:
            assert time.monotonic() < deadline, as_text(report)
            time.sleep(0.1)  # until the scheduler has said why the probe waits
    finally:
        probes.delete_probe(lab, 30)
        scale(lab, 2, console)
    wait_ready(lab)

    cause = report.probable_cause
    assert cause is not None and cause.name == "gpu-nodes-scaled-to-zero", as_text(report)
    evidence = {e.object: e.value for e in cause.evidence}
    assert evidence["nodegroup/myeks-ng-gpu"] == "desired 0, min 0, max 2"
    assert evidence["pods"] == "pod/default/gpu-probe"
    assert "--nodegroup-name myeks-ng-gpu" in cause.fix and "desiredSize=2" in cause.fix
