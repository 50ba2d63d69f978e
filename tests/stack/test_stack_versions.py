"""Version pins: Terraform, providers and modules the stack is known to work with."""

from __future__ import annotations

import pytest
from stack_spec import MODULE_VERSIONS, PROVIDER_VERSIONS, TERRAFORM_REQUIRED_VERSION, stack


def terraform_settings() -> dict:
    (settings,) = stack()["terraform"]
    return settings


def required_providers() -> dict:
    (providers,) = terraform_settings()["required_providers"]
    return providers


def test_terraform_is_at_least_1_5_7():
    assert terraform_settings()["required_version"] == TERRAFORM_REQUIRED_VERSION


def test_aws_provider_is_at_least_6_28():
    assert required_providers()["aws"]["version"] == ">= 6.28"


def test_helm_provider_stays_on_2_x_from_2_17():
    assert required_providers()["helm"]["version"] == "~> 2.17"


def test_required_providers_are_exactly_the_pinned_set():
    assert set(required_providers()) == set(PROVIDER_VERSIONS)


@pytest.mark.parametrize("name", sorted(PROVIDER_VERSIONS))
def test_provider_source_and_version_are_pinned(name):
    source, version = PROVIDER_VERSIONS[name]
    assert required_providers()[name] == {"source": source, "version": version}


@pytest.mark.parametrize("name", sorted(MODULE_VERSIONS))
def test_module_source_and_version_are_pinned(name):
    source, version = MODULE_VERSIONS[name]
    module = stack()["module"][name]
    assert (module["source"], module["version"]) == (source, version)


def test_aws_provider_region_is_the_target_region():
    (aws,) = [block["aws"] for block in stack()["provider"] if "aws" in block]
    assert aws["region"] == "${var.TargetRegion}"
