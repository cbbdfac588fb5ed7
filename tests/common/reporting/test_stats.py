"""Interval math against published values; percentiles against numpy."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from qfarm.common.reporting.stats import (
    Moments,
    QuantileSketch,
    mean_interval,
    newcombe_interval,
    paired_interval,
    percentile,
    t_quantile,
    welch_interval,
    wilson_interval,
)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # Newcombe (1998) table I and the usual textbook cases.
        (8, 10, 0.4902, 0.9433),
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (1, 10, 0.0179, 0.4042),
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
    ],
)
def test_wilson_matches_published_values(k: int, n: int, low: float, high: float) -> None:
    got = wilson_interval(k, n)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 5)[0] == 0.0
    assert wilson_interval(5, 5)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(6, 5)


def test_wilson_narrows_with_n() -> None:
    widths = [
        wilson_interval(n // 2, n)[1] - wilson_interval(n // 2, n)[0] for n in (10, 100, 1000)
    ]
    assert widths[0] > widths[1] > widths[2]


def test_newcombe_matches_published_example() -> None:
    # Newcombe (1998), difference of independent proportions: 56/70 - 48/80, method 10.
    assert newcombe_interval(48, 80, 56, 70) == pytest.approx((0.0524, 0.3339), abs=5e-5)
    # Swapping the runs mirrors the interval.
    low, high = newcombe_interval(56, 70, 48, 80)
    assert (low, high) == pytest.approx((-0.3339, -0.0524), abs=5e-5)


def test_newcombe_empty_side_is_uninformative() -> None:
    assert newcombe_interval(0, 0, 5, 10) == (-1.0, 1.0)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.7062),
        (0.975, 2, 4.3027),
        (0.975, 9, 2.2622),
        (0.975, 30, 2.0423),
        (0.95, 10, 1.8125),
    ],
)
def test_t_quantile_matches_tables(p: float, df: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, abs=1e-4)


def test_t_quantile_tends_to_normal() -> None:
    assert t_quantile(0.975, 1e7) == pytest.approx(1.95996, abs=1e-4)


def test_paired_interval_by_hand() -> None:
    # mean 0.2, sd 0.1, se 0.1/sqrt(3), t(2) = 4.3027
    half = 4.302653 * 0.1 / math.sqrt(3)
    assert paired_interval([0.1, 0.2, 0.3]) == pytest.approx((0.2 - half, 0.2 + half), abs=1e-6)
    # Centring moves the interval, keeps its width.
    low, high = paired_interval([0.1, 0.2, 0.3], centre=0.25)
    assert (low, high) == pytest.approx((0.25 - half, 0.25 + half), abs=1e-6)


def test_mean_interval_needs_two_values_for_a_width() -> None:
    mean, low, high = mean_interval([0.4])
    assert mean == 0.4 and math.isinf(low) and math.isinf(high)


def test_welch_by_hand() -> None:
    a, b = Moments(), Moments()
    for x in (1, 2, 3, 4, 5):
        a.add(x)
        b.add(x + 1)
    # delta 1, variances 2.5 each, se = 1, df = 8, t(8) = 2.306
    assert welch_interval(a, b) == pytest.approx((1 - 2.306004, 1 + 2.306004), abs=1e-5)
    assert a.mean == 3 and a.variance == pytest.approx(2.5)


def test_percentile_matches_numpy() -> None:
    rng = random.Random(7)
    values = sorted(rng.lognormvariate(5, 1) for _ in range(101))
    for q in (0, 1, 50, 90, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0


def test_sketch_is_exact_below_its_limit() -> None:
    values = [float(v) for v in range(1, 101)]
    sketch = QuantileSketch(exact_limit=1000)
    sketch.extend(reversed(values))
    assert sketch.is_exact
    assert sketch.quantile(0.5) == percentile(values, 50)
    assert sketch.quantile(0.95) == percentile(values, 95)
    assert sketch.mean == pytest.approx(50.5)


def test_sketch_stays_within_its_relative_error_beyond_the_limit() -> None:
    rng = random.Random(3)
    values = [rng.lognormvariate(6, 1.2) for _ in range(50_000)]
    sketch = QuantileSketch(exact_limit=1000)
    sketch.extend(values)
    assert not sketch.is_exact
    assert len(sketch._buckets) < 1500  # bounded by the value range, not by the count
    ordered = sorted(values)
    for q in (0.01, 0.5, 0.9, 0.95, 0.99):
        true = ordered[round(q * (len(ordered) - 1))]
        assert sketch.quantile(q) == pytest.approx(true, rel=sketch.relative_error + 1e-3)
    assert sketch.count == 50_000


def test_sketch_handles_zeros_and_empty() -> None:
    assert QuantileSketch().quantile(0.5) is None
    sketch = QuantileSketch(exact_limit=2)
    sketch.extend([0.0, 0.0, 0.0, 5.0])
    assert sketch.quantile(0.5) == 0.0
    assert sketch.quantile(1.0) == pytest.approx(5.0, rel=0.01)
