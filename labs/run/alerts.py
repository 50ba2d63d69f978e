"""What the lab's Prometheus said while a run's fault was in: when each alert went pending and
firing (T+ on the run's timeline), whether the scenario's expected alerts fired, and whether the
trap rules stayed silent.

A watch polls Prometheus' /api/v1/alerts from the injection on (Prometheus keeps no history of
its alerts' states, so they are seen as they happen); the expected alerts become checks of the
run, each with its rule's `for:` and a minute of scraping and evaluation as its time limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from labs.kube.alerts import (
    Alert,
    AlertRule,
    MonitoringUnavailable,
    monitoring_installed,
    read_alerts,
    read_rules,
)
from labs.run.contract import Check, Context, Verdict

POLL_SECONDS = 0.5
# Beyond a rule's `for:`: kube-state-metrics sees the change, Prometheus scrapes and evaluates
# (real-cluster seconds; kube-prometheus-stack scrapes and evaluates every 30 s).
ALERT_SLACK = 90.0
# What a scrape and an evaluation add on EKS at most (kube-prometheus-stack's 30 s each).
EKS_SCRAPE_AND_EVALUATION = 60.0


@dataclass(frozen=True)
class AlertMoment:
    """One alert over a run: first seen pending and firing (s since the injection), or None."""

    name: str
    expected: bool
    trap: bool
    pending_at: float | None
    firing_at: float | None
    summary: str
    before: bool = False  # still pending or firing when the fault went in
    for_seconds: float | None = None  # the rule's `for:` as Prometheus runs it (wall seconds)

    def to_dict(self) -> dict[str, Any]:
        """The report's record, T+ to the millisecond."""
        record = asdict(self)
        for key in ("pending_at", "firing_at"):
            record[key] = None if record[key] is None else round(record[key], 3)
        return record


class AlertWatch:
    """Polls the alerts in a thread of its own; `moments` says what it saw and when."""

    def __init__(self, client: Any, rules: Sequence[AlertRule]) -> None:
        self.rules = {rule.name: rule for rule in rules}
        self._client = client
        self._origin = time.monotonic()
        self._seen: dict[tuple[str, str], float] = {}  # (alert, state) -> first seen
        self._summaries: dict[str, str] = {}
        self._last = "no answer from Prometheus yet"
        self._before: list[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="alert-watch", daemon=True)

    @classmethod
    def open(cls, client: Any) -> AlertWatch | None:
        """A watch of the lab's Prometheus, or None when the lab has no monitoring release."""
        if not monitoring_installed(client):
            return None
        return cls(client, read_rules(client))

    def quiet(self, timeout: float) -> list[str]:
        """Wait (at most `timeout` wall seconds) until no alert is pending or firing, so the
        fault's alerts are its own (a lab just up still fires what it fired without GPUs);
        returns those still there."""
        deadline = time.monotonic() + timeout
        while True:
            names = sorted({alert.name for alert in read_alerts(self._client)})
            if not names or time.monotonic() >= deadline:
                self._before = names
                return names
            time.sleep(POLL_SECONDS)

    def start(self, origin: float) -> None:
        """Poll from now on; times count from `origin` (a time.monotonic() instant)."""
        self._origin = origin
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * POLL_SECONDS + 5.0)

    def _poll(self) -> None:
        while not self._stopping.is_set():
            try:
                self._saw(read_alerts(self._client), time.monotonic())
            except MonitoringUnavailable as error:
                with self._lock:
                    self._last = str(error)
            self._stopping.wait(POLL_SECONDS)

    def _saw(self, alerts: list[Alert], now: float) -> None:
        with self._lock:
            for alert in alerts:
                self._seen.setdefault((alert.name, alert.state), now)
                if alert.state == "firing":  # a rule that fires skipped nothing: it was pending
                    self._seen.setdefault((alert.name, "pending"), now)
                self._summaries.setdefault(alert.name, alert.summary)
            states = sorted(f"{a.name} {a.state}" for a in alerts)
            self._last = ", ".join(states) or "no alert pending or firing"

    def fired(self, name: str) -> bool:
        """`name` was seen firing."""
        with self._lock:
            return (name, "firing") in self._seen

    def check(self, name: str) -> Check:
        """The check that `name` fires: its rule's `for:` and ALERT_SLACK as the time limit."""
        rule = self.rules.get(name)
        wait = (rule.for_seconds if rule else 0.0) + ALERT_SLACK

        def firing(_ctx: Context) -> Verdict:
            with self._lock:
                last = self._last
            return self.fired(name), f"Prometheus: {last}"

        return Check(f"alert {name} firing", firing, timeout=wait)

    def moments(self, expected: Sequence[str]) -> list[AlertMoment]:
        """The expected alerts, every other alert seen, and every trap rule, in that order."""
        with self._lock:
            seen = dict(self._seen)
            summaries = dict(self._summaries)
        seen_names = list(dict.fromkeys(name for name, _ in sorted(seen, key=seen.__getitem__)))
        traps = [name for name, rule in self.rules.items() if rule.trap]
        names = list(dict.fromkeys([*expected, *seen_names, *traps]))

        def at(name: str, state: str) -> float | None:
            moment = seen.get((name, state))
            return None if moment is None else moment - self._origin

        def lasts(name: str) -> float | None:
            rule = self.rules.get(name)
            return None if rule is None else rule.for_seconds

        return [
            AlertMoment(name, name in expected, name in traps, at(name, "pending"),
                        at(name, "firing"), summaries.get(name, ""), name in self._before,
                        lasts(name))
            for name in names
        ]  # fmt: skip
