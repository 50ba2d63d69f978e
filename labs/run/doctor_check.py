"""The run's doctor phase: `lab.doctor` read while the fault is in, as a check that holds once its
probable cause is the scenario's declared finding. A run then shows which finding the doctor
gives for the fault, and a doctor that names the wrong cause fails the run."""

from __future__ import annotations

import time

from labs.doctor.facts import CannotCheck
from labs.doctor.model import DoctorFinding
from labs.doctor.run import examine
from labs.run.contract import Check, Context, Verdict

DOCTOR_PHASE = "doctor"
# How long the doctor may take to name the fault once its symptoms showed (real-cluster
# seconds): the kubelet's back-offs and the controllers keep settling it meanwhile.
SETTLE = 180.0
# The doctor reads the whole cluster, its logs and AWS: read again at most this often
# (wall seconds), whatever the watch's events.
READ_EVERY = 2.0


def doctor_names(finding: str) -> Check:
    """The check that `lab.doctor` gives `finding` as the probable cause."""
    last: list[tuple[float, Verdict]] = []

    def condition(ctx: Context) -> Verdict:
        now = time.monotonic()
        if last and now - last[0][0] < READ_EVERY:
            return last[0][1]
        verdict = _read(ctx, finding)
        last[:] = [(now, verdict)]
        return verdict

    return Check(f"lab.doctor's probable cause is {finding}", condition, SETTLE)


def _read(ctx: Context, finding: str) -> Verdict:
    try:
        cause = examine(ctx.lab).probable_cause
    except CannotCheck as error:
        return False, f"lab.doctor could not check: {error}"
    return cause is not None and cause.name == finding, _said(cause)


def _said(cause: DoctorFinding | None) -> str:
    if cause is None:
        return "lab.doctor found no problem"
    return f"lab.doctor: {cause.name} on {cause.subject}: {cause.summary}"
