"""What practice decides without a lab: the pick, the grade, the record and its history table."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_support import invoke_env, run_invoke

import scenarios
from labs.practice.exercise import RECENT_EXERCISES, PracticeError, choose
from labs.practice.grading import grade
from labs.practice.history import history
from labs.practice.record import ABANDONED, FIXED, Record, RecordError

WHO = "ann"


def recorded(record: Record, name: str, grade_given: float | None, outcome: str = FIXED) -> int:
    """One ended exercise of `name` with `grade_given`."""
    scenario = scenarios.get(name)
    exercise = record.begin(WHO, "myeks", [(name, scenario.area)])
    record.opened(exercise, [{}])
    if grade_given is not None:
        record.answered(exercise, name, [grade_given])
    record.ended(exercise, outcome)
    return exercise


def test_the_pick_prefers_the_worst_area_and_a_fault_not_seen_lately(tmp_path: Path):
    record = Record(tmp_path)
    catalogue = scenarios.all_scenarios()
    for name, scenario in catalogue.items():
        if scenario.area != "node":
            recorded(record, name, 1.0)
    recorded(record, "device-plugin-off-one-node", 0.0)
    unseen = {n for n, s in catalogue.items() if s.area == "node"} - {"device-plugin-off-one-node"}
    [picked] = choose(catalogue, record.of(WHO), seed=1)
    assert picked.name in unseen  # the worst area, and a fault of it not seen lately
    for name in unseen:
        recorded(record, name, 1.0)
    history = record.of(WHO)
    [again] = choose(catalogue, history, seed=1)
    lately = {f.scenario for e in history[-RECENT_EXERCISES:] for f in e.faults}
    assert again.area == "node" and again.name not in lately  # still the worst area


def test_a_seed_repeats_a_pick_and_an_area_narrows_it(tmp_path: Path):
    catalogue = scenarios.all_scenarios()
    picks = {choose(catalogue, [], seed=5)[0].name for _ in range(3)}
    assert len(picks) == 1
    [workload] = choose(catalogue, [], area="workload", seed=5)
    assert workload.area == "workload"


def test_two_faults_are_a_node_fault_and_a_workload_fault(tmp_path: Path):
    catalogue = scenarios.all_scenarios()
    pair = choose(catalogue, [], faults=2, seed=3)
    assert [s.area for s in pair] == ["node", "workload"]
    with pytest.raises(PracticeError, match="one of area node and one of area workload"):
        choose(catalogue, [], names=["device-plugin-off", "operator-down"])
    with pytest.raises(PracticeError, match="--faults is 1 or 2"):
        choose(catalogue, [], faults=3)
    with pytest.raises(PracticeError, match="no area 'disk'; the areas are operator, node"):
        choose(catalogue, [], area="disk")
    with pytest.raises(PracticeError, match="no scenario named 'nope'"):
        choose(catalogue, [], names=["nope"])


def test_an_answer_is_graded_right_right_layer_or_wrong():
    catalogue = scenarios.all_scenarios()
    taint = catalogue["gpu-node-foreign-taint"]
    assert grade("gpu-node-taint-not-tolerated", taint, catalogue) == 1.0
    assert grade("The GPU node has a taint that is not tolerated", taint, catalogue) == 1.0
    assert grade("something on one node", taint, catalogue) == 0.5
    assert grade("deploy-label-false", taint, catalogue) == 0.5  # another node cause
    assert grade("device-plugin-disabled", taint, catalogue) == 0.0
    runtime = catalogue["runtimeclass-missing"]  # no doctor finding: its name's words count
    assert grade("the runtimeclass is missing", runtime, catalogue) == 1.0


def test_history_shows_a_table_and_the_trend_per_area_and_hides_a_going_exercise(tmp_path):
    record = Record(tmp_path)
    recorded(record, "device-plugin-off-one-node", 0.0)
    recorded(record, "gpu-node-foreign-taint", 1.0)
    recorded(record, "operator-down", None, ABANDONED)
    going = record.begin(WHO, "myeks", [("missing-toleration", "workload")])
    record.opened(going, [{}])
    text = history(record, WHO)
    rows = [line.split() for line in text.splitlines() if line.startswith("  ")]
    assert rows[0] == ["#", "started", "(UTC)", "faults", "outcome", "diagnose", "fix", "hints",
                       "grade"]  # fmt: skip
    assert [r[3:5] for r in rows[1:5]] == [
        ["device-plugin-off-one-node", "fixed"], ["gpu-node-foreign-taint", "fixed"],
        ["operator-down", "abandoned"], ["(hidden)", "open"],
    ]  # fmt: skip
    assert "  node      0 1  (better)" in text and "  operator  0  (steady)" in text
    assert "missing-toleration" not in text
    assert history(record, "bob") == "no exercise recorded for bob yet: `invoke practice.start`"


def test_a_damaged_record_is_named_with_what_to_do(tmp_path: Path):
    (tmp_path / "practice.sqlite").write_text("not a database")
    with pytest.raises(RecordError, match="practice.sqlite cannot be used .* move it aside"):
        Record(tmp_path).of(WHO)
    assert (tmp_path / "practice.sqlite").read_text() == "not a database"  # left as it was


def test_the_cli_lists_the_practice_tasks_and_refuses_a_lab_that_is_not_there(tmp_path: Path):
    env = invoke_env(tmp_path)
    listing = run_invoke("--list", env=env).stdout
    for command in ("start", "check", "answer", "hint", "giveup", "history"):
        assert f"  practice.{command} " in listing, listing
    assert "Check my fix" in listing and "Start a blind exercise" in listing
    start = run_invoke("practice.start", "--lab", "nosuch", env=env)
    assert start.returncode == 1 and "no lab named 'nosuch'" in start.stderr
    assert not (tmp_path / "practice.sqlite").exists()
    empty = run_invoke("practice.history", "--who", WHO, env=env)
    assert empty.returncode == 0 and "no exercise recorded for ann" in empty.stdout


def test_a_baseline_comes_back_as_it_was_given_tuples_and_all(tmp_path: Path):
    record = Record(tmp_path)
    baseline = {"operands": {"nvidia-dcgm-exporter": (2, 2, 2)}, "gpu_nodes": ["a", "b"]}
    exercise = record.begin(WHO, "myeks", [("operator-down", "operator")])
    record.opened(exercise, [baseline])
    [fault] = record.of(WHO)[0].faults
    assert fault.baseline == baseline
    assert fault.baseline["operands"]["nvidia-dcgm-exporter"] == (2, 2, 2)
