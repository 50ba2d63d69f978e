"""Kubernetes label and field selectors, parsed once and matched against plain dict objects.

Label selectors follow the apimachinery grammar: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
`k notin (a,b)`, `k` (exists) and `!k` (does not exist), joined by commas.
Field selectors accept `=`, `==` and `!=` on the fields the real API server supports for
the kinds this emulator serves; any other field is a 400, as on a real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

Matcher = Callable[[dict], bool]

SUPPORTED_FIELDS = frozenset(
    {
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.fieldPath",
        "involvedObject.resourceVersion",
        "reason",
        "type",
        "source",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.unschedulable",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
        "status.successful",
    }
)


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


def _field_value(obj: dict, path: str) -> str:
    value: object = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):  # events' `source` is {"component": ...}
        return str(value.get("component", ""))
    return str(value)


def field_matcher(selector: str) -> Matcher:
    """Return a predicate for a field selector string ("" matches everything)."""
    terms: list[tuple[str, bool, str]] = []
    for term in filter(None, (part.strip() for part in (selector or "").split(","))):
        match = re.fullmatch(r"([^=!]+?)\s*(==|!=|=)\s*(.*)", term)
        if not match:
            raise SelectorError(f"invalid field selector term {term!r}: expected field=value")
        field, operator, value = match.groups()
        if field not in SUPPORTED_FIELDS:
            raise SelectorError(f"field label not supported: {field}")
        terms.append((field, operator == "!=", value))

    def matches(obj: dict) -> bool:
        return all(
            (_field_value(obj, field) == value) != negated for field, negated, value in terms
        )

    return matches
