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


def check_cluster(lab: Lab, reading: bool = False) -> None:
    """The lab kubeconfig must point at the API server the lab's stack created (`reading`: to
    read it as the lab's, after a change made elsewhere, as lab.down's scale to 0)."""
    from labs.kube.view import api_server_url, check_access

    expected = str(lab.outputs.get("cluster_endpoint") or "")
    if not expected:
        raise GuardError(
            f"lab {lab.name!r} has no cluster endpoint on record; run "
            f"`invoke lab.up --lab {lab.name}` before touching its cluster"
        )
    actual = api_server_url(lab.kube)
    if not _same_url(actual, expected):
        verb, outcome = (
            ("read", "It was not read.") if reading else ("change", "Nothing was changed.")
        )
        raise GuardError(
            f"refusing to {verb} the cluster at {actual}: lab {lab.name!r} is at {expected}. "
            f"The kubeconfig {lab.paths.kubeconfig} points at another cluster; run "
            f"`invoke lab.up --lab {lab.name}` to rewrite it. {outcome}."
        )
    check_access(lab.kube)


def check_account(lab: Lab) -> None:
    """Credentials must reach the lab's account; its cluster, the lab's region and endpoint."""
    from botocore.exceptions import ClientError

    from labs.aws.cloud import caller_identity

    expected_account = lab.record.get("account_id")
    account = caller_identity(lab.aws).account_id
    if expected_account and account != expected_account:
        raise GuardError(
            f"refusing to change AWS account {account}: lab {lab.name!r} lives in account "
            f"{expected_account}. Switch AWS_PROFILE to that account. Nothing was changed."
        )
    try:
        cluster = lab.aws_client("eks").describe_cluster(name=lab.cluster_name)["cluster"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return  # no cluster of that name here: nothing of anyone else's can be hit
        raise
    arn_region = cluster.get("arn", "").split(":")[3:4]
    if arn_region and arn_region[0] != lab.region:
        raise GuardError(
            f"refusing to act on cluster {cluster['arn']}: lab {lab.name!r} is in {lab.region}. "
            "Nothing was changed."
        )
    expected = str(lab.outputs.get("cluster_endpoint") or "")
    endpoint = str(cluster.get("endpoint") or "")
    if expected and not _same_url(endpoint, expected):
        raise GuardError(
            f"refusing to change EKS cluster {lab.cluster_name!r} at {endpoint}: lab {lab.name!r} "
            f"recorded {expected}. Nothing was changed."
        )


def check_lab_target(lab: Lab, cluster: bool = True, account: bool = True) -> None:
    """Run the checks a mutation needs; raise GuardError before anything is changed.

    A target the tool did not create is refused first, whatever else would match.
    """
    lab.backend.check_writable(lab, "a change")
    if account:
        check_account(lab)
    if cluster:
        check_cluster(lab)
