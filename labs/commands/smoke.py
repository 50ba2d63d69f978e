"""lab.smoke: does every GPU node give a pod a working GPU, and can two GPU nodes all-reduce?

Three workloads a person would run by hand: the GPU probe pinned to each GPU node (driver,
GPU, memory), the PyTorch CUDA check pinned to each node, and the two-pod NCCL all-reduce
across GPU nodes. The pods are removed afterwards, whatever happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from labs.console import columns
from labs.errors import LabError
from labs.guard import check_lab_target
from labs.kube import gpu, probes, workloads
from labs.kube.verdicts import AllReduceVerdict, allreduce_verdict, cuda_verdict

if TYPE_CHECKING:
    from labs.console import Console
    from labs.kube.view import ClusterView
    from labs.lab import Lab

# Real-cluster seconds a workload may run once started (its own deadlines are shorter).
RUN_SECONDS = {"probe": 60.0, "cuda": 120.0, "allreduce": 300.0}


@dataclass
class NodeRow:
    """One GPU node's line of the smoke table."""

    node: str
    gpu: str = "-"
    driver: str = "-"
    memory: str = "-"
    cuda: bool = False
    busbw: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class SmokeResult:
    rows: list[NodeRow]
    allreduce: dict[str, AllReduceVerdict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(row.ok for row in self.rows)


def timeout(lab: Lab, step: str) -> float:
    """Wall seconds for a step: pull and start (probe_timeout) plus its run at the lab's speed."""
    return lab.settings.probe_timeout + RUN_SECONDS[step] / lab.speed


def smoke(lab: Lab, console: Console, nccl: bool = True) -> SmokeResult:
    """Run the three checks on the lab's GPU nodes and return one row per node."""
    lab.backend.check_writable(lab, "lab.smoke")
    check_lab_target(lab, cluster=True, account=False)
    with lab.backend.program_pace(lab), lab.view() as view:
        nodes = [gpu.name_of(n) for n in gpu.gpu_nodes(view)]
        if not nodes:
            raise LabError(
                f"lab {lab.name} has no GPU node to test: `invoke lab.scale 2 --lab {lab.name}`"
            )
        rows = {node: NodeRow(node) for node in nodes}
        result = SmokeResult(list(rows.values()))
        with console.phase(f"GPU probe on {len(nodes)} GPU node(s)"):
            _probe(lab, view, rows)
        with console.phase(f"PyTorch CUDA check on {len(nodes)} GPU node(s)"):
            _cuda(lab, view, rows)
        if not nccl:
            result.notes.append("NCCL all-reduce skipped (--no-nccl)")
        elif len(nodes) < 2:
            result.notes.append("NCCL all-reduce skipped: it needs 2 GPU nodes (lab.scale 2)")
        else:
            with console.phase("NCCL all-reduce across two GPU nodes"):
                result.allreduce = _allreduce(lab, view, rows)
    return result


def _probe(lab: Lab, view: ClusterView, rows: dict[str, NodeRow]) -> None:
    runs = workloads.run_on_each(lab, view, probes.load_probe(), list(rows), timeout(lab, "probe"))
    for node, run in runs.items():
        summary = probes.gpu_summary(run.log).splitlines()
        if run.phase != "Succeeded" or not summary:
            rows[node].problems.append(f"probe {run.phase}: {run.log.strip() or 'no output'}")
            continue
        name, driver, memory = (part.strip() for part in summary[0].split(",", 2))
        rows[node].gpu, rows[node].driver, rows[node].memory = name, driver, memory


def _cuda(lab: Lab, view: ClusterView, rows: dict[str, NodeRow]) -> None:
    pod = workloads.CUDA_CHECK.pods()[0]
    for node, run in workloads.run_on_each(
        lab, view, pod, list(rows), timeout(lab, "cuda")
    ).items():
        verdict = cuda_verdict(run.log)
        rows[node].cuda = verdict.available and verdict.count > 0
        if not rows[node].cuda:
            rows[node].problems.append(f"CUDA check {run.phase}: {run.log.strip() or 'no output'}")


def _allreduce(
    lab: Lab, view: ClusterView, rows: dict[str, NodeRow]
) -> dict[str, AllReduceVerdict]:
    """Both ranks' verdicts by pod name; each rank's busbw (or cause) lands on its node's row."""
    job = workloads.ALLREDUCE
    try:
        workloads.start(lab, job, timeout(lab, "probe"))
        runs = workloads.wait_finished(lab, view, job, timeout(lab, "allreduce"))
    finally:
        workloads.remove(lab, job, timeout(lab, "probe"))
    verdicts = {}
    for name, run in runs.items():
        verdict = verdicts[name] = allreduce_verdict(run.log)
        row = rows.get(run.node)
        if row is None:
            continue
        if verdict.passed:
            row.busbw = verdict.busbw
        else:
            row.problems.append(f"all-reduce {verdict.cause}: {verdict.evidence}")
    return verdicts


def render(result: SmokeResult, simulated: bool) -> list[str]:
    """The smoke table, one line per GPU node, then the problems and notes."""
    header = ("node", "GPU", "driver", "memory", "CUDA ok", "busbw GB/s")
    table = [header] + [
        (
            row.node,
            row.gpu,
            row.driver,
            row.memory,
            "yes" if row.cuda else "no",
            "-"
            if row.busbw is None
            else f"{row.busbw:.2f}" + (" (simulated)" if simulated else ""),
        )
        for row in result.rows
    ]
    lines = columns(table)
    lines += [f"{row.node}: {problem}" for row in result.rows for problem in row.problems]
    lines += result.notes
    lines.append("smoke: PASS" if result.ok else "smoke: FAIL")
    return lines
