"""The world's pace: how much faster than a real cluster it runs, read and changed while it runs.

A program watching (scenario.run, demo, lab.up) wants the world fast; a person practising
with kubectl wants real-cluster time. The world serves its pace beside its AWS
endpoint, at `/sim/pace` (`GET` -> `{"speed": S, "now": <world time>}`, `PUT {"speed": S}`,
with the world's token as a bearer token); the world's clock runs at the pace in force, so
it is read here too. A program's own burst (`"calendar": false`) speeds the world's delays
but not its calendar: a person's GPU time limit and GPU minutes count the evening they
spend, not the minutes a check's fast run would be on EKS.
"""

from __future__ import annotations

import json
import math
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from labs.kube.resources import BadRequest, MethodNotAllowed
from labs.settings import range_problem
from labs.sim.timings import Timings, WorldClock

PACE_PATH = "/sim/pace"
TIMEOUT_SECONDS = 5.0

Control = Callable[[str, Any], dict]


def control(timings: Timings, clock: WorldClock, on_change: Callable[[], None]) -> Control:
    """The world's handler for PACE_PATH, acting on the world's shared timings and clock;
    `on_change` runs after a new pace is in force."""

    def change(body: Any) -> None:
        wanted: Any = body.get("speed") if isinstance(body, dict) else None
        try:
            speed = float(wanted)
        except (TypeError, ValueError):
            speed = math.nan
        if problem := range_problem("speed", speed):
            raise BadRequest(f"speed {wanted!r} {problem} (1 = real time)")
        timings.set_speed(speed)
        if body.get("calendar", True) is not False:
            clock.set_speed(speed)
        on_change()

    return put_or_get(PACE_PATH, change, lambda: {"speed": timings.speed,
                                                  "now": clock.now().isoformat()})  # fmt: skip


def put_or_get(path: str, put: Callable[[Any], None], get: Callable[[], dict]) -> Control:
    """A control of the world at `path`: PUT changes it (idempotent), then GET's answer, what
    is in force, is returned; any other method is refused."""

    def handle(method: str, body: Any) -> dict:
        if method == "PUT":
            put(body)
        elif method != "GET":
            raise MethodNotAllowed(f"{method} is not allowed on {path}: use GET or PUT")
        return get()

    return handle


def call(
    world: Mapping[str, Any], path: str, method: str, body: dict | None = None
) -> dict[str, Any]:
    """One request to a control of the world (`path`: its pace, its GPU faults), with its
    token (`world`: its endpoints)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{world['aws_endpoint_url']}{path}", data=data, method=method,
        headers={"Content-Type": "application/json",
                 "Authorization": f"Bearer {world['kube_token']}"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
        document: dict[str, Any] = json.load(response)
        return document


def read_speed(world: Mapping[str, Any]) -> float:
    """The running world's speed."""
    return float(call(world, PACE_PATH, "GET")["speed"])


def read_now(world: Mapping[str, Any]) -> datetime:
    """The running world's clock."""
    return datetime.fromisoformat(call(world, PACE_PATH, "GET")["now"])


def write_speed(world: Mapping[str, Any], speed: float, calendar: bool = True) -> float:
    """Run the world at `speed` from now on (its calendar too unless `calendar` is False);
    returns the speed in force."""
    return float(call(world, PACE_PATH, "PUT", {"speed": speed, "calendar": calendar})["speed"])
