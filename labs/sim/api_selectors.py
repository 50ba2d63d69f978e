"""Kubernetes label and field selectors, parsed once and matched against plain dict objects.

Label selectors follow the apimachinery grammar: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
`k notin (a,b)`, `k` (exists) and `!k` (does not exist), joined by commas.
Field selectors accept `=`, `==` and `!=` on the fields the real API server supports for
each kind; any other field is a 400, as on a real server, and a field missing from an
object compares as its Go zero value (`spec.unschedulable=false` matches schedulable nodes).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

Matcher = Callable[[dict], bool]

# Field label -> (path in the object, the Go zero value a missing field compares as), per kind,
# as each kind's field-label conversion on the real API server declares them. Every kind also
# has metadata.name and metadata.namespace.
_METADATA_FIELDS = {
    "metadata.name": ("metadata.name", ""),
    "metadata.namespace": ("metadata.namespace", ""),
}
_KIND_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "Pod": {
        "spec.nodeName": ("spec.nodeName", ""),
        "spec.restartPolicy": ("spec.restartPolicy", ""),
        "spec.schedulerName": ("spec.schedulerName", ""),
        "spec.serviceAccountName": ("spec.serviceAccountName", ""),
        "spec.hostNetwork": ("spec.hostNetwork", "false"),
        "status.phase": ("status.phase", ""),
        "status.podIP": ("status.podIP", ""),
        "status.nominatedNodeName": ("status.nominatedNodeName", ""),
    },
    "Node": {"spec.unschedulable": ("spec.unschedulable", "false")},
    "Namespace": {"status.phase": ("status.phase", "")},
    "Event": {
        **{
            f"involvedObject.{name}": (f"involvedObject.{name}", "")
            for name in (
                "kind",
                "namespace",
                "name",
                "uid",
                "apiVersion",
                "resourceVersion",
                "fieldPath",
            )
        },
        "reason": ("reason", ""),
        "reportingComponent": ("reportingComponent", ""),
        "source": ("source.component", ""),
        "type": ("type", ""),
    },
    "Service": {"spec.clusterIP": ("spec.clusterIP", ""), "spec.type": ("spec.type", "")},
    "Job": {"status.successful": ("status.succeeded", "0")},
}


def supported_fields(kind: str) -> dict[str, tuple[str, str]]:
    """The field labels a field selector on `kind` may use: label -> (path, zero value)."""
    return _METADATA_FIELDS | _KIND_FIELDS.get(kind, {})


class SelectorError(ValueError):
    """A selector string that cannot be parsed; the message names the bad part."""


@dataclass(frozen=True)
class _Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|[^\s=!(),]+)")


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if not match:
            raise SelectorError(f"cannot parse selector {text!r} at position {position}")
        tokens.append(match.group(1))
        position = match.end()
    return tokens


def _parse_label_requirements(text: str) -> list[_Requirement]:
    tokens = _tokenize(text)
    requirements: list[_Requirement] = []
    index = 0

    def take() -> str:
        nonlocal index
        if index >= len(tokens):
            raise SelectorError(f"unexpected end of label selector {text!r}")
        token = tokens[index]
        index += 1
        return token

    while index < len(tokens):
        token = take()
        if token == "!":
            requirements.append(_Requirement(take(), "!"))
        else:
            key = token
            following = tokens[index] if index < len(tokens) else ","
            if following == ",":
                requirements.append(_Requirement(key, "exists"))
            elif following in ("=", "==", "!="):
                take()
                value = tokens[index] if index < len(tokens) else ","
                value = "" if value == "," else take()
                operator = "!=" if following == "!=" else "="
                requirements.append(_Requirement(key, operator, frozenset({value})))
            elif following in ("in", "notin"):
                take()
                if take() != "(":
                    raise SelectorError(f"expected '(' after {following!r} in {text!r}")
                values: set[str] = set()
                while (token := take()) != ")":
                    if token != ",":
                        values.add(token)
                requirements.append(_Requirement(key, following, frozenset(values)))
            else:
                raise SelectorError(f"unexpected {following!r} after {key!r} in {text!r}")
        if index < len(tokens) and take() != ",":
            raise SelectorError(f"expected ',' between requirements in {text!r}")
    return requirements


def label_matcher(selector: str) -> Matcher:
    """Return a predicate on objects for a label selector string ("" matches everything)."""
    requirements = _parse_label_requirements(selector or "")

    def matches(obj: dict) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(requirement.matches(labels) for requirement in requirements)

    return matches


def _field_value(obj: dict, path: str, zero: str) -> str:
    value: object = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return zero
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(selector: str, kind: str) -> Matcher:
    """Return a predicate for a field selector string on objects of `kind` ("" matches all).

    A field the kind does not support is an error naming it, as on a real API server.
    """
    fields = supported_fields(kind)
    terms: list[tuple[str, str, bool, str]] = []
    for term in filter(None, (part.strip() for part in (selector or "").split(","))):
        match = re.fullmatch(r"([^=!]+?)\s*(==|!=|=)\s*(.*)", term)
        if not match:
            raise SelectorError(f"invalid field selector term {term!r}: expected field=value")
        field, operator, value = match.groups()
        if field not in fields:
            raise SelectorError(f"field label not supported: {field}")
        path, zero = fields[field]
        terms.append((path, zero, operator == "!=", value))

    def matches(obj: dict) -> bool:
        return all(
            (_field_value(obj, path, zero) == value) != negated
            for path, zero, negated, value in terms
        )

    return matches
