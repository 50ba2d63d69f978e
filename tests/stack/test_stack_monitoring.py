"""The monitoring toggle, from `lab.up --monitoring` to the kube-prometheus-stack release.

The release is checked in the parsed HCL like the GPU Operator's; the alert rules it carries
are computed by the real terraform binary from the lab's own copy of the stack, laid out by
the AWS backend, and compared with `monitoring/gpu-alerts.yaml`. Chart keys are held to the
facts in stack_spec (checked once against the chart), never to a chart fetched at run time.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from lab_support import ROOT, invoke_env, run_invoke
from stack_spec import (
    GPU_OPERATOR_CHART_PATHS,
    KUBE_PROMETHEUS_STACK_CHART,
    KUBE_PROMETHEUS_STACK_CHART_PATHS,
    KUBE_PROMETHEUS_STACK_FULLNAME_MAX,
    KUBE_PROMETHEUS_STACK_NAMING_PATHS,
    KUBE_PROMETHEUS_STACK_PROMETHEUS_PORT,
    KUBE_PROMETHEUS_STACK_REPOSITORY,
    KUBE_PROMETHEUS_STACK_VERSION,
    STACK_DIR,
    leaf_paths,
    offline_terraform_env,
    stack,
)
from tool_support import require_tool

from labs.aws import stack as contract
from labs.backends import AWS
from labs.commands.up import full_variables, up_variables
from labs.lab import Lab
from labs.settings import load_settings

VALUES_FILE = '${file("${path.module}/monitoring_values.yaml")}'
RULES_VALUES = "${local.monitoring_rules_values}"
RULES = ROOT / "monitoring" / "gpu-alerts.yaml"
RULES_ENTRY = "gpu-alerts"


def release() -> dict[str, Any]:
    return stack()["resource"]["helm_release"]["kube_prometheus_stack"]


def gpu_operator() -> dict[str, Any]:
    return stack()["resource"]["helm_release"]["gpu_operator"]


@cache
def values() -> dict[str, Any]:
    return yaml.safe_load((STACK_DIR / "monitoring_values.yaml").read_text())


def rule_groups() -> list[dict[str, Any]]:
    return yaml.safe_load(RULES.read_text())["groups"]


def lookup(tree: dict, dotted: str) -> Any:
    for key in dotted.split("."):
        tree = tree[key]
    return tree


# --- the release -----------------------------------------------------------------------


def test_monitoring_is_installed_only_when_enable_monitoring():
    assert release()["count"] == "${var.enable_monitoring ? 1 : 0}"


def test_enable_monitoring_is_off_by_default_and_says_it_costs_money():
    assert stack()["variable"]["enable_monitoring"]["default"] is False
    assert "Costs money" in stack()["variable"]["enable_monitoring"]["description"]


def test_chart_comes_from_prometheus_community_pinned_to_88_5_3():
    assert release()["repository"] == KUBE_PROMETHEUS_STACK_REPOSITORY
    assert release()["chart"] == KUBE_PROMETHEUS_STACK_CHART
    assert release()["version"] == "${var.kube_prometheus_stack_chart_version}"
    version = stack()["variable"]["kube_prometheus_stack_chart_version"]
    assert version["default"] == KUBE_PROMETHEUS_STACK_VERSION
    assert version.get("validation"), "a pin is validated like gpu_operator_chart_version"


def test_release_lives_in_its_own_created_namespace_and_waits_for_the_cluster():
    assert release()["namespace"] == contract.MONITORING_NAMESPACE
    assert release()["create_namespace"] is True
    assert release()["depends_on"] == ["${module.eks}"]
    assert release()["wait"] is True and release()["atomic"] is False


def test_the_prometheus_service_the_lab_reads_is_the_one_the_chart_names():
    """The chart's fullname is a release name that holds the chart's name (cut at 26)."""
    name = release()["name"]
    assert KUBE_PROMETHEUS_STACK_CHART in name and len(name) <= KUBE_PROMETHEUS_STACK_FULLNAME_MAX
    assert f"{name}-prometheus" == contract.PROMETHEUS_SERVICE
    overridden = set(leaf_paths(values())) & KUBE_PROMETHEUS_STACK_NAMING_PATHS
    assert not overridden, f"{overridden} would rename or move the Prometheus Service"
    assert contract.PROMETHEUS_PORT == KUBE_PROMETHEUS_STACK_PROMETHEUS_PORT


def test_release_carries_the_values_file_then_the_rules():
    assert release()["values"] == [VALUES_FILE, RULES_VALUES]
    assert "additionalPrometheusRulesMap" not in values(), "the rules come from one file only"


# --- its values --------------------------------------------------------------------------


def test_values_only_set_keys_the_chart_declares_with_their_types():
    for path, value in leaf_paths(values()).items():
        assert path in KUBE_PROMETHEUS_STACK_CHART_PATHS, f"{path} is not a chart value"
        assert isinstance(value, KUBE_PROMETHEUS_STACK_CHART_PATHS[path]), path


def test_prometheus_picks_up_every_service_monitor_and_rule_not_only_the_releases():
    spec = lookup(values(), "prometheus.prometheusSpec")
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is False
    assert spec["ruleSelectorNilUsesHelmValues"] is False


def test_alertmanager_and_grafana_stay_off():
    assert lookup(values(), "alertmanager.enabled") is False
    assert lookup(values(), "grafana.enabled") is False


def _allowed_node_labels() -> set[str]:
    """kube_node_labels' label names for the node labels kube-state-metrics is allowed to
    export (it writes `label_` and the key with every other character made `_`)."""
    allowed = set()
    for entry in lookup(values(), "kube-state-metrics.metricLabelsAllowlist"):
        resource, _, keys = entry.partition("=")
        if resource == "nodes":
            for key in keys.strip("[]").split(","):
                allowed.add("label_" + re.sub(r"[^A-Za-z0-9_]", "_", key.strip()))
    return allowed


def test_kube_state_metrics_exports_every_node_label_the_rules_join_on():
    joined = {
        label
        for group in rule_groups()
        for rule in group["rules"]
        if "kube_node_labels" in rule["expr"]
        for label in re.findall(r"\blabel_[A-Za-z0-9_]+", rule["expr"])
    }
    assert joined, "no rule joins on a node label: this test would check nothing"
    assert joined <= _allowed_node_labels()


# --- the rules, where the AWS backend applies the stack ------------------------------------


def _terraform(workdir: Path, *args: str) -> str:
    result = subprocess.run(
        [require_tool("terraform"), *args, "-no-color"],
        cwd=workdir,
        env=offline_terraform_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _rules_values_in_the_labs_copy(state_dir: Path) -> tuple[Path, str]:
    """Lay the stack out as the AWS backend does for a lab, then evaluate the rules values in
    it with terraform: the lab's working dir and the values text the release gets.

    The lab's copy needs providers that cannot be installed offline, so its file-only
    monitoring_rules.tf is evaluated from a directory beside it, whose `${path.module}/..`
    is the same lab directory."""
    lab = Lab.create(load_settings(None, {"lab": "watch", "state_dir": str(state_dir)}), AWS)
    infra = lab.backend.infra(lab)
    infra.sync_stack()  # what every terraform command of the lab starts with
    check = lab.paths.root / "rules-check"
    check.mkdir()
    shutil.copy(infra.working_dir / "monitoring_rules.tf", check)
    (check / "out.tf").write_text('output "rules" {\n  value = local.monitoring_rules_values\n}\n')
    _terraform(check, "apply", "-auto-approve", "-input=false", "-lock=false")
    return infra.working_dir, json.loads(_terraform(check, "output", "-json", "rules"))


def test_the_release_carries_exactly_the_groups_of_the_labs_rules_file(tmp_path):
    working_dir, text = _rules_values_in_the_labs_copy(tmp_path / "labs")

    carried = yaml.safe_load(text)
    assert carried == {"additionalPrometheusRulesMap": {RULES_ENTRY: {"groups": rule_groups()}}}
    placed = working_dir.parent / contract.GPU_ALERT_RULES_PATH
    assert placed.read_bytes() == RULES.read_bytes()
    assert not placed.is_symlink()


def test_the_checkout_and_the_lab_read_the_rules_at_the_same_relative_path():
    rules_file = stack()["locals"]["gpu_alert_rules_file"]
    assert rules_file == "${path.module}/../" + contract.GPU_ALERT_RULES_PATH
    assert (STACK_DIR.parent / contract.GPU_ALERT_RULES_PATH).resolve() == RULES.resolve()
    assert contract.STACK_COMPANIONS == {contract.GPU_ALERT_RULES_PATH: RULES.resolve()}


def test_the_repository_keeps_one_rules_file():
    copies = [path for path in STACK_DIR.rglob("*") if path.name == RULES.name]
    assert copies == [], "the stack reads ../monitoring/gpu-alerts.yaml; keep no copy"


# --- the GPU Operator's dcgm-exporter ServiceMonitor ----------------------------------------


def test_dcgm_exporter_service_monitor_follows_the_monitoring_toggle():
    assert gpu_operator()["set"] == [
        {"name": contract.DCGM_SERVICE_MONITOR_VALUE, "value": "${var.enable_monitoring}"}
    ]
    assert contract.DCGM_SERVICE_MONITOR_VALUE in GPU_OPERATOR_CHART_PATHS
    values_file = yaml.safe_load((STACK_DIR / "gpu_operator_values.yaml").read_text())
    assert "serviceMonitor" not in values_file.get("dcgmExporter", {}), "set in one place only"


def test_gpu_operator_waits_for_prometheus_crds_when_monitoring_is_on():
    assert gpu_operator()["depends_on"] == [
        "${module.eks}",
        "${helm_release.kube_prometheus_stack}",
    ]


# --- the orchestrator: lab.up sets it, later applies keep it --------------------------------


def _lab(tmp_path: Path, **settings: Any) -> Lab:
    return Lab.create(load_settings(None, {"state_dir": str(tmp_path), **settings}), AWS)


def test_a_new_lab_applies_the_monitoring_setting(tmp_path):
    assert up_variables(_lab(tmp_path))[contract.ENABLE_MONITORING] is False
    assert up_variables(_lab(tmp_path, monitoring=True))[contract.ENABLE_MONITORING] is True


def test_lab_up_with_monitoring_turns_it_on_for_a_lab_applied_without(tmp_path):
    lab = _lab(tmp_path, monitoring=True)
    lab.record["variables"] = load_settings().stack_variables(operator_enabled=True)

    wanted = up_variables(lab, **{contract.ENABLE_GPU_OPERATOR: True})
    assert wanted[contract.ENABLE_MONITORING] is True
    assert {k for k in wanted if wanted[k] != lab.variables[k]} == {contract.ENABLE_MONITORING}


def test_later_applies_keep_the_monitoring_value_last_applied(tmp_path):
    """A plain lab.up, a scenario's toggle and lab.down's revert run with the default
    setting (off): none of them may uninstall Prometheus."""
    on = load_settings(None, {"monitoring": True}).stack_variables(operator_enabled=True)
    lab = _lab(tmp_path)
    lab.record["variables"] = on
    assert lab.settings.monitoring is False

    toggled = {contract.ENABLE_AUX_SG_VPC_ALLOW: False}
    assert full_variables(lab, **toggled)[contract.ENABLE_MONITORING] is True
    assert up_variables(lab) == on

    lab.record["variables"] = {**on, contract.ENABLE_MONITORING: False}
    assert up_variables(lab)[contract.ENABLE_MONITORING] is False, "and off stays off"


def test_a_lab_recorded_before_the_toggle_gets_the_full_set(tmp_path):
    lab = _lab(tmp_path)
    recorded = load_settings().stack_variables(operator_enabled=True)
    del recorded[contract.ENABLE_MONITORING]
    lab.record["variables"] = recorded

    wanted = full_variables(lab, **{contract.NODE_SG_ENABLE_RECOMMENDED_RULES: False})
    assert set(wanted) == contract.ORCHESTRATOR_VARIABLES
    assert wanted[contract.ENABLE_MONITORING] is False, "what terraform's default applied"
    assert wanted[contract.ENABLE_GPU_OPERATOR] is True


# --- lab.up --monitoring ---------------------------------------------------------------


def _dry_run_variables(tmp_path: Path, *flags: str) -> str:
    env = invoke_env(tmp_path / "labs")
    result = run_invoke("lab.up", "--sim", "--dry-run", "--lab", "watch", *flags, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "variables:" in line]
    return line


def test_lab_up_monitoring_flag_reaches_the_variables_it_would_apply(tmp_path):
    assert "enable_monitoring=True" in _dry_run_variables(tmp_path, "--monitoring")
    assert "enable_monitoring=False" in _dry_run_variables(tmp_path)


def test_lab_up_help_describes_the_monitoring_flag(tmp_path):
    result = run_invoke("--help", "lab.up", env=invoke_env(tmp_path))
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "--monitoring" in text
    assert "kube-prometheus-stack with the lab's GPU alert rules (costs money on EKS" in text
