"""The GPU Operator release: toggle, pinned chart, values the AL2023 NVIDIA AMI needs."""

from __future__ import annotations

from functools import cache

import pytest
import yaml
from stack_spec import (
    GPU_OPERATOR_CHART,
    GPU_OPERATOR_CHART_PATHS,
    GPU_OPERATOR_REPOSITORY,
    GPU_OPERATOR_TIMEOUT_SECONDS,
    GPU_OPERATOR_VALUES,
    GPU_TOLERATION,
    STACK_DIR,
    leaf_paths,
    stack,
)

VALUES_FILE = '${file("${path.module}/gpu_operator_values.yaml")}'


def release() -> dict:
    return stack()["resource"]["helm_release"]["gpu_operator"]


@cache
def values() -> dict:
    assert release()["values"] == [VALUES_FILE]
    return yaml.safe_load((STACK_DIR / "gpu_operator_values.yaml").read_text())


def lookup(tree: dict, dotted: str):
    for key in dotted.split("."):
        tree = tree[key]
    return tree


def test_gpu_operator_is_installed_only_when_enable_gpu_operator():
    assert release()["count"] == "${var.enable_gpu_operator ? 1 : 0}"


def test_gpu_operator_chart_comes_from_ngc_pinned_to_the_version_variable():
    assert release()["repository"] == GPU_OPERATOR_REPOSITORY
    assert release()["chart"] == GPU_OPERATOR_CHART
    assert release()["version"] == "${var.gpu_operator_chart_version}"


def test_gpu_operator_namespace_comes_from_its_variable_and_is_created():
    assert release()["namespace"] == "${var.gpu_operator_namespace}"
    assert release()["create_namespace"] is True


def test_gpu_operator_install_waits_900_s_and_keeps_failures_observable():
    assert release()["timeout"] == GPU_OPERATOR_TIMEOUT_SECONDS
    assert release()["wait"] is True
    assert release()["atomic"] is False


def test_gpu_operator_waits_for_the_cluster_and_prometheus_crds():
    assert release()["depends_on"] == ["${module.eks}", "${helm_release.kube_prometheus_stack}"]


def test_values_set_outside_the_file_are_chart_values_too():
    for entry in release().get("set", []):
        assert entry["name"] in GPU_OPERATOR_CHART_PATHS, f"{entry['name']} is not a chart value"


@pytest.mark.parametrize(("path", "expected"), sorted(GPU_OPERATOR_VALUES.items()))
def test_gpu_operator_value(path, expected):
    assert lookup(values(), path) is expected


def test_validator_plugin_runs_with_a_workload():
    assert lookup(values(), "validator.plugin.env") == [{"name": "WITH_WORKLOAD", "value": "true"}]


def test_operator_tolerates_the_gpu_taint():
    assert GPU_TOLERATION in lookup(values(), "operator.tolerations")


def test_values_only_set_keys_chart_v26_3_declares_with_their_types():
    for path, value in leaf_paths(values()).items():
        assert path in GPU_OPERATOR_CHART_PATHS, f"{path} is not a gpu-operator chart value"
        assert isinstance(value, GPU_OPERATOR_CHART_PATHS[path]), path


def test_helm_provider_uses_the_v2_nested_kubernetes_block_with_eks_token_exec():
    (helm,) = [block["helm"] for block in stack()["provider"] if "helm" in block]
    assert isinstance(helm["kubernetes"], list), "helm 2.x needs a nested kubernetes {} block"
    (kubernetes,) = helm["kubernetes"]
    assert kubernetes["host"] == "${module.eks.cluster_endpoint}"
    (exec_auth,) = kubernetes["exec"]
    assert exec_auth["command"] == "aws"
    assert exec_auth["args"] == [
        "eks",
        "get-token",
        "--cluster-name",
        "${module.eks.cluster_name}",
        "--region",
        "${var.TargetRegion}",
    ]
