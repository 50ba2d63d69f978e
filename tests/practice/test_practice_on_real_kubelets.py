"""Blind practice on a lab whose nodes run the real kubelet: `test_practice.py`'s tests, taken
as they are, where each fault's symptoms, a learner's fixes and the checks' verdicts come from
kubelet v1.35.4 and the operator's real pods (a file of its own, so it runs beside the other).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import test_practice as played
from test_practice import no_fault_left_behind, practice_lab  # noqa: F401 (its autouse check)

from labs.settings import REAL_KUBELETS


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    yield from practice_lab(tmp_path_factory, INVOKE_LAB_KUBELETS=REAL_KUBELETS)


# test_practice's tests in its own order (pytest runs a module's tests in the order its names
# were bound): the last one takes the GPU nodes to 0, so it must stay last.
test_a_learner_practises_each_fault_blind = played.test_a_learner_practises_each_fault_blind
test_two_faults_at_once_are_both_hidden_and_both_must_be_fixed = (
    played.test_two_faults_at_once_are_both_hidden_and_both_must_be_fixed
)
test_kill_9_during_a_start_is_undone_by_revert_all_and_recorded_abandoned = (
    played.test_kill_9_during_a_start_is_undone_by_revert_all_and_recorded_abandoned
)
test_a_shared_lab_keeps_each_exercise_its_learners_and_checks_cost_only_their_wall_time = (
    played.test_a_shared_lab_keeps_each_exercise_its_learners_and_checks_cost_only_their_wall_time
)
test_lab_down_reverts_both_faults_of_an_exercise_and_records_it_abandoned = (
    played.test_lab_down_reverts_both_faults_of_an_exercise_and_records_it_abandoned
)
