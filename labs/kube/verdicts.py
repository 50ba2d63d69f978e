"""What the lab's workloads printed, read as verdicts: passed or not, why, and the line saying so.

The patterns are those of the real output (PyTorch 2.11 c10d, NCCL 2.28.9, the lab's own
scripts), so the same reading holds for a real cluster's logs and the rehearsal's; tests hold
both to the same verdicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (cause, pattern) in the order a reader should trust them: the first match names the cause.
_ALLREDUCE_FAILURES = (
    ("rendezvous timed out", re.compile(r"DistNetworkError: The client socket has timed out.*")),
    ("rendezvous timed out", re.compile(r"DistStoreError: Timed out after .* clients joined\.")),
    (
        "NCCL connect timed out",
        re.compile(r"socketPollConnect: connect to .*Connection timed out.*"),
    ),
    ("NCCL connect timed out", re.compile(r"allreduce: FAIL no result after .*")),
    ("wrong sum", re.compile(r"allreduce: .*: WRONG")),
    (
        "no GPU",
        re.compile(
            r"(Found no NVIDIA driver|CUDA driver initialization failed|no CUDA-capable device).*"
        ),
    ),
)
_BANDWIDTH = re.compile(r"algbw (?P<algbw>[0-9.]+) GB/s, busbw (?P<busbw>[0-9.]+) GB/s")


@dataclass(frozen=True)
class AllReduceVerdict:
    """One rank's all-reduce: passed with its bandwidths, or the cause and the line showing it."""

    passed: bool
    cause: str
    evidence: str
    busbw: float | None = None
    algbw: float | None = None


def allreduce_verdict(log: str) -> AllReduceVerdict:
    lines = log.splitlines()
    bandwidth = next((m for m in map(_BANDWIDTH.search, lines) if m), None)
    if "allreduce: PASS" in lines and bandwidth:
        return AllReduceVerdict(
            True, "passed", bandwidth.group(0), float(bandwidth["busbw"]), float(bandwidth["algbw"])
        )
    for cause, pattern in _ALLREDUCE_FAILURES:
        found = next((m for m in map(pattern.search, lines) if m), None)
        if found:
            return AllReduceVerdict(False, cause, found.group(0))
    last = next((line for line in reversed(lines) if line.strip()), "no output")
    return AllReduceVerdict(False, "no result", last)


@dataclass(frozen=True)
class TcpVerdict:
    """One TCP check: connected, timed out, refused, or the name did not resolve."""

    outcome: str
    evidence: str

    @property
    def connected(self) -> bool:
        return self.outcome == "connected"


_TCP = (
    ("connected", re.compile(r"tcp-check: connected to .*")),
    ("timed out", re.compile(r"tcp-check: connect to .* timed out after .*")),
    ("refused", re.compile(r"tcp-check: connect to .* failed: .*")),
    ("no such name", re.compile(r"tcp-check: cannot resolve .*")),
)


def tcp_verdict(log: str) -> TcpVerdict:
    for outcome, pattern in _TCP:
        found = pattern.search(log)
        if found:
            return TcpVerdict(outcome, found.group(0))
    return TcpVerdict("no result", log.strip().splitlines()[-1] if log.strip() else "no output")


@dataclass(frozen=True)
class CudaVerdict:
    """The PyTorch CUDA check: whether a CUDA runtime saw a GPU, how many, which."""

    available: bool
    count: int
    name: str


def cuda_verdict(log: str) -> CudaVerdict:
    values = dict(
        line.split(": ", 1) for line in log.splitlines() if line.startswith(("CUDA ", "GPU "))
    )
    count = values.get("GPU count", "0")
    return CudaVerdict(
        values.get("CUDA available") == "True",
        int(count) if count.isdigit() else 0,
        values.get("GPU name", "None"),
    )
