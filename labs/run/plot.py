"""Draw a run's timeline as a PNG: one step curve per gauge, inject/revert and the alerts that
fired as vertical lines.

Numeric gauges (GPUs advertised, pods ready) share the usual y axis, with "absent"
drawn below zero (a DaemonSet that is NotFound is not the same as one with 0 ready);
text gauges (a pod phase) get one y level per value: pod phases in their lifecycle
order, anything else in order of appearance. The x axis is in real-cluster seconds, so
a rehearsal's curve reads like the write-up's timings (< 10 s, ~40 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labs.state import StateWriteError

ABSENT_LEVEL = -1
# The curve of a scenario that declares no gauge (its symptoms are outside the cluster view,
# as nccl-sg-block's SG rules and workload logs): how many checks had held by then.
CHECKS_HELD = "checks held (this scenario has no gauge)"
# (colour, line style, width) of a mark's vertical line: a step of the run, a check that held,
# an alert that fired.
MARK_STYLES = {
    "phase": ("tab:red", "--", 1.5),
    "check": ("tab:gray", ":", 0.8),
    "alert": ("tab:orange", "-.", 1.5),
}
# Marks named on the plot: (axis, height in the axis, text offset): steps at the top, alerts
# at the bottom.
LABELLED = {"phase": (0, 1.0, -12), "alert": (-1, 0.0, 4)}
# Pod phases bottom-up in the order a pod lives them.
LIFECYCLE_ORDER = ("absent", "Pending", "Running", "Succeeded", "Failed")


def _is_numeric(values: list[Any]) -> bool:
    return all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values
    )


def _levels(values: list[Any]) -> tuple[list[float], list[float], list[str]]:
    """y values plus tick positions and labels for one gauge."""
    if _is_numeric(values):
        ys = [ABSENT_LEVEL if v is None else float(v) for v in values]
        top = int(max([0.0, *ys]))
        ticks = [float(t) for t in range(0, top + 1)]
        labels = [str(t) for t in range(0, top + 1)]
        if ABSENT_LEVEL in ys:
            ticks.insert(0, ABSENT_LEVEL)
            labels.insert(0, "absent")
        return ys, ticks, labels
    seen = list(dict.fromkeys(str(v) for v in values))
    order = [v for v in LIFECYCLE_ORDER if v in seen] + [
        v for v in seen if v not in LIFECYCLE_ORDER
    ]
    return (
        [float(order.index(str(v))) for v in values],
        [float(i) for i in range(len(order))],
        order,
    )


def _checks_held(marks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Samples of CHECKS_HELD: 0 at the first mark, one more at each check that held."""
    held = sorted(m["t"] for m in marks if m["kind"] == "check")
    start = min(m["t"] for m in marks)
    return [{"t": start, CHECKS_HELD: 0}] + [
        {"t": t, CHECKS_HELD: count} for count, t in enumerate(held, start=1)
    ]


def plot_timeline(timeline: dict[str, Any], path: Path, title: str, speed: float = 1.0) -> bool:
    """Write the PNG; False (and no file) when there is nothing to draw: no sample and no
    mark (a run stopped before anything happened).

    `speed` is the rehearsal's speed-up; the x axis says how to read it as real time.
    """
    gauges = timeline.get("gauges") or []
    samples = timeline.get("samples") or []
    if not (gauges and samples):
        if not timeline.get("marks"):
            return False
        gauges, samples = [CHECKS_HELD], _checks_held(timeline["marks"])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    marks = [{**m, "t": m["t"] * speed} for m in timeline.get("marks") or []]
    times = [s["t"] * speed for s in samples]
    end = max([*times, *(m["t"] for m in marks)]) + 0.05 * (max(times) - min(times) or 1.0)
    figure, axes = plt.subplots(
        len(gauges), 1, sharex=True, figsize=(10, 2.0 * len(gauges) + 1), squeeze=False
    )
    for axis, gauge in zip(axes[:, 0], gauges, strict=True):
        ys, ticks, labels = _levels([s.get(gauge) for s in samples])
        axis.step([*times, end], [*ys, ys[-1]], where="post", linewidth=2)
        axis.set_yticks(ticks, labels)
        axis.set_ylim(min(ticks) - 0.4, max(ticks) + 0.4)
        axis.set_title(gauge, loc="left", fontsize=9)
        axis.grid(axis="x", alpha=0.3)
        for mark in marks:
            color, line, width = MARK_STYLES.get(mark["kind"], MARK_STYLES["check"])
            axis.axvline(mark["t"], color=color, linestyle=line, linewidth=width)
    for mark in marks:
        if mark["kind"] in LABELLED:
            axis, height, offset = LABELLED[mark["kind"]]
            axes[axis, 0].annotate(
                mark["label"],
                (mark["t"], height),
                xycoords=("data", "axes fraction"),
                xytext=(3, offset),
                textcoords="offset points",
                color=MARK_STYLES[mark["kind"]][0],
                fontsize=9,
            )
    scale = f" (the rehearsal ran {speed:g}x faster)" if speed != 1 else ""
    axes[-1, 0].set_xlabel(f"real-cluster seconds since injection{scale}")
    figure.suptitle(f"{title}: timeline", fontsize=11)
    figure.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=110)
    except OSError as error:  # a full disk: the report names the file, not PIL's traceback
        raise StateWriteError(f"could not write {path}: {error.strerror or error}") from error
    finally:
        plt.close(figure)
    return True
