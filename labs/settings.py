"""The lab's settings: one typed, frozen object, layered and validated once at load.

Layers, later wins: the defaults below < the invoke config's `lab` section
(invoke.yaml, INVOKE_LAB_* environment variables) < command-line flags. A bad value
stops the run before anything is created or billed, with a message that names the
setting, where it came from, the value and what to do.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from labs.aws import stack
from labs.errors import LabError
from labs.state import LabPaths

# The stack spreads its subnets over three availability zones, suffixes a, b and c.
AVAILABILITY_ZONE_SUFFIXES = ("a", "b", "c")
# Stack variable listing those zones; the stack checks that they lie in TargetRegion.
AVAILABILITY_ZONES_VARIABLE = stack.AVAILABILITY_ZONES
# Namespace the stack installs the GPU Operator into.
OPERATOR_NAMESPACE = "gpu-operator"
# ClusterBaseName prefixes node-group, IAM and security-group names; AWS caps several.
LAB_NAME_MAX_LENGTH = 32

_LAB_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9-]*[A-Za-z0-9])?")
_REGION = re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]")
_CHART_VERSION = re.compile(r"v[0-9]+\.[0-9]+\.[0-9]+")
_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class SettingsError(LabError, ValueError):
    """A setting is invalid; the message names it, its source and the fix."""


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclasses.dataclass(frozen=True)
class LabSettings:
    """Everything one lab run needs to know, after layering and validation."""

    lab: str = dataclasses.field(
        default="myeks", metadata=_help("lab name, also the EKS ClusterBaseName (default myeks)")
    )
    region: str = dataclasses.field(
        default="ap-northeast-2", metadata=_help("AWS region, e.g. ap-northeast-2")
    )
    gpus: int = dataclasses.field(
        default=2, metadata=_help("GPU nodes to scale the GPU node group to (default 2)")
    )
    gpu_max: int = dataclasses.field(
        default=2, metadata=_help("max size of the GPU node group, a vCPU-quota guard (default 2)")
    )
    gpu_instance_type: str = dataclasses.field(
        default="g5.xlarge", metadata=_help("GPU instance type (default g5.xlarge)")
    )
    chart_version: str = dataclasses.field(
        default="v26.3.1", metadata=_help("GPU Operator Helm chart version, vX.Y.Z")
    )
    operator: bool = dataclasses.field(
        default=True, metadata=_help("install the NVIDIA GPU Operator (default true)")
    )
    gpu_az_index: int = dataclasses.field(
        default=0, metadata=_help("which availability zone (0-2) holds the GPU nodes")
    )
    node_ready_timeout: float = dataclasses.field(
        default=900.0, metadata=_help("seconds to wait for GPU nodes to be Ready")
    )
    operator_ready_timeout: float = dataclasses.field(
        default=900.0, metadata=_help("seconds to wait for the GPU Operator to be ready")
    )
    probe_timeout: float = dataclasses.field(
        default=300.0, metadata=_help("seconds to wait for the GPU probe pod")
    )
    state_dir: Path = dataclasses.field(
        default=Path(".labs"), metadata=_help("where labs keep their state (default .labs)")
    )
    stack_dir: Path = dataclasses.field(
        default=stack.STACK_DIR,
        metadata=_help("Terraform stack an AWS lab applies (default: the checkout's terraform/)"),
    )
    speed: float = dataclasses.field(
        default=60.0, metadata=_help("rehearsal speed-up factor for simulated delays")
    )
    kubeconfig: str = dataclasses.field(
        default="",
        metadata=_help("read an existing cluster through this kubeconfig instead of a lab"),
    )
    context: str = dataclasses.field(
        default="", metadata=_help("the kubeconfig context to read (default: its current one)")
    )

    @property
    def paths(self) -> LabPaths:
        """This lab's files under the state directory."""
        return LabPaths.for_lab(self.state_dir, self.lab)

    @property
    def availability_zones(self) -> list[str]:
        """The stack's availability zones in this lab's region."""
        return [f"{self.region}{suffix}" for suffix in AVAILABILITY_ZONE_SUFFIXES]

    def stack_variables(
        self, operator_enabled: bool, *, cross_node_traffic: bool = True
    ) -> dict[str, Any]:
        """The full variable set for one apply of the stack.

        `gpu_desired_size` is always 0: the node group ignores later changes to it, so
        GPU nodes are scaled through the EKS API, never through Terraform.
        `cross_node_traffic=False` removes both node-to-node allow rules (nccl-sg-block).
        """
        return {
            stack.CLUSTER_BASE_NAME: self.lab,
            stack.TARGET_REGION: self.region,
            AVAILABILITY_ZONES_VARIABLE: self.availability_zones,
            stack.GPU_INSTANCE_TYPE: self.gpu_instance_type,
            stack.GPU_MAX_SIZE: self.gpu_max,
            stack.GPU_DESIRED_SIZE: 0,
            stack.GPU_AZ_INDEX: self.gpu_az_index,
            stack.ENABLE_GPU_OPERATOR: operator_enabled,
            stack.GPU_OPERATOR_NAMESPACE: OPERATOR_NAMESPACE,
            stack.GPU_OPERATOR_CHART_VERSION: self.chart_version,
            stack.ENABLE_AUX_SG_VPC_ALLOW: cross_node_traffic,
            stack.NODE_SG_ENABLE_RECOMMENDED_RULES: cross_node_traffic,
        }


_FIELDS = {field.name: field for field in dataclasses.fields(LabSettings)}
_DEFAULTS = LabSettings()


def flag_help() -> dict[str, str]:
    """Help text per setting, for Invoke's `@task(help=...)`."""
    return {name: field.metadata["help"] for name, field in _FIELDS.items()}


def config_defaults() -> dict[str, str]:
    """The defaults as text, for `Collection.configure({"lab": config_defaults()})`.

    Invoke reads INVOKE_LAB_* variables only for keys it already knows and casts them to
    the default's type, turning any non-empty text (even "false") into True for a
    boolean. Registering the defaults as text leaves parsing, and its error messages, to
    `load_settings`.
    """
    return {name: _as_text(getattr(_DEFAULTS, name)) for name in _FIELDS}


def _as_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def load_settings(
    config: Mapping[str, Any] | None = None, flags: Mapping[str, Any] | None = None
) -> LabSettings:
    """Layer defaults < invoke config (`lab` section) < CLI flags, then validate.

    None values are treated as "not given" in both layers, so a task can pass all of
    its optional flags straight through.
    """
    raw: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer, describe in ((config, _config_source), (flags, _flag_source)):
        for key, value in (layer or {}).items():
            if value is None:
                continue
            if key not in _FIELDS:
                raise SettingsError(_unknown_key_message(key, describe(key)))
            raw[key] = value
            sources[key] = describe(key)
    values = {name: _coerce(name, value, sources[name]) for name, value in raw.items()}
    settings = LabSettings(**values)

    def described(name: str) -> str:
        if name in sources:
            return f"{sources[name]} {raw[name]!r}"
        return f"default {name} {getattr(settings, name)!r}"

    _validate(settings, described)
    return settings


def _config_source(key: str) -> str:
    return f"lab.{key} (invoke.yaml or INVOKE_LAB_{key.upper()})"


def _flag_source(key: str) -> str:
    return f"--{key.replace('_', '-')}"


def _unknown_key_message(key: str, source: str) -> str:
    close = difflib.get_close_matches(key, _FIELDS, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"unknown lab setting '{key}' from {source}.{hint} Known settings: {', '.join(_FIELDS)}."


def _coerce(name: str, value: Any, source: str) -> Any:
    """Turn config and environment text into the field's type, or say why not."""
    kind = str(_FIELDS[name].type)  # a string: annotations are postponed
    try:
        if kind == "bool":
            return _to_bool(value)
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "Path":
            return Path(value)
        if not isinstance(value, str):
            raise ValueError
        return value
    except (TypeError, ValueError):
        wanted = {"bool": "true or false", "int": "a whole number", "float": "a number"}
        example = _as_text(_FIELDS[name].default)
        raise SettingsError(
            f"{source} {value!r} is not {wanted.get(kind, 'text')}; "
            f"give {name} as {wanted.get(kind, 'text')}, e.g. {example}"
        ) from None


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(value)


def _validate(settings: LabSettings, described: Callable[[str], str]) -> None:
    """Check each value, then how the values fit together.

    `described(name)` says where a value came from and what it was, as the user gave it.
    """

    def fail(name: str, problem: str, fix: str) -> None:
        raise SettingsError(f"{described(name)} {problem}; {fix}.")

    if not (_LAB_NAME.fullmatch(settings.lab) and len(settings.lab) <= LAB_NAME_MAX_LENGTH):
        fail(
            "lab",
            "is not a usable EKS cluster name",
            f"use 1-{LAB_NAME_MAX_LENGTH} letters, digits and inner hyphens, letter first",
        )
    if not _REGION.fullmatch(settings.region):
        fail("region", "is not an AWS region name", "use one like ap-northeast-2 or us-east-1")
    if not _INSTANCE_TYPE.fullmatch(settings.gpu_instance_type):
        fail("gpu_instance_type", "is not an EC2 instance type", "use one like g5.xlarge")
    if not _CHART_VERSION.fullmatch(settings.chart_version):
        fail("chart_version", "is not a chart version", "use the form vX.Y.Z, e.g. v26.3.1")
    if settings.gpu_max < 1:
        fail("gpu_max", "is below 1", "the GPU node group needs room for at least one node")
    if settings.gpus < 0:
        fail("gpus", "is negative", "use 0 (no GPU nodes) or more")
    if settings.gpus > settings.gpu_max:
        fail(
            "gpus",
            f"exceeds the GPU node group's max size {settings.gpu_max}",
            "ask for fewer GPU nodes, or raise gpu_max (check your G/VT vCPU quota first)",
        )
    zone_count = len(AVAILABILITY_ZONE_SUFFIXES)
    if not 0 <= settings.gpu_az_index < zone_count:
        fail(
            "gpu_az_index",
            f"is outside the stack's {zone_count} availability zones",
            f"use 0 to {zone_count - 1}",
        )
    for name in ("node_ready_timeout", "operator_ready_timeout", "probe_timeout", "speed"):
        if getattr(settings, name) <= 0:
            fail(name, "is not positive", "use a number above 0")
    if not str(settings.state_dir).strip():
        fail("state_dir", "is empty", "name a directory, e.g. .labs")
    if settings.context and not settings.kubeconfig:
        fail("context", "names a context without a kubeconfig", "pass --kubeconfig FILE too")
    if settings.kubeconfig and not Path(settings.kubeconfig).expanduser().is_file():
        fail("kubeconfig", "is not a readable file", "name an existing kubeconfig file")
