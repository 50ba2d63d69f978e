"""The admission plugins EKS 1.35 runs on a pod create that a GPU lab can tell apart.

Every EKS platform version enables, among others, `ExtendedResourceToleration` and
`RuntimeClass` (Amazon EKS user guide, "platform versions"). Two effects are visible:
- ExtendedResourceToleration: a pod that requests an extended resource (`nvidia.com/gpu`,
  `nvidia.com/mig-1g.5gb`, any `domain/name` outside kubernetes.io) gets the toleration
  `{key: <resource>, operator: Exists, effect: NoSchedule}` for each one, unless it already
  has that very toleration. So a GPU pod never lacks the toleration for GPU nodes tainted
  `nvidia.com/gpu`, and a pod asking for no GPU never gets it.
- RuntimeClass: a pod naming a RuntimeClass that does not exist is refused with 403
  Forbidden, `pod rejected: RuntimeClass "<name>" not found`: no pod object; a controller
  that asked records the refusal as a FailedCreate event on itself (controllers.workloads).
Plugins are data (per kind); each returns a rejection message or None, and may mutate.
"""

from __future__ import annotations

from collections.abc import Callable

# (plural, name) -> does that cluster-scoped object exist?
Exists = Callable[[str, str], bool]
Plugin = Callable[[dict, Exists], str | None]
TOLERATED_EFFECT = "NoSchedule"


def _extended(resource: str) -> bool:
    """`IsExtendedResourceName`: prefixed, outside kubernetes.io, not a `requests.` quota name."""
    native = "/" not in resource or "kubernetes.io/" in resource
    return not native and not resource.startswith("requests.")


def _requested(pod: dict) -> set[str]:
    """Resources any container or init container requests (limits default the requests)."""
    spec = pod.get("spec") or {}
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    names: set[str] = set()
    for container in containers:
        resources = container.get("resources") or {}
        names |= set(resources.get("requests") or {}) | set(resources.get("limits") or {})
    return names


def _matching(a: dict, b: dict) -> bool:
    """`Toleration.MatchToleration`: same key, operator (Equal by default), value and effect."""
    return all(
        (a.get(field) or default) == (b.get(field) or default)
        for field, default in (("key", ""), ("operator", "Equal"), ("value", ""), ("effect", ""))
    )


def extended_resource_toleration(pod: dict, _exists: Exists) -> str | None:
    """Add (or put in place of a matching one) `<resource>:NoSchedule Exists` for every
    extended resource the pod requests (`AddOrUpdateTolerationInPod`)."""
    spec = pod.setdefault("spec", {})
    for resource in sorted(r for r in _requested(pod) if _extended(r)):
        wanted = {"key": resource, "operator": "Exists", "effect": TOLERATED_EFFECT}
        tolerations = list(spec.get("tolerations") or [])
        same = [i for i, t in enumerate(tolerations) if _matching(t, wanted)]
        for i in same:
            tolerations[i] = dict(wanted)
        spec["tolerations"] = tolerations if same else [*tolerations, wanted]
    return None


def runtime_class(pod: dict, exists: Exists) -> str | None:
    """Refuse a pod whose runtimeClassName names no RuntimeClass."""
    name = (pod.get("spec") or {}).get("runtimeClassName")
    if name and not exists("runtimeclasses", name):
        return f'pod rejected: RuntimeClass "{name}" not found'
    return None


PLUGINS: dict[str, tuple[Plugin, ...]] = {
    "Pod": (extended_resource_toleration, runtime_class),
}


def admit(kind: str, obj: dict, exists: Exists) -> str | None:
    """Run the plugins for `kind` on a new object (in place); the first rejection, or None."""
    for plugin in PLUGINS.get(kind, ()):
        rejection = plugin(obj, exists)
        if rejection:
            return rejection
    return None
