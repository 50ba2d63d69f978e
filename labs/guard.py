"""Refuse to mutate anything that is not the lab's own cluster and account.

The study group shares machines and AWS accounts with real clusters; a kubeconfig
or profile pointing elsewhere must stop a command before its first write, with a
message that says what was expected, what was found and how to fix it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labs.errors import LabError

if TYPE_CHECKING:
    from labs.lab import Lab


class GuardError(LabError):
    """The target is not the lab's own; nothing was changed."""


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()


def check_cluster(lab: Lab) -> None:
    """The lab kubeconfig must point at the API server the lab's stack created."""
    from labs.cluster import api_server_url

    expected = str(lab.outputs.get("cluster_endpoint") or "")
    if not expected:
        raise GuardError(
            f"lab {lab.name!r} has no cluster endpoint on record; run "
            f"`invoke lab.up --lab {lab.name}` before touching its cluster"
        )
    actual = api_server_url(lab.kube)
    if not _same_url(actual, expected):
        raise GuardError(
            f"refusing to change the cluster at {actual}: lab {lab.name!r} is at {expected}. "
            f"The kubeconfig {lab.paths.kubeconfig} points at another cluster; run "
            f"`invoke lab.up --lab {lab.name}` to rewrite it. Nothing was changed."
        )


def check_account(lab: Lab) -> None:
    """AWS credentials must reach the lab's account and region, and its cluster's endpoint."""
    expected_account = lab.record.get("account_id")
    identity = lab.aws_client("sts").get_caller_identity()
    if expected_account and identity["Account"] != expected_account:
        raise GuardError(
            f"refusing to change AWS account {identity['Account']}: lab {lab.name!r} lives in "
            f"account {expected_account}. Switch AWS_PROFILE to that account. Nothing was changed."
        )
    cluster_name = lab.outputs.get("cluster_name") or lab.name
    eks = lab.aws_client("eks")
    if eks.meta.region_name != lab.region:
        raise GuardError(
            f"refusing to act in region {eks.meta.region_name}: lab {lab.name!r} is in "
            f"{lab.region}. Nothing was changed."
        )
    endpoint = eks.describe_cluster(name=cluster_name)["cluster"].get("endpoint", "")
    expected = str(lab.outputs.get("cluster_endpoint") or "")
    if expected and not _same_url(endpoint, expected):
        raise GuardError(
            f"refusing to change EKS cluster {cluster_name!r} at {endpoint}: lab {lab.name!r} "
            f"recorded {expected}. Nothing was changed."
        )


def check_lab_target(lab: Lab, cluster: bool = True, account: bool = True) -> None:
    """Run the checks a mutation needs; raise GuardError before anything is changed."""
    if account:
        check_account(lab)
    if cluster:
        check_cluster(lab)
