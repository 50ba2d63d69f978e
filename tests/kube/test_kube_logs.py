"""Pod logs as the tool reads them (labs/kube/logs.py), from the held-still API server."""

from __future__ import annotations

import pytest
from doctor_support import NS, StaticCluster

from labs.kube.logs import operator_log, pod_log

OPERATOR_POD = "gpu-operator-5798b5b564-xbq5h"


@pytest.fixture
def cluster(still, tmp_path) -> StaticCluster:
    built = StaticCluster(still, tmp_path / "labs")
    built.build_healthy()  # the operator's pod among the rest, on a node the API server knows
    return built


def test_a_pod_that_printed_nothing_reads_as_empty_not_as_none(cluster):
    pod = cluster.still.api.get("pods", OPERATOR_POD, NS)
    cluster.log(pod, "")
    lab = cluster.lab()
    assert pod_log(lab, NS, OPERATOR_POD) == ""
    with lab.view() as view:
        assert operator_log(lab, view) == []


def test_the_operators_last_lines_come_back_without_blank_ones(cluster):
    pod = cluster.still.api.get("pods", OPERATOR_POD, NS)
    cluster.log(pod, "first\n\nsecond\nthird\n")
    lab = cluster.lab()
    assert pod_log(lab, NS, OPERATOR_POD, tail=2) == "second\nthird\n"
    with lab.view() as view:
        assert operator_log(lab, view) == ["first", "second", "third"]
