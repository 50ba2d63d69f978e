"""Checks several scenarios share: GPUs advertised, device-plugin pods ready, the ClusterPolicy
ready again, and a probe that waited, then ran and printed what the baseline printed.

Each takes what it needs from the run's baseline (`gpu_nodes`, the probe's output), so a
scenario only names which probe or how many nodes.
"""

from __future__ import annotations

from collections.abc import Callable

from labs.kube import gpu, probes
from labs.run.contract import Context, Step, Verdict

Condition = Callable[[Context], Verdict]


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
        return held, f"{name} {phase}; events: {', '.join(gpu.event_reasons(events))}"

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
