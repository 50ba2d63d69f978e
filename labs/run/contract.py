"""The typed contract of a scenario: what it declares, and what its checks and findings are.

A scenario module is a `Runbook`: its steps by name (a few small functions, its traps and two
lists of checks) and its `Facts`; the registry makes one `Scenario` of it, and the engine
takes nothing else, so a scenario that forgets a step or gives a check the wrong signature
fails the type check, not a run.
A check is a named condition over the live cluster view plus a time limit.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from labs.doctor.catalog import KINDS
from labs.run.timeline import Gauge

if TYPE_CHECKING:
    from labs.kube.view import ClusterView, WatchedKind
    from labs.lab import Lab

# A condition answers (holds, what was seen): the second part is the evidence when it
# holds, and the "last seen" explanation when it never did.
Verdict = tuple[bool, str]
DASHED_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
# Where a fault lives, in the order `scenario.list` shows the groups: the first thing a
# person rules in or out (is it the operator, one node, the network, my pod, or capacity?).
Area = Literal["operator", "node", "network", "workload", "capacity"]
AREAS: tuple[Area, ...] = get_args(Area)
AREA_TITLES: dict[Area, str] = {
    "operator": "the GPU Operator and its operands",
    "node": "one GPU node",
    "network": "the network between GPU nodes",
    "workload": "the pod spec: nothing in the cluster is broken",
    "capacity": "GPU capacity: no GPU node to run on",
}


@dataclass
class Context:
    """What a condition or action may look at: the lab, the live view and the baseline.

    `marks` are moments a run's actions noted (`mark`), so a check can say "still so N
    seconds later" (`seconds_since`) about something that must *not* happen; `notes` are
    what an action saw at its moment (a status to compare with later).
    """

    lab: Lab
    view: ClusterView
    baseline: Mapping[str, Any] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        """Note this moment as `name`."""
        self.marks[name] = time.monotonic()

    def seconds_since(self, name: str) -> float | None:
        """Real-cluster seconds since `mark(name)` (wall time times the lab's speed), or None."""
        at = self.marks.get(name)
        return None if at is None else (time.monotonic() - at) * self.lab.speed


@dataclass(frozen=True)
class Check:
    """A named condition with a time limit in real-cluster seconds.

    `then` runs once, right after the check first holds (e.g. "now apply the probe again").
    `tool` marks a recovery check of the tool's part: its own probes and workloads run again,
    which `practice.check` does itself once the learner's part holds, never the learner.
    `names_cause` marks a check whose evidence names the cause: a blind exercise withholds it
    while the cause is still in (after a partial fix it says what is still missing).
    """

    name: str
    condition: Callable[[Context], Verdict]
    timeout: float
    then: Callable[[Context], None] | None = None
    tool: bool = False
    names_cause: bool = False


@dataclass(frozen=True)
class CheckResult:
    """When a check held (seconds after its phase began), or why it did not."""

    phase: str
    name: str
    held: bool
    t: float | None
    seen: str
    wall_time: float | None = None


@dataclass(frozen=True)
class Needs:
    """What a scenario needs from the lab before it may run."""

    gpu_nodes: int = 0
    operator: bool = False
    rehearsal_only: str = ""  # why the fault cannot be made on EKS; empty where it can

    def __str__(self) -> str:
        parts = [f"{self.gpu_nodes} Ready GPU node(s)"] if self.gpu_nodes else []
        parts += ["the GPU Operator installed and running"] if self.operator else []
        parts += ["a rehearsal lab"] if self.rehearsal_only else []
        return ", ".join(parts) or "nothing beyond a reachable cluster"


@dataclass(frozen=True)
class Finding:
    """One step of the debugging path: what to look at, what it showed, what it means.

    `real_cluster_only` marks steps the tool cannot observe for you (node internals):
    `saw` then says what a real cluster shows. `trap` names the trap this step exposes.
    """

    step: str
    look: str
    saw: str
    means: str
    real_cluster_only: bool = False
    trap: str | None = None


@dataclass(frozen=True)
class Trap:
    """A belief the fault makes look true: what one expects, what happens, why it matters."""

    name: str
    expected: str
    actual: str
    why: str
    # The symptom check whose holding shows the trap in a run ("" when no backend check can).
    shown_by: str = ""
    # Or a text whose presence in what the trap's debugging step saw shows it.
    shown_in: str = ""


@dataclass(frozen=True)
class Step:
    """One kubectl command of the by-hand runbook and what it prints while the fault is in.

    `command` runs as is in a shell after `eval "$(invoke lab.env)"`, which sets KUBECONFIG and
    GPU_OPERATOR_NS (no placeholders), and its output contains `shows`; tests run every step
    against an injected rehearsal lab.
    """

    command: str
    shows: str
    means: str = ""


@dataclass(frozen=True)
class ByHand:
    """The scenario as a person does it at a terminal: inject, look, revert, all kubectl."""

    inject: Sequence[str]
    look: Sequence[Step]
    revert: Sequence[str]


@dataclass(frozen=True)
class Cause:
    """The fault's cause as a learner names it, so `practice.answer` grades what they mean.

    `plain` is the cause in one plain sentence (`practice.choices` lists it, so it
    names what is wrong, not the symptoms). `names` are the concepts an answer must all name
    to name this cause; `clues` point at it without naming it and decide between two causes
    one answer names both of. Each concept is a group of synonyms and phrases, its first the
    label shown back to the learner ("understood: taint, one node"); `labs.practice.grading`
    matches words in any form (taints, tainted), object and field names as their words
    (`nvidia.com/gpu`, `resources.limits`, `runtimeClassName`) and forgives one typo.
    """

    plain: str
    names: tuple[tuple[str, ...], ...]
    clues: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        if not self.plain.strip() or not self.names:
            raise ValueError(f"a cause needs a plain sentence and at least one concept: {self}")
        groups = (*self.names, *self.clues)
        if any(isinstance(group, str) or not group or not all(group) for group in groups):
            raise ValueError(
                f"cause {self.plain!r}: each concept group is a tuple of phrases, none empty "
                '(one phrase: ("taint",))'
            )


Baseline = Callable[["Lab", "ClusterView"], dict[str, Any]]
Mutation = Callable[["Lab"], None]
# The debugging path, read while the fault is in: the run's context holds what its checks saw.
Diagnosis = Callable[[Context], list[Finding]]
# Is this scenario's fault present in the cluster now? (What a revert relies on when the
# journal is missing or damaged.)
Detection = Callable[["Lab", "ClusterView"], bool]
StateRows = Callable[[Context], dict[str, str]]
Preview = Callable[["Lab"], list[str]]


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What differs from one scenario to the next beside its runbook's steps: its facts, and
    whichever optional parts it has. A scenario module ends with one, named `FACTS`.

    `area` is where the fault lives (`scenario.list` groups by it). Optional: `state` (summary
    rows compared between baseline and recovery), `preview` (the infrastructure changes the
    injection would make, shown and confirmed first), `gauges` (curves for the timeline plot),
    `watch` (kinds the checks and `detect` read; default: the lab's standard view) and
    `by_hand` (the same fault with plain kubectl).
    `clean_up` removes what the scenario adds beside its fault for its checks (a pinned probe)
    once nothing needs it: after the recovery checks of a run, right after a revert otherwise,
    so it never outlives the scenario into the next one.
    `reset` is the tool's part after a learner fixed the fault by hand: what the scenario put in
    the lab for itself (its pods, its probe, the lab's record of a setting) set back as the lab
    writes it, idempotent against whatever the learner's fix already did; then the recovery's
    `tool` checks run.
    `doctor_finding` names the `lab.doctor` finding (`labs.doctor.catalog`) that must be the
    probable cause while the fault is in: the doctor's accuracy is measured against it. None
    for a fault that leaves nothing in the cluster to read (the module says why): the doctor
    must then find no problem rather than a wrong one.
    `alerts` names the alerts of the lab's rules (`monitoring/gpu-alerts.yaml`) that fire while
    the fault is in; empty for a fault no cluster metric shows (the module says why).
    `cause` is what a learner names in `practice.answer`: in plain words and as concepts.
    """

    summary: str
    area: Area
    needs: Needs
    risk: str
    duration: str
    doctor_finding: str | None
    cause: Cause
    state: StateRows | None = None
    gauges: Mapping[str, Gauge] = field(default_factory=dict)
    watch: Callable[[Lab], list[WatchedKind]] | None = None
    by_hand: ByHand | None = None
    preview: Preview | None = None
    clean_up: Mutation | None = None
    reset: Mutation | None = None
    alerts: Sequence[str] = ()


class Runbook(Protocol):
    """A scenario module: its runbook's steps at the top level, by these names, and its
    `FACTS`. mypy checks each module against this where `scenarios` lists it."""

    @property
    def __name__(self) -> str: ...

    @property
    def FACTS(self) -> Facts: ...

    @property
    def symptoms(self) -> Sequence[Check]: ...

    @property
    def recovery(self) -> Sequence[Check]: ...

    @property
    def traps(self) -> Sequence[Trap]: ...

    def baseline(self, lab: Lab, view: ClusterView) -> dict[str, Any]: ...

    def inject(self, lab: Lab) -> None: ...

    def revert(self, lab: Lab) -> None: ...

    def detect(self, lab: Lab, view: ClusterView) -> bool: ...

    def diagnose(self, ctx: Context) -> list[Finding]: ...


@dataclass(frozen=True, kw_only=True)
class Scenario(Facts):
    """One injectable fault: its facts, five functions, and its checks; what the registry and
    the engine take. `about` is the runbook's opening (the module docstring); the functions'
    docstrings are its steps. `detect` reads the fault off the cluster, so
    `scenario.revert --all` and `lab.down` find it even when the journal is gone.
    """

    name: str
    about: str
    baseline: Baseline
    inject: Mutation
    revert: Mutation
    symptoms: Sequence[Check]
    recovery: Sequence[Check]
    diagnose: Diagnosis
    traps: Sequence[Trap]
    detect: Detection

    @classmethod
    def of(cls, module: Runbook) -> Scenario:
        """The scenario a module's runbook and `FACTS` make, named after the module
        (`device_plugin_off` is device-plugin-off)."""
        declared = {f.name: getattr(module.FACTS, f.name) for f in fields(Facts)}
        return cls(
            name=module.__name__.rpartition(".")[2].replace("_", "-"),
            about=module.__doc__ or "",
            baseline=module.baseline,
            inject=module.inject,
            revert=module.revert,
            symptoms=module.symptoms,
            recovery=module.recovery,
            diagnose=module.diagnose,
            traps=module.traps,
            detect=module.detect,
            **declared,
        )

    def __post_init__(self) -> None:
        if not DASHED_NAME.fullmatch(self.name):
            raise ValueError(
                f"scenario name {self.name!r} must be dashed lower case, e.g. device-plugin-off"
            )
        if self.doctor_finding is not None and self.doctor_finding not in KINDS:
            raise ValueError(
                f"scenario {self.name}: doctor_finding {self.doctor_finding!r} is not a doctor "
                f"finding; known: {', '.join(sorted(KINDS))}"
            )
        if self.cause.plain == self.summary:
            raise ValueError(
                f"scenario {self.name}: cause.plain repeats the summary; say the cause itself "
                "in one plain sentence (what is wrong, not what it shows)"
            )
        if self.area not in AREAS:
            raise ValueError(
                f"scenario {self.name} has area {self.area!r}; use one of {', '.join(AREAS)}"
            )
