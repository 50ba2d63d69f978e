"""Lab settings: layering (defaults < invoke config < flags), validation and stack variables."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta
from pathlib import Path

import pytest
from invoke import Config

from labs.aws import stack
from labs.settings import (
    AVAILABILITY_ZONES_VARIABLE,
    LabSettings,
    SettingsError,
    flag_help,
    load_settings,
)


def test_defaults_describe_the_standard_lab():
    settings = load_settings()

    assert settings.lab == "myeks"
    assert settings.region == "ap-northeast-2"
    assert (settings.gpus, settings.gpu_max, settings.gpu_instance_type) == (2, 2, "g5.xlarge")
    assert settings.chart_version == "v26.3.1"
    assert settings.operator is True
    assert settings.monitoring is False, "Prometheus costs money: off unless asked for"
    assert settings.paths.root == Path(".labs").resolve() / "myeks"


def test_flags_override_config_which_overrides_defaults():
    settings = load_settings(
        config={"lab": "week3", "gpus": 1, "region": "us-east-1"},
        flags={"gpus": 0, "lab": None},
    )

    assert settings.lab == "week3"
    assert settings.region == "us-east-1"
    assert settings.gpus == 0
    assert settings.gpu_max == 2


def test_environment_text_is_turned_into_typed_values():
    settings = load_settings(
        config={"gpus": "1", "operator": "false", "speed": "120", "state_dir": "/tmp/labs"}
    )

    assert settings.gpus == 1
    assert settings.operator is False
    assert settings.speed == 120.0
    assert settings.state_dir == Path("/tmp/labs")


def test_settings_are_frozen():
    settings = load_settings()

    with pytest.raises(AttributeError):
        settings.gpus = 1  # type: ignore[misc]


def test_too_many_gpus_names_the_flag_the_limit_and_the_fix():
    with pytest.raises(SettingsError) as error:
        load_settings(flags={"gpus": 3})

    message = str(error.value)
    assert message.startswith("--gpus 3 exceeds the GPU node group's max size 2")
    assert "raise gpu_max" in message


def test_a_value_from_invoke_config_names_where_to_fix_it():
    with pytest.raises(SettingsError, match=r"lab\.gpus in invoke\.yaml -1 is negative"):
        load_settings(config={"gpus": -1})
    with pytest.raises(SettingsError, match=r"INVOKE_LAB_GPUS '-1' is negative"):
        load_settings(environ={"INVOKE_LAB_GPUS": "-1"})


def test_lowering_gpu_max_below_the_default_gpus_is_caught():
    with pytest.raises(SettingsError, match="gpus 2 exceeds the GPU node group's max size 1"):
        load_settings(flags={"gpu_max": 1})
    assert load_settings(flags={"gpu_max": 1, "gpus": 1}).gpu_max == 1


@pytest.mark.parametrize(
    ("setting", "value", "complaint"),
    [
        ("region", "Seoul", "is not an AWS region name"),
        ("region", "ap-northeast", "is not an AWS region name"),
        ("chart_version", "26.3.1", "use the form vX.Y.Z"),
        ("chart_version", "v26.3", "use the form vX.Y.Z"),
        ("lab", "my_lab", "is not a usable EKS cluster name"),
        ("lab", "lab-", "is not a usable EKS cluster name"),
        ("lab", "x" * 33, "is not a usable EKS cluster name"),
        ("gpu_max", 0, "is outside 1..100 GPU nodes"),
        ("gpu_max", 101, "use a number from 1 to 100"),
        ("gpu_az_index", 3, "use 0 to 2"),
        ("gpu_az_index", -1, "use 0 to 2"),
        ("gpu_instance_type", "g5", "is not an EC2 instance type"),
        ("node_ready_timeout", 0, "is outside 1..86400 seconds"),
        ("probe_timeout", 1e308, "is outside 1..86400 seconds"),
        ("lock_wait", 0, "is outside 0.1..3600 seconds"),
        ("speed", -1, "is outside 0.01..10000 times real time"),
        ("speed", 1e308, "use a number from 0.01 to 10000"),
        ("ttl", "99999999999999999999h", "is outside 1m..168h"),
        ("ttl", "4 hours", "use minutes or hours like 90m, 4h or 1h30m, or off"),
        ("ttl", "", "is not a duration"),
        ("ttl", "0m", "is outside 1m..168h"),
        ("ttl", "169h", "is outside 1m..168h"),
        ("kubelets", "fake", "use one of modelled, real"),
    ],
)
def test_bad_values_are_refused_with_the_setting_named(setting, value, complaint):
    with pytest.raises(SettingsError) as error:
        load_settings(flags={setting: value})

    message = str(error.value)
    assert message.startswith(f"--{setting.replace('_', '-')} {value!r} ")
    assert complaint in message


@pytest.mark.parametrize(
    ("text", "limit"),
    [("4h", timedelta(hours=4)), ("90m", timedelta(minutes=90)),
     ("1h30m", timedelta(minutes=90)), ("OFF", None), ("off", None)],
)  # fmt: skip
def test_the_gpu_time_limit_is_hours_and_minutes_or_off(text, limit):
    assert load_settings(flags={"ttl": text}).gpu_ttl == limit


def test_the_gpu_time_limit_defaults_to_four_hours():
    assert load_settings().gpu_ttl == timedelta(hours=4)


@pytest.mark.parametrize("region", ["ap-northeast-2", "us-east-1", "us-gov-west-1", "eu-west-1"])
def test_real_region_names_are_accepted(region):
    assert load_settings(flags={"region": region}).region == region


@pytest.mark.parametrize(
    ("setting", "value", "wanted"),
    [
        ("gpus", "two", "a whole number"),
        ("gpus", True, "a whole number"),
        ("gpus", 1.5, "a whole number"),
        ("operator", "maybe", "true or false"),
        ("probe_timeout", "soon", "a finite number"),
        ("lab", 7, "text"),
    ],
)
def test_values_of_the_wrong_type_are_refused(setting, value, wanted):
    with pytest.raises(SettingsError, match=f"is not {wanted}"):
        load_settings(config={setting: value})


def test_a_misspelt_setting_is_refused_with_a_suggestion():
    with pytest.raises(SettingsError) as error:
        load_settings(config={"gpu_maxx": 2})

    message = str(error.value)
    assert "unknown lab setting 'gpu_maxx'" in message
    assert "Did you mean 'gpu_max'?" in message


def test_stack_variables_are_the_full_set_with_desired_size_always_zero():
    settings = load_settings(flags={"lab": "study", "region": "us-west-2", "gpus": 2})

    variables = settings.stack_variables(operator_enabled=True)

    assert set(variables) == stack.ORCHESTRATOR_VARIABLES
    assert variables[stack.GPU_DESIRED_SIZE] == 0
    assert variables[stack.CLUSTER_BASE_NAME] == "study"
    assert variables[stack.GPU_MAX_SIZE] == 2
    assert variables[stack.ENABLE_GPU_OPERATOR] is True
    assert variables[AVAILABILITY_ZONES_VARIABLE] == ["us-west-2a", "us-west-2b", "us-west-2c"]
    assert variables[stack.ENABLE_AUX_SG_VPC_ALLOW] is True
    assert variables[stack.NODE_SG_ENABLE_RECOMMENDED_RULES] is True


def test_stack_variables_carry_the_monitoring_setting_from_any_layer():
    assert load_settings().stack_variables(operator_enabled=True)[stack.ENABLE_MONITORING] is False
    for layers in (
        {"flags": {"monitoring": True}},
        {"config": {"monitoring": "yes"}},
        {"environ": {"INVOKE_LAB_MONITORING": "true"}},
    ):
        variables = load_settings(**layers).stack_variables(operator_enabled=False)
        assert variables[stack.ENABLE_MONITORING] is True, layers


def test_a_monitoring_value_that_is_not_a_boolean_is_refused_by_name():
    with pytest.raises(SettingsError, match="INVOKE_LAB_MONITORING 'maybe' is not true or false"):
        load_settings(environ={"INVOKE_LAB_MONITORING": "maybe"})


def test_stack_variables_can_block_cross_node_traffic_and_leave_the_operator_off():
    variables = load_settings().stack_variables(operator_enabled=False, cross_node_traffic=False)

    assert variables[stack.ENABLE_GPU_OPERATOR] is False
    assert variables[stack.ENABLE_AUX_SG_VPC_ALLOW] is False
    assert variables[stack.NODE_SG_ENABLE_RECOMMENDED_RULES] is False


def test_help_covers_every_setting():
    assert set(flag_help()) == {field.name for field in fields(LabSettings)}


def test_environment_variables_sit_between_invoke_yaml_and_the_flags():
    environ = {
        "INVOKE_LAB_OPERATOR": "false", "INVOKE_LAB_GPUS": "1", "INVOKE_LAB_REGION": "eu-west-1",
        "INVOKE_LAB_SPEED": "30", "OTHER": "x",
    }  # fmt: skip
    config = Config(project_location=None)
    config.update({"lab": {"gpus": 2, "speed": 10, "chart_version": "v26.3.0"}})

    settings = load_settings(
        config=config.lab, flags={"region": None, "speed": 90}, environ=environ
    )

    assert (settings.operator, settings.gpus, settings.region) == (False, 1, "eu-west-1")
    assert (settings.speed, settings.chart_version) == (90.0, "v26.3.0")


@pytest.mark.parametrize("section", [5, "text", [1, 2]])
def test_a_lab_section_that_is_not_a_mapping_is_refused_by_name(section):
    with pytest.raises(SettingsError, match="the `lab:` section of invoke.yaml is a"):
        load_settings(config=section)
