"""Concepts several faults' causes share, as learners write them (`labs.run.contract.Cause`).

Each is a group of synonyms and phrases, its first the label a learner is shown; words match
in any form and with one typo, so a group lists meanings, not spellings.
"""

from __future__ import annotations

DEVICE_PLUGIN = ("device plugin", "dp", "plugin")
SWITCHED_OFF = ("switched off", "off", "disabled", "false", "deleted",
                "removed", "gone", "missing", "not running", "stopped", "absent",
                "no device plugin", "no dp")  # fmt: skip
ONE_NODE = ("one node", "single node", "specific node", "that node", "only node", "per node")
TAINT = ("taint", "NoExecute", "NoSchedule")
TOLERATION = ("toleration", "untolerated", "intolerant")
OPERANDS = ("operands", "DaemonSet", "device plugin", "dp", "gfd", "dcgm", "validator", "nfd",
            "operator pods")  # fmt: skip
CLUSTER_POLICY = ("ClusterPolicy", "policy", "spec.devicePlugin")


def absent(*things: str) -> tuple[str, ...]:
    """The ways people say a thing is not there: "no X", "X missing", "forgot X", ..."""
    before = ("no", "without", "missing", "lack", "forgot", "not set", "not",
              "omitted", "never", "dropped", "removed", "zero")  # fmt: skip
    after = ("missing", "not set", "absent", "forgotten", "omitted", "unset", "removed")
    return (
        *(f"{word} {thing}" for thing in things for word in before),
        *(f"{thing} {word}" for thing in things for word in after),
    )
