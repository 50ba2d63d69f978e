"""Who the lab's users are, on both sides, as with an EKS cluster made with access entries.

The world's AWS keys belong to an IAM user of the stand-in account (`LAB_USER`), so `aws sts
get-caller-identity` names it; the cluster's access entry for its creator (the stack sets
`enable_cluster_creator_admin_permissions`) maps that user to Kubernetes with the cluster-admin
access policy. A second IAM user (`VIEWER`) has an entry with the view policy: the read-only
identity a study-group member or the doctor uses, refused every write as on EKS. The API
server asks the lab's webhooks who a token is (the IAM user's ARN, as `kubectl auth whoami`
shows on EKS) and, where RBAC grants nothing, what its access entry allows. `aws eks
list-access-entries`, `describe-access-entry` and `list-associated-access-policies` answer from
the same entries (moto has none of the three).
"""

from __future__ import annotations

import copy
import hmac
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from moto.core.responses import ActionResult
from moto.eks import urls as eks_urls
from moto.eks.exceptions import ResourceNotFoundException
from moto.eks.responses import EKSResponse
from moto.iam.models import iam_backends

from labs.sim.aws.auth import Keys, eks_token_ok, new_token

LAB_USER = "lab-admin"
VIEWER = "lab-viewer"
_POLICY_PREFIX = "arn:aws:eks::aws:cluster-access-policy/"
ADMIN_POLICY = _POLICY_PREFIX + "AmazonEKSClusterAdminPolicy"
VIEW_POLICY = _POLICY_PREFIX + "AmazonEKSViewPolicy"
# What the view policy never reads (as Kubernetes' `view` role): secrets, and the subresources
# that reach into a pod or node rather than read an object.
_NOT_VIEWED = frozenset({"secrets"})
_NOT_VIEWED_SUBRESOURCES = frozenset({"exec", "attach", "portforward", "proxy"})
_READS = frozenset({"get", "list", "watch"})
ACCESS_ENTRIES_PATH = "{0}/clusters/(?P<name>[^/]+)/access-entries$"
ACCESS_ENTRY_PATH = "{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$"
_POLICIES_SUFFIX = "/access-policies"


def user_arn(account: str, name: str = LAB_USER) -> str:
    """An IAM user's ARN: what STS answers for its keys and `kubectl auth whoami` shows."""
    return f"arn:aws:iam::{account}:user/{name}"


@dataclass(frozen=True)
class Principal:
    """An IAM user as EKS's authenticator reports it to Kubernetes, with its access key."""

    arn: str
    user_id: str
    account: str
    keys: Keys

    def user_info(self, groups: list[str]) -> dict[str, Any]:
        """The TokenReview user: named by its ARN (an access entry's default username)."""
        return {
            "username": self.arn,
            "uid": f"aws-iam-authenticator:{self.account}:{self.user_id}",
            "groups": groups,
            "extra": {
                "accessKeyId": [self.keys.access_key_id],
                "arn": [self.arn],
                "canonicalArn": [self.arn],
                "principalId": [self.user_id],
                "sessionName": [""],
                "sigs.k8s.io/aws-iam-authenticator/principalId": [self.user_id],
            },
        }


def iam_user(account: str, region: str, name: str = LAB_USER) -> Principal:
    """Create an IAM user and its access key in this process's moto (after a reset): STS then
    answers for its keys."""
    iam = iam_backends[account]["aws"]
    user = iam.create_user(region, name)
    key = iam.create_access_key(name)
    principal = Principal(
        user_arn(account, name), user.id, account, Keys(key.access_key_id, key.secret_access_key)
    )
    if user.arn != principal.arn:
        raise RuntimeError(f"moto named the IAM user {user.arn}, not {principal.arn}")
    return principal


@dataclass
class _Entry:
    principal: Principal
    # a bearer token of the world's own for this principal (its kubeconfig), like an EKS token
    token: str
    document: dict[str, Any]
    policies: list[dict[str, Any]]


@dataclass
class AccessEntries:
    """One cluster's EKS access entries, and the decisions the API server asks of them."""

    cluster: str
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, principal: Principal, policy: str, region: str) -> str:
        """A STANDARD entry with no Kubernetes groups and `policy` for the whole cluster; the
        world's bearer token for it."""
        now = datetime.now(UTC)
        name = principal.arn.rsplit("/", 1)[-1]
        document = {
            "clusterName": self.cluster,
            "principalArn": principal.arn,
            "kubernetesGroups": [],
            "accessEntryArn": f"arn:aws:eks:{region}:{principal.account}:access-entry/"
            f"{self.cluster}/user/{principal.account}/{name}/{principal.user_id.lower()}",
            "createdAt": now,
            "modifiedAt": now,
            "tags": {},
            "username": principal.arn,
            "type": "STANDARD",
        }
        association = {
            "policyArn": policy,
            "accessScope": {"type": "cluster", "namespaces": []},
            "associatedAt": now,
            "modifiedAt": now,
        }
        token = new_token()
        with self._lock:
            self._entries[principal.arn] = _Entry(principal, token, document, [association])
        return token

    def user(self, token: str) -> dict[str, Any] | None:
        """Who a bearer token is (the TokenReview user): the principal whose world token it is
        or whose keys signed it for this cluster; None for a token not of this lab."""
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            if hmac.compare_digest(token, entry.token) or eks_token_ok(
                entry.principal.keys, self.cluster, token
            ):
                return entry.principal.user_info(list(entry.document["kubernetesGroups"]))
        return None

    def allowed(self, review: dict[str, Any]) -> bool:
        """A SubjectAccessReview's answer from the user's access policies: cluster admin allows
        everything, view only reads (never secrets, exec, attach, port-forward or proxy)."""
        with self._lock:
            entry = next(
                (e for e in self._entries.values() if e.document["username"] == review.get("user")),
                None,
            )
        held = {p["policyArn"] for p in entry.policies} if entry else set()
        if ADMIN_POLICY in held:
            return True
        return VIEW_POLICY in held and _a_read(review)

    def principal_arns(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def entry(self, principal_arn: str) -> dict[str, Any]:
        return copy.deepcopy(self._found(principal_arn).document)

    def policies(self, principal_arn: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self._found(principal_arn).policies)

    def _found(self, principal_arn: str) -> _Entry:
        with self._lock:
            found = self._entries.get(principal_arn)
        if found is None:
            raise _not_found(
                self.cluster, f"The specified principalArn could not be found: {principal_arn}"
            )
        return found


def _a_read(review: dict[str, Any]) -> bool:
    resource = review.get("resourceAttributes")
    if resource is None:
        return (review.get("nonResourceAttributes") or {}).get("verb") == "get"
    return (
        resource.get("verb") in _READS
        and resource.get("resource") not in _NOT_VIEWED
        and resource.get("subresource", "") not in _NOT_VIEWED_SUBRESOURCES
    )


def _not_found(cluster: str, message: str) -> ResourceNotFoundException:
    return ResourceNotFoundException(
        clusterName=cluster, nodegroupName=None, fargateProfileName=None, addonName=None,
        message=message,
    )  # fmt: skip


_current: list[AccessEntries] = []
_installed = threading.Lock()


def _entries_of(response: EKSResponse) -> AccessEntries:
    name = response._get_param("name")
    response.eks_backend.describe_cluster(name)  # ResourceNotFoundException for another cluster
    for entries in _current:
        if entries.cluster == name:
            return entries
    raise _not_found(name, f"No access entries for cluster {name}")


def _list_access_entries(self: EKSResponse) -> ActionResult:
    return ActionResult({"accessEntries": _entries_of(self).principal_arns()})


def _principal(self: EKSResponse) -> str:
    """The principal ARN of the path: the aws CLI sends it percent-encoded, `/` included."""
    return unquote(str(self._get_param("principalArn"))).removesuffix(_POLICIES_SUFFIX)


def _describe_access_entry(self: EKSResponse) -> ActionResult:
    return ActionResult({"accessEntry": _entries_of(self).entry(_principal(self))})


def _list_associated_access_policies(self: EKSResponse) -> ActionResult:
    principal = _principal(self)
    return ActionResult(
        {"clusterName": self._get_param("name"), "principalArn": principal,
         "associatedAccessPolicies": _entries_of(self).policies(principal)}
    )  # fmt: skip


def serve(entries: AccessEntries) -> None:
    """Answer the access-entry calls of `entries`' cluster from `entries` (the world's)."""
    _current[:] = [entries]


def install() -> None:
    """Teach this process's moto EKS the access-entry calls (once; idempotent). Must run before
    a moto server first serves EKS: the server builds its routes then."""
    if _installed.acquire(blocking=False):
        EKSResponse.list_access_entries = _list_access_entries  # type: ignore[attr-defined]
        EKSResponse.describe_access_entry = _describe_access_entry  # type: ignore[attr-defined]
        EKSResponse.list_associated_access_policies = (  # type: ignore[attr-defined]
            _list_associated_access_policies
        )
        eks_urls.url_paths[ACCESS_ENTRIES_PATH] = eks_urls.response.dispatch
        eks_urls.url_paths[ACCESS_ENTRY_PATH] = eks_urls.response.dispatch
