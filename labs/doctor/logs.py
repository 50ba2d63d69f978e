"""Bounded log tails of the pods a finding points at, matched against the known failure lines.

Only pods a finding names are read (a device plugin on a node that advertises no GPU, an
operand pod that is not ready, a workload that wants a GPU), each container's last
TAIL_LINES lines, at most MAX_READS reads per run. A match becomes a finding that explains
the one that pointed at the pod, except benign lines (the validator's duplicate symlinks),
which explain nothing: they must not pass for the cause of a crash.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from labs.doctor.catalog import kind
from labs.doctor.facts import Facts, Obj, node_subject
from labs.doctor.model import DoctorFinding, Evidence, Link, LogRequest
from labs.kube import gpu, rest
from labs.kube.logs import READ_TIMEOUT
from labs.kube.resources import PODS, KubeApiError

if TYPE_CHECKING:
    from labs.lab import Lab

TAIL_LINES = 200
MAX_READS = 8
MAX_CONTAINERS = 3  # per pod: the failing ones first, then the main container
MAX_LINES = 3  # matching lines kept as evidence, the latest
SKIP_DUPLICATE_LINKS = "CUDA_DRIVER_SKIP_DUPLICATE_LINKS"
Reader = Callable[[LogRequest], str]


@dataclass(frozen=True)
class LogPattern:
    """A known failure line: the finding it proves (None: evidence for the pointing finding),
    for which kind of pod, and whether it explains what pointed there (benign lines do not)."""

    finding: str | None
    pattern: re.Pattern[str]
    groups: tuple[str, ...]
    explains_pointer: bool = True


# Beyond the finding that pointed at the log: what else a proven line explains.
ALSO_EXPLAINS = {
    "toolkit-glibc-mismatch": ("operand-not-ready", "clusterpolicy-not-ready"),
    "nvml-init-failed": ("no-devices-found",),  # FAIL_ON_INIT_ERROR=false logs both
}
DEVICE_PLUGIN, OPERAND, WORKLOAD = ("device-plugin",), ("operand",), ("workload",)
PATTERNS = tuple(
    LogPattern(finding, re.compile(line), groups, explains)
    for finding, line, groups, explains in (
        ("gpu-xid-error", r"XidCriticalError: Xid=(?P<xid>\d+)", DEVICE_PLUGIN, True),
        ("nvml-init-failed", r"Failed to initialize NVML|nvml init failed|could not load NVML "
         r"library", DEVICE_PLUGIN, True),
        ("no-devices-found", r"No devices found\. Waiting indefinitely", DEVICE_PLUGIN, True),
        ("device-plugin-config-missing", r"specified config \S+ does not exist", DEVICE_PLUGIN,
         True),
        ("device-plugin-registration-failed", r"Could not register device plugin|Failed to "
         r"start one or more plugins", DEVICE_PLUGIN, True),
        ("toolkit-glibc-mismatch", r"version .GLIBC_2\.\d+. not found", DEVICE_PLUGIN + OPERAND,
         True),
        ("validator-duplicate-symlinks", r"Could not create symlink: symlink \S+ \S+: file "
         r"exists", OPERAND, False),
        ("validator-workload-blocked", r"gave up waiting for pod|Requested: \d+, Available: 0",
         OPERAND, True),
        (None, r"Failed to initialize NVML: .*", WORKLOAD, True),
    )
)  # fmt: skip


def log_requests(pod: Obj, group: str) -> list[LogRequest]:
    """The containers of `pod` worth reading: failing ones (init containers too), then the
    first container, at most MAX_CONTAINERS."""
    statuses = gpu.container_statuses(pod)
    failing = [s["name"] for s in statuses if not s.get("ready") and _troubled(s)]
    main = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
    names = list(dict.fromkeys([*failing, *([main] if main else [])]))[:MAX_CONTAINERS]
    meta = pod["metadata"]
    return [LogRequest(str(meta.get("namespace")), meta["name"], name, group) for name in names]


def _troubled(status: Obj) -> bool:
    state = status.get("state") or {}
    waiting = (state.get("waiting") or {}).get("reason")
    terminated = state.get("terminated") or {}
    return bool(waiting) or (bool(terminated) and terminated.get("exitCode", 0) != 0)


def api_reader(lab: Lab) -> Reader:
    """Read a container's log tail through the lab's client, as `kubectl logs --tail` does."""

    def read(request: LogRequest) -> str:
        path = PODS.path(request.namespace, request.pod, "log")
        query = {"container": request.container, "tailLines": TAIL_LINES}
        return rest.get(lab.kube, path, query, READ_TIMEOUT).decode("utf-8", "replace")

    return read


def read_pointed_logs(
    facts: Facts, findings: Iterable[DoctorFinding], read: Reader
) -> tuple[list[DoctorFinding], list[str], list[str]]:
    """(findings the log lines prove, the logs read, the logs that could not be read)."""
    asked: dict[LogRequest, list[DoctorFinding]] = {}
    for finding in findings:
        for request in finding.read_logs:
            asked.setdefault(request, []).append(finding)
    found: list[DoctorFinding] = []
    done: list[str] = []
    failed: list[str] = []
    for request, pointers in list(asked.items())[:MAX_READS]:
        try:
            text = read(request)
        except (KubeApiError, OSError) as error:
            failed.append(
                f"{request.source}: {type(error).__name__} {getattr(error, 'status', '')}"
            )
            continue
        done.append(request.source)
        found += match_lines(facts, request, pointers, text)
    failed += [f"{r.source}: over the limit of {MAX_READS} reads" for r in list(asked)[MAX_READS:]]
    return found, done, failed


def match_lines(
    facts: Facts, request: LogRequest, pointers: list[DoctorFinding], text: str
) -> list[DoctorFinding]:
    """The findings the known lines in one log tail prove (the last MAX_LINES matching lines of
    each known kind are its evidence)."""
    lines = [line.strip() for line in text.splitlines()]
    found = []
    for known in PATTERNS:
        if request.group not in known.groups:
            continue
        hits = [(line, m) for line in lines if (m := known.pattern.search(line))][-MAX_LINES:]
        if hits:
            evidence = tuple(Evidence(request.source, "log line", line) for line, _ in hits)
            found += _proven(facts, request, pointers, known, evidence, hits[-1][1])
    return found


def _proven(
    facts: Facts,
    request: LogRequest,
    pointers: list[DoctorFinding],
    known: LogPattern,
    evidence: tuple[Evidence, ...],
    match: re.Match[str],
) -> list[DoctorFinding]:
    if known.finding is None:  # more evidence for the findings that asked: they failed for this
        return [replace(p, evidence=p.evidence + evidence, severity="error") for p in pointers]
    node = _node_of(facts, request)
    explains = [Link(p.name, p.subject) for p in pointers] if known.explains_pointer else []
    explains += [Link(name) for name in ALSO_EXPLAINS.get(known.finding, ())]
    line = evidence[-1].value
    return [
        kind(known.finding).found(
            node_subject(node),
            f"{request.source}: {line[:160]}",
            evidence,
            explains=explains,
            pod=request.pod,
            fields=line_fields(facts, node, line, match),
        )
    ]


def line_fields(
    facts: Facts, node: str, line: str = "", match: re.Match[str] | None = None
) -> dict[str, object]:
    """What a node-internals finding's meaning and fix templates may name."""
    policy = facts.policy or {}
    return {
        "line": line,
        "node": node,
        "namespace": facts.operator_namespace,
        "policy": gpu.name_of(policy) if policy else gpu.CLUSTER_POLICY_NAME,
        "xid": (match.groupdict().get("xid") if match else None) or "?",
        "toolkit": toolkit_version(facts) or "the toolkit image",
        "os": os_image(facts, node),
        "myth": _myth(policy),
    }


def _node_of(facts: Facts, request: LogRequest) -> str:
    pod = facts.find("pods", request.pod, request.namespace) or {}
    return str((pod.get("spec") or {}).get("nodeName") or "unknown")


def toolkit_version(facts: Facts) -> str | None:
    """The container toolkit the operator deploys: the ClusterPolicy's version, else the tag
    of the toolkit DaemonSet's image."""
    section = ((facts.policy or {}).get("spec") or {}).get("toolkit") or {}
    if section.get("version"):
        return str(section["version"])
    toolkit = gpu.daemonset(facts, "nvidia-container-toolkit-daemonset")
    containers = gpu.pod_template_spec(toolkit).get("containers") or [{}]
    image = str(containers[0].get("image", ""))
    return image.rsplit(":", 1)[-1] if ":" in image else None


def os_image(facts: Facts, node: str) -> str:
    found = facts.find("nodes", node) or {}
    return str(((found.get("status") or {}).get("nodeInfo") or {}).get("osImage") or "unknown OS")


def _myth(policy: Obj) -> str:
    """A note when the ClusterPolicy carries the write-up's non-existent switch."""
    validator = (policy.get("spec") or {}).get("validator") or {}
    pairs = [*(validator.get("env") or []), *((validator.get("plugin") or {}).get("env") or [])]
    env = {e["name"]: str(e.get("value", "")) for e in pairs}
    if SKIP_DUPLICATE_LINKS not in env:
        return ""
    return (
        f". This cluster sets {SKIP_DUPLICATE_LINKS}={env[SKIP_DUPLICATE_LINKS]}: it does nothing"
    )
