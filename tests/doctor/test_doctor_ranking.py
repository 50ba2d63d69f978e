"""How the doctor orders what it found: the root cause first, then what it explains.

Findings here are built from the catalogue the way the checks build them, so the order a
user reads (and the probable cause) follows from the explanations alone.
"""

from __future__ import annotations

from labs.doctor.catalog import kind
from labs.doctor.model import Evidence, Link, Report, rank

SEEN = [Evidence("node/a", "status.allocatable[nvidia.com/gpu]", "0")]


def finding(name: str, subject: str, *explains: Link, severity: str | None = None):
    return kind(name).found(
        subject, f"{name} on {subject}", SEEN, explains=explains, severity=severity
    )


def test_the_root_of_a_chain_is_the_probable_cause_whatever_order_the_checks_ran_in():
    pod = finding("pod-insufficient-gpu", "pod/default/gpu-probe")
    pod = kind(pod.name).found(pod.subject, pod.summary, SEEN, tags=["node/a"])
    node = finding("gpu-allocatable-zero", "node/a", Link("pod-insufficient-gpu", tag="node/a"))
    toggle = finding(
        "device-plugin-disabled", "clusterpolicy/cluster-policy", Link("gpu-allocatable-zero")
    )
    note = finding("component-disabled", "clusterpolicy/cluster-policy/driver")

    report = Report({"name": "t"}, findings=[pod, note, node, toggle])

    assert [(r.finding.name, r.depth) for r in report.ranked] == [
        ("device-plugin-disabled", 0),
        ("gpu-allocatable-zero", 1),
        ("pod-insufficient-gpu", 2),
        ("component-disabled", 0),
    ]
    assert report.probable_cause == toggle and report.exit_code == 1


def test_a_loop_of_explanations_loses_no_finding_and_a_tag_must_match():
    first = finding("operand-not-ready", "daemonset/x", Link("clusterpolicy-not-ready"))
    second = finding("clusterpolicy-not-ready", "clusterpolicy/p", Link("operand-not-ready"))
    other = finding("pod-insufficient-gpu", "pod/default/p")
    unrelated = finding(
        "gpu-allocatable-zero", "node/b", Link("pod-insufficient-gpu", tag="node/b")
    )

    ranked = rank([first, second, other, unrelated])

    assert sorted(r.finding.name for r in ranked) == sorted(
        [
            "operand-not-ready",
            "clusterpolicy-not-ready",
            "pod-insufficient-gpu",
            "gpu-allocatable-zero",
        ]
    )
    assert [r.explained_by for r in ranked if r.finding is other] == [None]
    assert sum(r.explained_by is None for r in ranked) == 3
