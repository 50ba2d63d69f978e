"""One speed factor scales every real-world delay, and the world's pace control changes it."""

from __future__ import annotations

import pytest

from labs.kube.resources import BadRequest, MethodNotAllowed
from labs.sim import pace
from labs.sim.timings import REAL_WORLD_SECONDS, WorldClock, scaled


def test_speed_divides_every_real_world_delay() -> None:
    timings = scaled(60)
    assert timings.node_boot == pytest.approx(5.5)
    for name, seconds in REAL_WORLD_SECONDS.items():
        assert getattr(timings, name) == pytest.approx(seconds / 60)


@pytest.mark.parametrize("speed", [0, -1])
def test_speed_must_be_positive(speed: float) -> None:
    with pytest.raises(ValueError, match="speed must be a positive number"):
        scaled(speed)


def test_the_pace_control_changes_on_put_answers_get_and_names_what_it_refuses() -> None:
    timings, clock, changes = scaled(60), WorldClock(60), []
    handle = pace.control(timings, clock, lambda: changes.append(timings.speed))
    assert handle("PUT", {"speed": 120, "calendar": False})["speed"] == 120
    assert (timings.speed, clock.speed, changes) == (120, 60, [120])  # a burst keeps the calendar
    assert handle("GET", None)["speed"] == 120
    with pytest.raises(BadRequest, match=r"speed 'fast' .*\(1 = real time\)"):
        handle("PUT", {"speed": "fast"})
    with pytest.raises(
        MethodNotAllowed, match="DELETE is not allowed on /sim/pace: use GET or PUT"
    ):
        handle("DELETE", None)
    assert changes == [120]
