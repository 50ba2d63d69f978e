"""The lab's AWS side through botocore: sessions, preflight checks and GPU node-group scaling.

Every client comes from one factory, so the same code talks to AWS or to moto on
loopback (the rehearsal backend) by passing `endpoint_url`, and retries are explicit.
GPU nodes are scaled only through the EKS API (the stack's node group ignores later
changes to its desired size), and only when the node group is not already there; the
update EKS returns is then followed until it succeeds or fails with AWS's own errors.
"""

from __future__ import annotations

import functools
import math
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ProfileNotFound

from labs.errors import LabError

# Bounded: an endpoint that accepts but never answers fails each try within 30 s, not 60.
RETRY_CONFIG = Config(
    connect_timeout=10, read_timeout=30, retries={"mode": "adaptive", "max_attempts": 10}
)
# Retry budget for look-ups that only inform (quotas): a broken API must not stall the lab.
ADVISORY_ATTEMPTS = 2
NO_CREDENTIALS_MESSAGE = (
    "no AWS credentials found; run `aws configure` (or `aws sso login`) or set AWS_PROFILE"
)
# vCPUs per GPU instance type: On-Demand quotas for GPU instances are counted in vCPUs.
INSTANCE_VCPUS: dict[str, int] = {
    "g4dn.xlarge": 4,
    "g4dn.2xlarge": 8,
    "g5.xlarge": 4,
    "g5.2xlarge": 8,
    "g5.4xlarge": 16,
    "g5.12xlarge": 48,
    "g6.xlarge": 4,
    "g6.2xlarge": 8,
    "g6e.xlarge": 4,
    "p3.2xlarge": 8,
}
# Service Quotas codes (service "ec2") per instance family letter.
GPU_QUOTAS: dict[str, tuple[str, str]] = {
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "p": ("L-417A185B", "Running On-Demand P instances"),
}
INSTALL_HINTS: dict[str, str] = {
    "terraform": "https://developer.hashicorp.com/terraform/install",
    "kubectl": "https://kubernetes.io/docs/tasks/tools/",
    "aws": "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html",
}
_CREDENTIAL_KEYS = frozenset(
    {"aws_access_key_id", "aws_secret_access_key", "aws_session_token", "profile_name"}
)
_REJECTED_CREDENTIALS = frozenset(
    {
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
        "AccessDenied",
    }
)
_FAILED_NODEGROUP_STATES = frozenset({"CREATE_FAILED", "DELETE_FAILED", "DEGRADED"})
_FINISHED_UPDATE_STATES = frozenset({"Successful", "Failed", "Cancelled"})
_BILLED_INSTANCE_STATES = ["pending", "running", "stopping", "shutting-down"]


class CloudError(LabError, RuntimeError):
    """An AWS call could not do what the lab needs; the message says what to do."""


class WaitExpired(CloudError):
    """A wait ran out of time; the caller knows what it was for and says what is known."""


class NodegroupNotFound(CloudError):
    """The node group does not exist (yet): the lab is not up, or was destroyed."""


class AwsSession:
    """One botocore session plus a client factory with the lab's endpoint and retry policy.

    botocore's, not boto3's: its clients are the same, and a command that makes a few AWS
    calls does not import boto3's resource layer and s3transfer (a quarter of a second)."""

    def __init__(
        self, session: botocore.session.Session, region: str, endpoint_url: str | None
    ) -> None:
        self.session = session
        self.region = region
        self.endpoint_url = endpoint_url
        self._clients: dict[tuple[str, int | None], Any] = {}

    def client(self, service: str, *, max_attempts: int | None = None) -> Any:
        """A (cached) boto3 client for `service` in the lab's region.

        `max_attempts` overrides the retry budget (see ADVISORY_ATTEMPTS).
        """
        key = (service, max_attempts)
        if key not in self._clients:
            if self.session.get_credentials() is None:  # else every call fails deep in signing
                raise CloudError(NO_CREDENTIALS_MESSAGE)
            config = RETRY_CONFIG
            if max_attempts is not None:
                config = config.merge(Config(retries={"max_attempts": max_attempts}))
            self._clients[key] = self.session.create_client(
                service, region_name=self.region, endpoint_url=self.endpoint_url, config=config
            )
        return self._clients[key]


def aws_session(
    region: str,
    endpoint_url: str | None = None,
    credentials: Mapping[str, str] | None = None,
) -> AwsSession:
    """Open a session for `region`; `endpoint_url` points every client at moto, say.

    `credentials` may hold aws_access_key_id, aws_secret_access_key, aws_session_token
    or profile_name; without it boto3's usual chain applies (env, profile, SSO, role).
    """
    unknown = set(credentials or {}) - _CREDENTIAL_KEYS
    if unknown:
        raise CloudError(
            f"unknown credential keys {sorted(unknown)}; use {sorted(_CREDENTIAL_KEYS)}"
        )
    given = dict(credentials or {})
    core = botocore_session()
    core.set_config_variable("region", region)
    if "profile_name" in given:
        core.set_config_variable("profile", given["profile_name"])
    if "aws_access_key_id" in given or "aws_secret_access_key" in given:
        core.set_credentials(
            given.get("aws_access_key_id"),
            given.get("aws_secret_access_key"),
            given.get("aws_session_token"),
        )
    try:
        core.get_scoped_config()  # a profile that does not exist fails here, not at first use
    except ProfileNotFound as error:
        raise CloudError(f"{error}; list profiles with `aws configure list-profiles`") from None
    return AwsSession(core, region, endpoint_url)


@functools.cache
def _model_loader() -> botocore.loaders.Loader:
    """One loader per process: botocore parses its JSON models (EC2's alone takes a few tenths
    of a second) once, not again for every session a long-lived process opens."""
    return botocore.loaders.create_loader()


def botocore_session() -> botocore.session.Session:
    """A fresh botocore session on the process's shared model loader."""
    session = botocore.session.get_session()
    session.register_component("data_loader", _model_loader())
    return session


@dataclass(frozen=True)
class CallerIdentity:
    account_id: str
    arn: str


def caller_identity(aws: AwsSession) -> CallerIdentity:
    """Who the lab acts as; fails clearly when credentials are missing or rejected."""
    try:
        identity = aws.client("sts").get_caller_identity()
    except NoCredentialsError:
        raise CloudError(NO_CREDENTIALS_MESSAGE) from None
    except ClientError as error:
        code, message = _error(error)
        if code in _REJECTED_CREDENTIALS:
            raise CloudError(
                f"AWS rejected the credentials ({code}: {message}); refresh them with "
                "`aws configure` or `aws sso login`, or pick another AWS_PROFILE"
            ) from None
        raise CloudError(f"could not read the caller identity ({code}: {message})") from None
    except BotoCoreError as error:
        raise CloudError(f"could not reach AWS STS: {error}") from None
    return CallerIdentity(account_id=identity["Account"], arn=identity["Arn"])


def max_gpus_for_quota(vcpus: float, instance_type: str) -> int:
    """How many `instance_type` nodes fit in a vCPU quota."""
    if instance_type not in INSTANCE_VCPUS:
        raise CloudError(
            f"no vCPU count on file for {instance_type}; known types: "
            f"{', '.join(sorted(INSTANCE_VCPUS))}"
        )
    return math.floor(vcpus / INSTANCE_VCPUS[instance_type])


def gpu_vcpu_quota(aws: AwsSession, instance_type: str) -> tuple[float | None, str]:
    """The account's On-Demand vCPU quota for the type's family, or None and why not."""
    family = GPU_QUOTAS.get(instance_type[:1])
    if family is None:
        return None, f"no GPU quota known for the {instance_type} family"
    code, name = family
    quotas = aws.client("service-quotas", max_attempts=ADVISORY_ATTEMPTS)
    try:
        try:
            quota = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)
        except ClientError as error:
            if _error(error)[0] != "NoSuchResourceException":
                raise
            quota = quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)
    except ClientError as error:
        return None, f"{name} ({code}) unknown: {_readable(error)}"
    except (BotoCoreError, NotImplementedError) as error:
        return None, f"{name} ({code}) unknown: {error}"
    return float(quota["Quota"]["Value"]), f"{name} ({code})"


@dataclass(frozen=True)
class PreflightReport:
    """What the lab found before creating anything; `problems` block a start."""

    account_id: str
    arn: str
    region: str
    tools: dict[str, str | None]
    instance_type: str
    quota_vcpus: float | None
    quota_note: str
    max_gpus_by_quota: int | None
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """The report as printable lines."""
        quota = self.quota_note
        if self.quota_vcpus is not None:
            quota += f": {self.quota_vcpus:g} vCPUs"
        if self.max_gpus_by_quota is not None:
            quota += f", room for {self.max_gpus_by_quota} x {self.instance_type}"
        lines = [
            f"account   {self.account_id} ({self.arn})",
            f"region    {self.region}",
            *(f"tool      {name}: {path or 'MISSING'}" for name, path in self.tools.items()),
            f"quota     {quota}",
        ]
        return lines + [f"PROBLEM   {problem}" for problem in self.problems]


def preflight(
    aws: AwsSession,
    *,
    instance_type: str,
    gpu_max: int,
    tools: Iterable[str] = ("terraform", "kubectl"),
) -> PreflightReport:
    """Check tools, credentials (CloudError when missing) and the GPU vCPU quota."""
    identity = caller_identity(aws)
    found = {tool: shutil.which(tool) for tool in tools}
    problems = [
        f"{tool} not found on PATH; install it ({INSTALL_HINTS.get(tool, 'see its docs')})"
        for tool, path in found.items()
        if path is None
    ]
    vcpus, note = gpu_vcpu_quota(aws, instance_type)
    fits = None
    if vcpus is not None and instance_type in INSTANCE_VCPUS:
        fits = max_gpus_for_quota(vcpus, instance_type)
        if fits < gpu_max:
            problems.append(
                f"gpu_max {gpu_max} x {instance_type} needs "
                f"{gpu_max * INSTANCE_VCPUS[instance_type]} vCPUs but {note} allows "
                f"{vcpus:g} in {aws.region}; request an increase in Service Quotas "
                f"or lower gpu_max to {fits} (INVOKE_LAB_GPU_MAX, or lab.gpu_max in invoke.yaml)"
            )
    return PreflightReport(
        account_id=identity.account_id,
        arn=identity.arn,
        region=aws.region,
        tools=found,
        instance_type=instance_type,
        quota_vcpus=vcpus,
        quota_note=note,
        max_gpus_by_quota=fits,
        problems=tuple(problems),
    )


def describe_gpu_nodegroup(eks: Any, cluster: str, nodegroup: str) -> dict[str, Any]:
    """The node group's scaling, status, instance types and tags as a plain dict."""
    try:
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
    except ClientError as error:
        raise _nodegroup_error(error, cluster, nodegroup, "describe") from None
    scaling = group.get("scalingConfig", {})
    return {
        "name": group["nodegroupName"],
        "status": group["status"],
        "min_size": scaling.get("minSize"),
        "max_size": scaling.get("maxSize"),
        "desired_size": scaling.get("desiredSize"),
        "instance_types": list(group.get("instanceTypes", [])),
        "capacity_type": group.get("capacityType"),
        "tags": dict(group.get("tags") or {}),
        "health_issues": [
            f"{issue.get('code')}: {issue.get('message')}"
            for issue in group.get("health", {}).get("issues", [])
        ],
    }


def scale_gpu_nodegroup(
    eks: Any,
    cluster: str,
    nodegroup: str,
    desired: int,
    max_size: int,
    *,
    in_use_retries: int = 5,
    wait_timeout: float = 900.0,
    poll_interval: float = 15.0,
) -> str | None:
    """Set the node group to min 0 / max `max_size` / desired `desired` via the EKS API.

    Checks the numbers before calling AWS (EKS's own check is not everywhere), does
    nothing when the group is already scaled so (returns None), and waits out an
    update in progress, at most `in_use_retries` times. Returns the id of the update
    EKS started: follow it with `follow_update`.
    """
    _check_scaling(nodegroup, desired, max_size)
    target = {"minSize": 0, "maxSize": max_size, "desiredSize": desired}
    current = describe_gpu_nodegroup(eks, cluster, nodegroup)
    sizes = (current["min_size"], current["max_size"], current["desired_size"])
    if sizes == (0, max_size, desired):
        return None
    token = str(uuid.uuid4())
    for _ in range(in_use_retries + 1):
        try:
            response = eks.update_nodegroup_config(
                clusterName=cluster,
                nodegroupName=nodegroup,
                scalingConfig=target,
                clientRequestToken=token,
            )
            return str(response["update"]["id"])
        except ClientError as error:
            if _error(error)[0] != "ResourceInUseException":
                raise _nodegroup_error(error, cluster, nodegroup, "scale") from None
        wait_nodegroup_active(
            eks, cluster, nodegroup, timeout=wait_timeout, poll_interval=poll_interval
        )
    raise CloudError(
        f"node group {nodegroup} stayed busy with another update after {in_use_retries + 1} "
        f"tries; check `aws eks list-updates --name {cluster} --nodegroup-name {nodegroup}` "
        "and try again when it has finished"
    )


def _check_scaling(nodegroup: str, desired: int, max_size: int) -> None:
    for name, value in (("desired", desired), ("max_size", max_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise CloudError(f"{name} for {nodegroup} must be a whole number, not {value!r}")
    if max_size < 1:
        raise CloudError(f"max_size {max_size} for {nodegroup} must be at least 1")
    if not 0 <= desired <= max_size:
        raise CloudError(
            f"cannot scale {nodegroup} to {desired} nodes: use 0 to its max size {max_size} "
            "(raise gpu_max, within your vCPU quota, to go higher)"
        )


def wait_nodegroup_active(
    eks: Any,
    cluster: str,
    nodegroup: str,
    *,
    timeout: float = 1200.0,
    poll_interval: float = 15.0,
) -> dict[str, Any]:
    """Wait until the node group is ACTIVE; fail fast on a failed or degraded group."""

    def active() -> dict[str, Any] | None:
        group = describe_gpu_nodegroup(eks, cluster, nodegroup)
        if group["status"] in _FAILED_NODEGROUP_STATES:
            issues = "; ".join(group["health_issues"]) or "no health issues reported"
            raise CloudError(f"node group {nodegroup} is {group['status']}: {issues}")
        return group if group["status"] == "ACTIVE" else None

    return wait_until(active, timeout, poll_interval, f"node group {nodegroup} to be ACTIVE")


def follow_update(
    eks: Any,
    cluster: str,
    nodegroup: str,
    update_id: str,
    *,
    timeout: float = 1200.0,
    poll_interval: float = 15.0,
    on_wait: Callable[[float, str], None] | None = None,
) -> dict[str, Any]:
    """Wait for a node-group update to finish; return it when Successful.

    A Failed or Cancelled update raises CloudError with EKS's own errors, so a refused
    scale-up says why instead of ending in a node-wait timeout. `on_wait(elapsed, status)`
    is called between polls.
    """
    started = time.monotonic()

    def finished() -> dict[str, Any] | None:
        try:
            update = eks.describe_update(name=cluster, updateId=update_id, nodegroupName=nodegroup)[
                "update"
            ]
        except ClientError as error:
            raise _nodegroup_error(error, cluster, nodegroup, "follow the update of") from None
        if update["status"] in _FINISHED_UPDATE_STATES:
            return update
        if on_wait is not None:
            on_wait(time.monotonic() - started, update["status"])
        return None

    update = wait_until(finished, timeout, poll_interval, f"EKS update {update_id} of {nodegroup}")
    if update["status"] != "Successful":
        errors = "; ".join(
            f"{e.get('errorCode')}: {e.get('errorMessage')}"
            + (f" ({', '.join(e['resourceIds'])})" if e.get("resourceIds") else "")
            for e in update.get("errors") or []
        )
        raise CloudError(
            f"EKS update {update_id} of node group {nodegroup} {update['status']}: "
            f"{errors or 'EKS gave no error details'}; see `aws eks describe-update "
            f"--name {cluster} --nodegroup-name {nodegroup} --update-id {update_id}`"
        )
    return update


def nodegroup_instances(ec2: Any, cluster: str, nodegroup: str) -> list[str]:
    """IDs of the node group's EC2 instances that are billed or about to be."""
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "tag:eks:cluster-name", "Values": [cluster]},
            {"Name": "tag:eks:nodegroup-name", "Values": [nodegroup]},
            {"Name": "instance-state-name", "Values": _BILLED_INSTANCE_STATES},
        ]
    )
    return sorted(
        instance["InstanceId"]
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    )


def wait_nodegroup_instances_gone(
    ec2: Any,
    cluster: str,
    nodegroup: str,
    *,
    timeout: float = 900.0,
    poll_interval: float = 15.0,
) -> None:
    """Wait until no instance of the node group runs (the end of a GPU session's bill)."""
    wait_until(
        lambda: True if not nodegroup_instances(ec2, cluster, nodegroup) else None,
        timeout,
        poll_interval,
        f"the instances of {nodegroup} to terminate",
    )


def wait_until(
    check: Callable[[], Any],
    timeout: float,
    poll_interval: float,
    what: str,
) -> Any:
    """Call `check` until it returns something other than None; CloudError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            raise WaitExpired(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(poll_interval)


def _nodegroup_error(error: ClientError, cluster: str, nodegroup: str, action: str) -> CloudError:
    code, message = _error(error)
    if code == "ResourceNotFoundException":
        return NodegroupNotFound(
            f"node group {nodegroup} of cluster {cluster} not found ({message}); "
            "is the lab up? (`invoke lab.up`)"
        )
    if code == "InvalidParameterException":
        return CloudError(f"EKS refused to {action} {nodegroup}: {message}")
    return CloudError(f"could not {action} node group {nodegroup} ({code}: {message})")


def _readable(error: ClientError) -> str:
    """The error's message, or its HTTP status when the body is an HTML error page."""
    code, message = _error(error)
    if message.lstrip().startswith("<"):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", code)
        return f"the API answered HTTP {status}"
    return message


def _error(error: ClientError) -> tuple[str, str]:
    details = error.response.get("Error", {})
    return details.get("Code", "Unknown"), details.get("Message", str(error))
