"""The lab's settings: one typed, frozen object, layered and validated once at load.

Layers, later wins: the defaults below < the `lab:` section of the invoke configuration
(invoke.yaml) < INVOKE_LAB_* environment variables < command-line flags. A bad value
stops the run before anything is created or billed, with a message that names the
setting, where it came from, the value and what to do.

The environment is read here, not by Invoke: Invoke reads INVOKE_LAB_* only for keys it
already knows, which would mean registering a `lab` mapping of defaults, and then a
hand-written `lab: 5` in invoke.yaml stops Invoke itself with a traceback before any task
runs. Unregistered, the section reaches `load_settings` as written and is refused by name.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
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
# The GPU time limit: hours and/or minutes ("90m", "4h", "1h30m"), or "off".
_TTL = re.compile(r"(?:(?P<hours>[0-9]+)h)?(?:(?P<minutes>[0-9]+)m)?")
TTL_OFF = "off"
TTL_MIN, TTL_MAX = timedelta(minutes=1), timedelta(days=7)
# Every numeric setting's accepted range (inclusive) and its unit: a value out of range
# (1e308 overflows the rehearsal's clock) is refused where it enters, naming the range.
RANGES: dict[str, tuple[float, float, str]] = {
    "speed": (0.01, 10000.0, "times real time"),
    "node_ready_timeout": (1.0, 86400.0, "seconds"),
    "operator_ready_timeout": (1.0, 86400.0, "seconds"),
    "probe_timeout": (1.0, 86400.0, "seconds"),
    "lock_wait": (0.1, 3600.0, "seconds"),
    "gpu_max": (1, 100, "GPU nodes"),
}
# Who runs a rehearsal's nodes: the world's model of a kubelet, or the real kubelet v1.35.4 per
# node behind the project's container runtime (Linux: as root, or rootless in user namespaces).
MODELLED_KUBELETS, REAL_KUBELETS = "modelled", "real"
KUBELETS = (MODELLED_KUBELETS, REAL_KUBELETS)
DEFAULT_KUBELETS = REAL_KUBELETS
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
    monitoring: bool = dataclasses.field(
        default=False,
        metadata=_help(
            "install kube-prometheus-stack with the lab's GPU alert rules (costs money on EKS; "
            "the rehearsal runs a real Prometheus and kube-state-metrics)"
        ),
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
    kubelets: str = dataclasses.field(
        default=DEFAULT_KUBELETS,
        metadata=_help(
            "who runs a rehearsal's nodes: real (the default: kubelet v1.35.4 on every node, in "
            "namespaces of its own; Linux, as root or rootless) or modelled (the world's own "
            "model of a kubelet: quicker, and for machines that refuse those namespaces)"
        ),
    )
    ttl: str = dataclasses.field(
        default="4h",
        metadata=_help(
            "GPU time limit: AWS scales GPU nodes to 0 this long after lab.up/lab.scale, "
            "laptop or not (e.g. 90m, 4h; 'off' asks first)"
        ),
    )
    lock_wait: float = dataclasses.field(
        default=5.0,
        metadata=_help("seconds a changing command waits while another one holds the lab"),
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
    def gpu_ttl(self) -> timedelta | None:
        """The GPU time limit as a duration; None when it is off."""
        return parse_ttl(self.ttl)

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
        `enable_monitoring` is the `monitoring` setting (a lab's first apply; later applies
        keep the value last applied, see labs.commands.up.full_variables).
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
            stack.ENABLE_MONITORING: self.monitoring,
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


def _as_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def load_settings(
    config: Any = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LabSettings:
    """Layer defaults < invoke config (`lab` section) < INVOKE_LAB_* in `environ` < CLI
    flags, then validate.

    None values are treated as "not given" in every layer, so a task can pass all of its
    optional flags straight through. `config` is the `lab:` section as Invoke read it,
    which a hand-edited invoke.yaml can make anything.
    """
    raw: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers = (
        (_config_layer(config), _config_source),
        (_environment_layer(environ or {}), _environment_source),
        (flags, _flag_source),
    )
    for layer, describe in layers:
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


def _config_layer(config: Any) -> Mapping[str, Any]:
    """The `lab:` section as a mapping, or a SettingsError saying what it is instead."""
    if config is None:
        return {}
    if not callable(getattr(config, "items", None)):
        raise SettingsError(
            f"the `lab:` section of invoke.yaml is a {type(config).__name__} ({config!r}), not a "
            "mapping of settings; write it as `lab:` followed by indented `name: value` lines"
        )
    return dict(config.items())


def _environment_layer(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        name: environ[variable]
        for name in _FIELDS
        if (variable := _environment_source(name)) in environ
    }


def _config_source(key: str) -> str:
    return f"lab.{key} in invoke.yaml"


def _environment_source(key: str) -> str:
    return f"INVOKE_LAB_{key.upper()}"


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
            if isinstance(value, bool) or not math.isfinite(number := float(value)):
                raise ValueError
            return number
        if kind == "Path":
            if not str(value).strip():  # Path("") would quietly be the current directory
                raise ValueError
            return Path(value)
        if not isinstance(value, str):
            raise ValueError
        return value
    except (TypeError, ValueError):
        wanted = {
            "bool": "true or false",
            "int": "a whole number",
            "float": "a finite number",
            "Path": "a directory path",
        }
        example = _as_text(_FIELDS[name].default)
        raise SettingsError(
            f"{source} {value!r} is not {wanted.get(kind, 'text')}; "
            f"give {name} as {wanted.get(kind, 'text')}, e.g. {example}"
        ) from None


def range_problem(name: str, value: float) -> str | None:
    """Why `value` does not fit the numeric setting `name`, naming its range; None if it fits."""
    low, high, unit = RANGES[name]
    if math.isfinite(value) and low <= value <= high:
        return None
    return f"is outside {low:g}..{high:g} {unit}; use a number from {low:g} to {high:g}"


def parse_speed(text: str, source: str) -> float:
    """A speed typed as `source` (e.g. --speed), checked for finiteness and range."""
    try:
        speed = float(text)
    except ValueError:
        raise SettingsError(f"{source} {text!r} is not a number; use e.g. 1 or 4") from None
    if problem := range_problem("speed", speed):
        raise SettingsError(f"{source} {text!r} {problem}")
    return speed


def parse_ttl(text: str) -> timedelta | None:
    """ "90m", "4h" or "1h30m" as a duration, "off" as None; ValueError for anything else,
    OverflowError for more hours than a duration holds."""
    if text.strip().lower() == TTL_OFF:
        return None
    match = _TTL.fullmatch(text.strip().lower())
    if not text.strip() or match is None:
        raise ValueError(text)
    return timedelta(hours=int(match["hours"] or 0), minutes=int(match["minutes"] or 0))


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(value)


def check_region_exists(settings: LabSettings) -> None:
    """Before a lab is created: the region is one AWS has, not only shaped like one.

    Read from botocore's endpoint data (no network call, ~0.4 s), so only lab.up pays it.
    """
    import botocore.session

    session = botocore.session.get_session()
    known = {
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("ec2", partition_name=partition)
    }
    if settings.region not in known:
        raise SettingsError(
            f"region {settings.region!r} is not an AWS region (none of the EC2 regions botocore "
            "knows); use one like ap-northeast-2 or us-east-1. Nothing was created."
        )


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
    if settings.kubelets not in KUBELETS:
        fail("kubelets", "is not who can run the nodes", f"use one of {', '.join(KUBELETS)}")
    for name in RANGES:
        if problem := range_problem(name, getattr(settings, name)):
            fail(name, *problem.split("; ", 1))
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
    try:
        ttl = settings.gpu_ttl
    except ValueError:
        fail("ttl", "is not a duration", "use minutes or hours like 90m, 4h or 1h30m, or off")
    except OverflowError:
        fail("ttl", "is outside 1m..168h", "a GPU time limit is at least 1m and at most a week")
    else:
        if ttl is not None and not TTL_MIN <= ttl <= TTL_MAX:
            fail("ttl", "is outside 1m..168h", "a GPU time limit is at least 1m and at most a week")
    if not str(settings.state_dir).strip():
        fail("state_dir", "is empty", "name a directory, e.g. .labs")
    if settings.context and not settings.kubeconfig:
        fail("context", "names a context without a kubeconfig", "pass --kubeconfig FILE too")
    if settings.kubeconfig and not Path(settings.kubeconfig).expanduser().is_file():
        fail("kubeconfig", "is not a readable file", "name an existing kubeconfig file")
