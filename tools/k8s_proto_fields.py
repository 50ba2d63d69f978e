"""Regenerate `labs/sim/data/k8s_proto_fields.json` from Kubernetes' `generated.proto` files.

The emulator decodes protobuf request bodies (kubectl's typed clients send them) and
builds its OpenAPI schemas from one table: message -> fields (number, JSON name, type,
repeated/map). Proto field numbers and names are the wire interface of the Kubernetes
API and never change between versions, so the table is generated once and committed.

    python tools/k8s_proto_fields.py API_DIR APIMACHINERY_DIR > labs/sim/data/k8s_proto_fields.json

API_DIR and APIMACHINERY_DIR are checkouts of k8s.io/api and k8s.io/apimachinery (any
recent tag). Only messages reachable from the kinds the emulator serves are kept.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PROTO_FILES = {
    "api": ["core/v1", "apps/v1", "batch/v1", "node/v1", "authorization/v1"],
    "apimachinery": [
        "pkg/apis/meta/v1",
        "pkg/api/resource",
        "pkg/runtime",
        "pkg/runtime/schema",
        "pkg/util/intstr",
    ],
}
# The kinds the emulator serves (and accepts in a request body), by proto package.
ROOTS = {
    "k8s.io.api.core.v1": [
        "Namespace", "Node", "Pod", "Event", "Service", "ConfigMap", "Secret",
        "ServiceAccount",
    ],
    "k8s.io.api.apps.v1": ["DaemonSet", "Deployment", "ReplicaSet"],
    "k8s.io.api.batch.v1": ["Job"],
    "k8s.io.api.node.v1": ["RuntimeClass"],
    "k8s.io.api.authorization.v1": ["SelfSubjectAccessReview", "SelfSubjectRulesReview"],
}  # fmt: skip
SCALARS = {"string", "bool", "int32", "int64", "bytes", "double", "float"}
_PACKAGE = re.compile(r"^package ([\w.]+);", re.M)
_MESSAGE = re.compile(r"^message (\w+) \{(.*?)^\}", re.M | re.S)
_FIELD = re.compile(r"^\s*(optional|repeated) ([\w.]+) (\w+) = (\d+);", re.M)
_MAP = re.compile(r"^\s*map<(\w+), ([\w.]+)> (\w+) = (\d+);", re.M)
# Go structs embedded with `json:",inline"`: their fields sit in the parent's JSON.
_STRUCT = re.compile(r"^type (\w+) struct \{(.*?)^\}", re.M | re.S)
_INLINE = re.compile(r'^\s*[\w.]+ `json:",inline" protobuf:"bytes,(\d+),', re.M)


def inlined(types_go: str) -> set[tuple[str, int]]:
    """(struct, field number) of every struct embedded inline in another."""
    return {
        (struct, int(number))
        for struct, body in _STRUCT.findall(types_go)
        for number in _INLINE.findall(body)
    }


def parse(text: str, inline: set[tuple[str, int]]) -> dict[str, list[list]]:
    """Messages of one proto file: full name -> [[number, name, type, label], ...].

    The label is "optional", "repeated", "map" (type "key:value") or "inline".
    """
    package = _PACKAGE.search(text).group(1)

    def resolve(type_name: str) -> str:
        if type_name in SCALARS:
            return type_name
        if type_name.startswith("."):
            return type_name[1:]
        return f"{package}.{type_name}"

    messages = {}
    for name, body in _MESSAGE.findall(text):
        fields = [
            [int(number), field, resolve(kind), label]
            for label, kind, field, number in _FIELD.findall(body)
        ]
        for entry in fields:
            if (name, entry[0]) in inline:
                entry[3] = "inline"
        fields += [
            [int(number), field, f"{key}:{resolve(value)}", "map"]
            for key, value, field, number in _MAP.findall(body)
        ]
        messages[f"{package}.{name}"] = sorted(fields)
    return messages


def reachable(messages: dict[str, list[list]]) -> dict[str, list[list]]:
    todo = [f"{package}.{kind}" for package, kinds in ROOTS.items() for kind in kinds]
    kept: dict[str, list[list]] = {}
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept[name] = messages[name]
        for _, _, kind, _ in kept[name]:
            target = kind.split(":", 1)[-1]
            if target not in SCALARS:
                todo.append(target)
    return dict(sorted(kept.items()))


def main(api_dir: str, apimachinery_dir: str) -> None:
    messages: dict[str, list[list]] = {}
    for root, folders in (("api", api_dir), ("apimachinery", apimachinery_dir)):
        for folder in PROTO_FILES[root]:
            directory = Path(folders) / folder
            types_go = "".join(path.read_text() for path in directory.glob("types*.go"))
            messages |= parse((directory / "generated.proto").read_text(), inlined(types_go))
    table = reachable(messages)
    lines = [f"  {json.dumps(name)}: {json.dumps(fields)}" for name, fields in table.items()]
    print("{\n" + ",\n".join(lines) + "\n}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
