"""Regenerate a custom resource's OpenAPI schema for the rehearsal's CRD from its manifest.

    python tools/crd_schema.py CRD.yaml > labs/sim/data/<plural>.schema.json

Keeps the structure `kubectl explain` walks (types, formats, enums, required fields,
`x-kubernetes-*` markers) of the CRD's first served version and drops the descriptions,
so the file holds the interface and not the vendor's prose.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml


def strip(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: strip(value) for key, value in schema.items() if key != "description"}
    if isinstance(schema, list):
        return [strip(item) for item in schema]
    return schema


def main(path: str) -> None:
    with open(path, encoding="utf-8") as handle:
        crd = yaml.safe_load(handle)
    version = next(v for v in crd["spec"]["versions"] if v.get("served", True))
    print(json.dumps(strip(version["schema"]["openAPIV3Schema"]), sort_keys=True, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
