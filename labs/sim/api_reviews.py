"""The authorization reviews kubectl asks for: every answer is "allowed".

The rehearsal has no RBAC (and no authentication): anyone reaching the emulator may do
anything, so `kubectl auth can-i patch clusterpolicies` prints `yes` and
`kubectl auth can-i --list` lists `*`. Reviews are answered, never stored, as on a real
API server; the per-kind answers are the table `ANSWERS`.
"""

from __future__ import annotations

from collections.abc import Callable

from labs.sim.store import BadRequest, ResourceType

GROUP = "authorization.k8s.io"
REASON = "the rehearsal emulator has no RBAC: every request is allowed"
SELF_SUBJECT_ACCESS_REVIEWS = ResourceType(
    GROUP, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, verbs=("create",)
)
SELF_SUBJECT_RULES_REVIEWS = ResourceType(
    GROUP, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, verbs=("create",)
)
ALLOW_EVERYTHING_RULES = {
    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    "incomplete": False,
}
ANSWERS: dict[ResourceType, Callable[[dict], dict]] = {
    SELF_SUBJECT_ACCESS_REVIEWS: lambda spec: {"allowed": True, "reason": REASON},
    SELF_SUBJECT_RULES_REVIEWS: lambda spec: dict(ALLOW_EVERYTHING_RULES),
}
REVIEW_TYPES = tuple(ANSWERS)


def answer(rtype: ResourceType, review: object) -> dict:
    """The review sent back with its status filled in (201, as a real server answers)."""
    if not isinstance(review, dict):
        raise BadRequest(f"a {rtype.kind} must be a JSON object")
    spec = review.get("spec") or {}
    metadata = review.get("metadata") or {}
    return {
        "kind": rtype.kind,
        "apiVersion": rtype.api_version,
        "metadata": {"creationTimestamp": None, **metadata},
        "spec": spec,
        "status": ANSWERS[rtype](spec),
    }
