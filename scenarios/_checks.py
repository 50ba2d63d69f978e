"""Checks several scenarios share: GPUs advertised, device-plugin pods ready, the ClusterPolicy
ready again, and a probe that waited, then ran and printed what the baseline printed.

Each takes what it needs from the run's baseline (`gpu_nodes`, the probe's output), so a
scenario only names which probe or how many nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labs.kube import gpu, probes
from labs.run.contract import Context, Step, Verdict

Condition = Callable[[Context], Verdict]


def init_status(pod: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """The status of the pod's init container `name` ({} when it has none)."""
    statuses = ((pod or {}).get("status") or {}).get("initContainerStatuses") or []
    return next((s for s in statuses if s["name"] == name), {})


def describe_init(pod: dict[str, Any] | None, name: str, no_pod: str) -> str:
    """`<pod> <name>: waiting CrashLoopBackOff, restarts N, last exit 1` (`no_pod` for None)."""
    if pod is None:
        return no_pod
    status = init_status(pod, name)
    state = status.get("state") or {}
    now = next(iter(state), "none")
    reason = (state.get(now) or {}).get("reason", "")
    last = ((status.get("lastState") or {}).get("terminated") or {}).get("exitCode")
    return (
        f"{gpu.name_of(pod)} {name}: {f'{now} {reason}'.rstrip()}, "
        f"restarts {status.get('restartCount', 0)}"
        f"{f', last exit {last}' if last is not None else ''}"
    )


def policy_state_step(means: str) -> Step:
    """The by-hand look at the ClusterPolicy's state, which every operator fault leaves `ready`."""
    return Step(
        "kubectl get clusterpolicy cluster-policy -o jsonpath='{.status.state}{\"\\n\"}'",
        "ready",
        means,
    )


def allocatable_everywhere(value: str) -> Condition:
    """Every baseline GPU node advertises allocatable nvidia.com/gpu `value` ("0" keeps the key)."""

    def condition(ctx: Context) -> Verdict:
        values = gpu.allocatable_by_node(ctx.view)
        held = all(values.get(n) == value for n in ctx.baseline["gpu_nodes"])
        return held, gpu.describe_allocatable(ctx.view)

    return condition


def plugins_ready(on_nodes: int | None) -> Condition:
    """Device-plugin pods ready on `on_nodes` nodes (None: desired/current/ready all N)."""

    def condition(ctx: Context) -> Verdict:
        plugin = gpu.daemonset(ctx.view)
        counts = gpu.daemonset_counts(plugin) if plugin else (0, 0, 0)
        every = (len(ctx.baseline["gpu_nodes"]),) * 3
        held = counts[2] >= on_nodes if on_nodes else counts == every
        return held, gpu.describe_daemonset(ctx.view)

    return condition


def policy_ready_again(ctx: Context) -> Verdict:
    """status.state ready with the device plugin back on every node (not a stale "ready")."""
    policy = gpu.cluster_policy(ctx.view)
    state = gpu.policy_state(policy)
    plugin_back = plugins_ready(None)(ctx)[0]
    said = gpu.policy_error(policy)
    why = f" ({said})" if said else ""
    return plugin_back and state == "ready", f"status.state {state!r}{why}"


def probe_ran_after_waiting(name: str) -> Condition:
    """Pod `name` Succeeded and its events tell it: FailedScheduling first, Scheduled after."""

    def condition(ctx: Context) -> Verdict:
        phase, events = gpu.pod_story(ctx.view, name)
        held = phase == "Succeeded" and gpu.waited_then_scheduled(events)
        seen = f"{name} {phase}; events: {', '.join(gpu.event_reasons(events))}"
        if phase == "Failed" and events:  # what ended it, in the kubelet's words
            seen += f" ({events[-1].get('message', '')})"
        return held, seen

    return condition


def probe_output_as_baseline(name: str) -> Condition:
    """Pod `name` finished and printed the baseline probe's GPU line."""

    def condition(ctx: Context) -> Verdict:
        phase, expected = gpu.pod_phase(ctx.view, name), ctx.baseline["probe_output"]
        if phase != "Succeeded":
            return False, f"{name} {phase}"
        output = probes.gpu_summary(probes.read_probe_log(ctx.lab, name))
        return output == expected, f"{output!r} (baseline {expected!r})"

    return condition


def policy_stays_ready(fault_seen: Condition) -> Condition:
    """status.state is still `ready` once `fault_seen` holds (the fault has taken effect)."""

    def condition(ctx: Context) -> Verdict:
        state = gpu.policy_state(gpu.cluster_policy(ctx.view))
        in_effect, seen = fault_seen(ctx)
        return in_effect and state == "ready", f"status.state {state!r} while {seen}"

    return condition


def policy_not_ready_naming(state: str) -> Condition:
    """ClusterPolicy status.state notReady, its Error condition naming operator state `state`
    (`... states not ready: [state-device-plugin ...]`)."""

    def condition(ctx: Context) -> Verdict:
        policy = gpu.cluster_policy(ctx.view) or {}
        now = gpu.policy_state(policy)
        conditions = (policy.get("status") or {}).get("conditions") or []
        error: dict[str, Any] = next((c for c in conditions if c.get("type") == "Error"), {})
        message = str(error.get("message", ""))
        held = now == "notReady" and state in message
        return held, f"status.state {now!r}: {message or 'no Error condition'}"

    return condition
