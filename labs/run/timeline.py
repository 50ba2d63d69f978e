"""A run's timeline: gauge samples taken on every cluster change, plus named marks.

Samples come from `ClusterView.on_change`, so each curve moves exactly when the
cluster did (no polling interval smears the picture). Moments are kept as
time.monotonic() instants and shown relative to `origin` (the injection), so the
baseline part of a run has negative times.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from labs.kube.view import Objects

Gauge = Callable[[Objects], Any]  # one curve: a reading of the cluster


@dataclass
class Timeline:
    """Samples of named gauges over time (only changes are kept) and marks."""

    gauges: Mapping[str, Gauge]
    origin: float = field(default_factory=time.monotonic)
    _samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list, repr=False)
    _marks: list[tuple[float, str, str]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sample(self, view: Objects) -> None:
        """Read every gauge; keep the reading when a value changed (an on_change listener)."""
        if not self.gauges:
            return
        values = {name: gauge(view) for name, gauge in self.gauges.items()}
        with self._lock:
            if not self._samples or self._samples[-1][1] != values:
                self._samples.append((time.monotonic(), values))

    def mark(self, label: str, kind: str = "phase", at: float | None = None) -> None:
        """Mark a moment (`at`: a time.monotonic() instant, default now).

        kind "phase" is a step of the run (inject, revert), "check" a check that held.
        """
        with self._lock:
            self._marks.append((time.monotonic() if at is None else at, label, kind))

    def to_dict(self) -> dict[str, Any]:
        """Samples and marks with `t` in seconds since `origin`."""
        with self._lock:
            return {
                "gauges": list(self.gauges),
                "samples": [
                    {"t": round(at - self.origin, 3), **values} for at, values in self._samples
                ],
                "marks": [
                    {"t": round(at - self.origin, 3), "label": label, "kind": kind}
                    for at, label, kind in sorted(self._marks)
                ],
            }
