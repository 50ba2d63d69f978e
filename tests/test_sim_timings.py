"""One speed factor scales every real-world delay."""

from __future__ import annotations

import pytest

from labs.sim.timings import REAL_WORLD_SECONDS, scaled


def test_speed_divides_every_real_world_delay() -> None:
    timings = scaled(60)
    assert timings.node_boot == pytest.approx(5.5)
    for name, seconds in REAL_WORLD_SECONDS.items():
        assert getattr(timings, name) == pytest.approx(seconds / 60)


@pytest.mark.parametrize("speed", [0, -1])
def test_speed_must_be_positive(speed: float) -> None:
    with pytest.raises(ValueError, match="speed must be a positive number"):
        scaled(speed)
