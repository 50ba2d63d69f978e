"""Read the protobuf request bodies kubectl's typed clients send, as the JSON a client would.

kubectl 1.32 encodes what its typed clients create (`kubectl create ns|configmap|secret|sa`,
the pod of `kubectl debug node`, the review of `kubectl auth can-i`) as
`application/vnd.kubernetes.protobuf`, whatever discovery says, and does not fall back to
JSON on a 415: the body has to be read. The wire format is the `k8s\\0` magic and a
`runtime.Unknown` envelope (typeMeta, raw object); the object is decoded with the field
table of `labs/sim/data/k8s_proto_fields.json` (generated from Kubernetes' `generated.proto`
files by `tools/k8s_proto_fields.py`), which also gives the emulator its OpenAPI schemas.

What protobuf cannot say: Go writes every non-pointer scalar, so a zero value ("", 0,
false) is indistinguishable from an unset one; both are dropped, as JSON's `omitempty`
would. An explicit `replicas: 0` sent this way therefore reads as unset.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
META = "k8s.io.apimachinery.pkg.apis.meta.v1"
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
TIMES = {f"{META}.Time", f"{META}.MicroTime"}
RAW_JSON = {f"{META}.FieldsV1", "k8s.io.apimachinery.pkg.runtime.RawExtension"}
_VARINT, _BYTES = 0, 2
_FIXED = {1: 8, 5: 4}  # wire type -> bytes (no Kubernetes field uses them; skipped)

# number, JSON name, type ("key:value" for maps), label (optional, repeated, map, inline)
Field = tuple[int, str, str, str]


class ProtobufError(ValueError):
    """The body is not a Kubernetes protobuf object this emulator can read."""


@cache
def message_fields() -> dict[str, dict[int, Field]]:
    """Proto message name -> its fields by number."""
    text = resources.files("labs.sim").joinpath("data/k8s_proto_fields.json").read_text()
    table = json.loads(text)
    return {name: {f[0]: tuple(f) for f in fields} for name, fields in table.items()}


def message_for(api_version: str, kind: str) -> str:
    """The proto message of a kind: group `x.k8s.io` or `x` lives in package k8s.io.api.x."""
    group, _, version = api_version.rpartition("/")
    package = group.removesuffix(".k8s.io") or "core"
    return f"k8s.io.api.{package}.{version}.{kind}"


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body carries, shaped as its JSON form."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic 'k8s\\0'")
    envelope = _fields_by_number(body[len(MAGIC) :])
    type_meta = _fields_by_number(envelope.get(1, [b""])[-1])
    api_version = _text(type_meta.get(1, [b""])[-1])
    kind = _text(type_meta.get(2, [b""])[-1])
    name = message_for(api_version, kind)
    if name not in message_fields():
        raise ProtobufError(f"the emulator cannot read {kind} ({api_version}) as protobuf")
    obj = _message(name, envelope.get(2, [b""])[-1])
    return {"apiVersion": api_version, "kind": kind, **obj}


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, position = _varint(data, position)
            yield number, wire, value
            continue
        if wire == _BYTES:
            size, position = _varint(data, position)
        elif wire in _FIXED:
            size = _FIXED[wire]
        else:
            raise ProtobufError(f"unsupported protobuf wire type {wire} in field {number}")
        value, position = data[position : position + size], position + size
        yield number, wire, value


def _fields_by_number(data: bytes) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {}
    for number, _, value in _fields(data):
        found.setdefault(number, []).append(value)
    return found


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise ProtobufError("the protobuf body ends inside a number")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _text(value: bytes) -> str:
    return value.decode("utf-8")


def _message(name: str, data: bytes) -> Any:
    if name in TIMES:
        return _time(data)
    if name in RAW_JSON:
        raw = _fields_by_number(data).get(1, [b""])[-1]
        return json.loads(raw) if raw else None
    if name == QUANTITY:
        return _text(_fields_by_number(data).get(1, [b""])[-1])
    if name == INT_OR_STRING:
        parts = _fields_by_number(data)
        return _text(parts[3][-1]) if parts.get(1, [0])[-1] == 1 else _signed(parts.get(2, [0])[-1])
    fields = message_fields()[name]
    obj: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        if number not in fields:
            continue
        _, key, kind, label = fields[number]
        if label == "map":
            entry_key, entry_value = _map_entry(kind, value)
            obj.setdefault(key, {})[entry_key] = entry_value
        elif label == "repeated":
            obj.setdefault(key, []).extend(_values(kind, wire, value))
        elif label == "inline":  # an embedded Go struct: its fields are the parent's in JSON
            obj.update(_message(kind, value))
        else:
            obj[key] = _scalar_or_message(kind, value)
    return {key: value for key, value in obj.items() if not _is_zero(value)}


def _values(kind: str, wire: int, value: Any) -> list[Any]:
    """One repeated field's values (packed scalars carry several in one record)."""
    if wire == _BYTES and kind in ("int32", "int64", "bool"):
        numbers, position = [], 0
        while position < len(value):
            number, position = _varint(value, position)
            numbers.append(_scalar_or_message(kind, number))
        return numbers
    return [_scalar_or_message(kind, value)]


def _map_entry(kind: str, data: bytes) -> tuple[str, Any]:
    key_kind, value_kind = kind.split(":", 1)
    parts = _fields_by_number(data)
    key = _scalar_or_message(key_kind, parts.get(1, [b""])[-1])
    value = parts.get(2, [b""])[-1]
    return key, _scalar_or_message(value_kind, value)


def _scalar_or_message(kind: str, value: Any) -> Any:
    if kind == "string":
        return _text(value)
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if kind == "bool":
        return bool(value)
    if kind in ("int32", "int64"):
        return _signed(value)
    return _message(kind, value)


def _signed(value: int) -> int:
    """Negative int32/int64 travel as 64-bit two's complement."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _time(data: bytes) -> str | None:
    parts = _fields_by_number(data)
    seconds = _signed(parts.get(1, [0])[-1])
    if not data:
        return None  # Go writes nothing for the zero time
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _is_zero(value: Any) -> bool:
    return value is None or (not isinstance(value, dict | list) and not value)
