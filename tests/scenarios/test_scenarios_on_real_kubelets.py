"""Every scenario on a rehearsal lab whose nodes run the real kubelet (`INVOKE_LAB_KUBELETS=real`),
one after the other through the command line as a person runs them: the symptoms, the debugging
path and the recovery come from kubelet v1.35.4's device manager, admission and back-offs, the
operator's real operand pods, the project's device plugin over the device-plugin API and the
runtime's NVIDIA prestart hook.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lab_support import cli_lab, run_invoke

import scenarios
from labs.settings import REAL_KUBELETS

LAB = "rk1"
SPEED = "300"


@pytest.fixture(scope="module")
def lab_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with cli_lab(
        tmp_path_factory.mktemp("rk"), LAB, SPEED, INVOKE_LAB_KUBELETS=REAL_KUBELETS
    ) as env:
        yield env


@pytest.mark.parametrize("name", list(scenarios.all_scenarios()))
def test_the_scenario_runs_and_recovers_on_real_kubelets(lab_env: dict[str, str], name: str):
    run = run_invoke("scenario.run", name, "--lab", LAB, "--yes", env=lab_env, timeout=420)
    if run.returncode != 0:  # leave the next scenario a clean lab
        run_invoke("scenario.revert", "--all", "--lab", LAB, env=lab_env, timeout=180)
    assert run.returncode == 0, f"{name}: {run.stdout[-4000:]}{run.stderr[-2000:]}"
    assert "result: OK" in run.stdout
    assert "recovered state equals the baseline" in run.stdout
