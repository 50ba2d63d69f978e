"""Who the lab's user is, on both sides, as with an EKS cluster made with access entries.

The world's AWS keys belong to an IAM user of the stand-in account (`LAB_USER`), so `aws sts
get-caller-identity` names it; the cluster's access entry for its creator (the stack sets
`enable_cluster_creator_admin_permissions`) maps that user to Kubernetes with the cluster-admin
access policy. The API server asks the lab's webhook who a token is (the IAM user's ARN, as
`kubectl auth whoami` shows on EKS) and, where RBAC grants nothing, what the access entry
allows. `aws eks list-access-entries`, `describe-access-entry` and
`list-associated-access-policies` answer from the same entries (moto has none of the three).
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

from labs.sim.aws.auth import Keys, eks_token_ok

LAB_USER = "lab-admin"
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
ACCESS_ENTRIES_PATH = "{0}/clusters/(?P<name>[^/]+)/access-entries$"
ACCESS_ENTRY_PATH = "{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$"
_POLICIES_SUFFIX = "/access-policies"


def lab_user_arn(account: str) -> str:
    """The ARN of the lab's IAM user: what STS answers and `kubectl auth whoami` shows."""
    return f"arn:aws:iam::{account}:user/{LAB_USER}"


@dataclass(frozen=True)
class Principal:
    """An IAM user as EKS's authenticator reports it to Kubernetes."""

    arn: str
    user_id: str
    account: str
    access_key_id: str

    def user_info(self, groups: list[str]) -> dict[str, Any]:
        """The TokenReview user: named by its ARN (an access entry's default username)."""
        return {
            "username": self.arn,
            "uid": f"aws-iam-authenticator:{self.account}:{self.user_id}",
            "groups": groups,
            "extra": {
                "accessKeyId": [self.access_key_id],
                "arn": [self.arn],
                "canonicalArn": [self.arn],
                "principalId": [self.user_id],
                "sessionName": [""],
                "sigs.k8s.io/aws-iam-authenticator/principalId": [self.user_id],
            },
        }


def lab_user(account: str, region: str) -> tuple[Keys, Principal]:
    """Create the lab's IAM user and its access key in this process's moto (after a reset):
    the world's keys, which STS then answers for."""
    iam = iam_backends[account]["aws"]
    user = iam.create_user(region, LAB_USER)
    key = iam.create_access_key(LAB_USER)
    principal = Principal(lab_user_arn(account), user.id, account, key.access_key_id)
    if user.arn != principal.arn:
        raise RuntimeError(f"moto named the lab's IAM user {user.arn}, not {principal.arn}")
    return Keys(key.access_key_id, key.secret_access_key), principal


@dataclass
class AccessEntries:
    """One cluster's EKS access entries, and the decisions the API server asks of them."""

    cluster: str
    keys: Keys
    # The world's own bearer token (its kubeconfig): the lab's user too, like an EKS token.
    token: str = ""
    _entries: dict[str, tuple[Principal, dict[str, Any], list[dict[str, Any]]]] = field(
        default_factory=dict
    )
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_admin(self, principal: Principal, region: str) -> None:
        """The cluster creator's entry: STANDARD, no Kubernetes groups, cluster-admin policy."""
        now = datetime.now(UTC)
        entry = {
            "clusterName": self.cluster,
            "principalArn": principal.arn,
            "kubernetesGroups": [],
            "accessEntryArn": f"arn:aws:eks:{region}:{principal.account}:access-entry/"
            f"{self.cluster}/user/{principal.account}/{LAB_USER}/{principal.user_id.lower()}",
            "createdAt": now,
            "modifiedAt": now,
            "tags": {},
            "username": principal.arn,
            "type": "STANDARD",
        }
        policy = {
            "policyArn": ADMIN_POLICY,
            "accessScope": {"type": "cluster", "namespaces": []},
            "associatedAt": now,
            "modifiedAt": now,
        }
        with self._lock:
            self._entries[principal.arn] = (principal, entry, [policy])

    def user(self, token: str) -> dict[str, Any] | None:
        """Who a bearer token is (the TokenReview user): the owner of the world's keys, through
        its access entry; None for a token not of this lab."""
        ours = bool(self.token) and hmac.compare_digest(token, self.token)
        if not (ours or eks_token_ok(self.keys, self.cluster, token)):
            return None
        with self._lock:
            for principal, entry, _ in self._entries.values():
                if principal.access_key_id == self.keys.access_key_id:
                    return principal.user_info(list(entry["kubernetesGroups"]))
        return None

    def allowed(self, review: dict[str, Any]) -> bool:
        """A SubjectAccessReview's answer: the cluster-admin access policy allows everything."""
        user = str(review.get("user", ""))
        with self._lock:
            policies = [policy for _, entry, held in self._entries.values()
                        if entry["username"] == user for policy in held]  # fmt: skip
        return any(
            p["policyArn"] == ADMIN_POLICY and p["accessScope"]["type"] == "cluster"
            for p in policies
        )

    def principal_arns(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def entry(self, principal_arn: str) -> dict[str, Any]:
        return copy.deepcopy(self._found(principal_arn)[1])

    def policies(self, principal_arn: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self._found(principal_arn)[2])

    def _found(self, principal_arn: str) -> tuple[Principal, dict[str, Any], list[dict[str, Any]]]:
        with self._lock:
            found = self._entries.get(principal_arn)
        if found is None:
            raise _not_found(
                self.cluster, f"The specified principalArn could not be found: {principal_arn}"
            )
        return found


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
