from __future__ import annotations

import pytest

from qfarm.common.reporting.rates import RateWindow


def test_rates_are_over_the_window_not_since_the_first_sample() -> None:
    w = RateWindow(window_s=10.0)
    # A slow start, then 10 jobs a second: the window sees only the recent pace.
    w.add(0.0, {"retrieve": 0})
    w.add(30.0, {"retrieve": 30})
    for t in range(31, 51):
        w.add(float(t), {"retrieve": 30 + (t - 30) * 10})
    assert w.rates()["retrieve"] == pytest.approx(10.0)


def test_a_stage_already_busy_at_the_first_sample_is_not_zero() -> None:
    w = RateWindow(window_s=10.0)
    w.add(100.0, {"retrieve": 500, "verify": 400})  # the run was going before the bar
    w.add(102.0, {"retrieve": 520, "verify": 410})
    assert w.rates() == {"retrieve": pytest.approx(10.0), "verify": pytest.approx(5.0)}


def test_a_finished_stage_falls_to_zero() -> None:
    w = RateWindow(window_s=5.0)
    for t in range(0, 10):
        w.add(float(t), {"retrieve": min(t, 4) * 10})
    assert w.rates()["retrieve"] == 0.0


def test_one_sample_or_none_gives_no_rate_rather_than_zero() -> None:
    w = RateWindow()
    assert w.rates() == {}
    w.add(1.0, {"retrieve": 3})  # a run that ended before its second report
    assert w.rates() == {}
    with pytest.raises(ValueError, match="window_s"):
        RateWindow(window_s=0)
