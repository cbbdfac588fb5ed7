"""Interval estimates and bounded-memory summaries for reports (pure, stdlib only).

* ``wilson_interval``: score interval for one proportion (Wilson 1927). Unlike
  the textbook ``p ± z·se`` it never leaves [0, 1] and stays honest at 0/n and
  n/n, which is where small sweeps live.
* ``rate_interval``: the interval every reported rate carries. Wilson when each
  question contributes one verdict; with several samples per question (n > 1)
  ``cluster_wilson_interval``: Wilson on the design-effect-adjusted sample size,
  the design effect taken from a cluster-robust variance by question (the
  Korn-Graubard recipe). Samples of one question are correlated, so 200
  questions x 3 samples hold far less than 600 independent verdicts.
* ``newcombe_interval``: difference of two independent proportions from the
  two Wilson intervals (Newcombe 1998, method 10), used when two runs share no
  questions (``cluster_newcombe_interval``: the same from clustered intervals).
* ``paired_interval``: t interval over per-question deltas, used when two runs
  share questions: it removes between-question variance (some questions are
  always STRICT, some never), which is most of the variance in a sweep.
* ``welch_interval``: difference of two means (mean ratio) without pairing;
  ``cluster_welch_interval`` the same with cluster-robust variances by question.
* ``QuantileSketch``: exact up to a few thousand values, then log-spaced
  buckets with ~1% relative error, so a 100k-row run keeps a few KB per metric.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

CONFIDENCE = 0.95
Z95 = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.959963984540054


# --------------------------------------------------------------------------- proportions


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``successes / n``; (0, 1) when n is 0 (nothing known)."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} must lie in [0, n={n}]")
    return _wilson(successes / n, n, z)


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's interval for a rate ``p`` observed on ``n`` (possibly effective, fractional)
    independent trials."""
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n)) / denom
    # Clamp float dust so 0/n gives exactly 0 and n/n exactly 1.
    low = 0.0 if p <= 0.0 else max(0.0, centre - half)
    high = 1.0 if p >= 1.0 else min(1.0, centre + half)
    return (low, high)


# --------------------------------------------------------------------------- clustered rates

Cluster = tuple[int, int]  # (successes, trials) of one question


def _pooled(clusters: Sequence[Cluster]) -> tuple[list[Cluster], int, int]:
    used = [(k, n) for k, n in clusters if n > 0]
    for k, n in used:
        if not 0 <= k <= n:
            raise ValueError(f"successes={k} must lie in [0, n={n}] in every cluster")
    return used, sum(k for k, _ in used), sum(n for _, n in used)


def is_one_per_cluster(clusters: Sequence[Cluster]) -> bool:
    """Every question gave at most one verdict: the verdicts are independent draws."""
    return all(n <= 1 for _, n in clusters)


def design_effect(clusters: Sequence[Cluster]) -> float | None:
    """Cluster-robust variance of the pooled rate over the binomial one (Kish's deff).

    ``None`` when it cannot be estimated: fewer than two questions, or a pooled rate of
    exactly 0 or 1 (no spread to measure). Below 1 is reported as it is; the interval
    never uses less than 1 (a lucky, under-dispersed sample must not narrow it).
    """
    used, k, n = _pooled(clusters)
    g = len(used)
    if g < 2 or k in (0, n):
        return None
    p = k / n
    robust = g / (g - 1) * sum((ki - p * ni) ** 2 for ki, ni in used) / (n * n)
    return robust / (p * (1 - p) / n)


def cluster_wilson_interval(
    clusters: Sequence[Cluster], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Wilson's interval for the pooled rate of clustered verdicts (several per question).

    The sample size is the effective one, ``N / deff`` (the design effect from the
    cluster-robust variance, floored at 1), and z becomes Student's t with G - 1 degrees
    of freedom for G questions (Korn and Graubard 1998): so with few questions the
    interval widens, as the variance itself is then uncertain. When every verdict agrees
    (rate 0 or 1) there is no spread to estimate the design effect from, and each
    question counts once (the most conservative case: all its samples alike).
    """
    used, k, n = _pooled(clusters)
    g = len(used)
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    if g < 2:
        # One question: nothing says how its samples vary across questions; it counts once.
        return _wilson(p, 1.0, NormalDist().inv_cdf(0.5 + confidence / 2))
    deff = design_effect(used)
    n_eff = float(g) if deff is None else n / max(deff, 1.0)
    n_eff = min(max(n_eff, 1.0), float(n))
    return _wilson(p, n_eff, t_quantile(0.5 + confidence / 2, g - 1))


def rate_interval(clusters: Sequence[Cluster], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval a reported rate carries: Wilson when each question gave one verdict,
    ``cluster_wilson_interval`` when samples repeat."""
    used, k, n = _pooled(clusters)
    if is_one_per_cluster(used):
        return wilson_interval(k, n, NormalDist().inv_cdf(0.5 + confidence / 2))
    return cluster_wilson_interval(used, confidence)


def interval_method(clusters: Sequence[Cluster]) -> str:
    """How ``rate_interval`` treats these clusters, for tables and JSON."""
    return "Wilson" if is_one_per_cluster(clusters) else "Wilson, clustered by question"


def newcombe_interval(
    k_a: int, n_a: int, k_b: int, n_b: int, z: float = Z95
) -> tuple[float, float]:
    """Interval for ``k_b/n_b - k_a/n_a`` from independent samples (Newcombe's method 10)."""
    if n_a <= 0 or n_b <= 0:
        return (-1.0, 1.0)
    return _newcombe(
        k_a / n_a, wilson_interval(k_a, n_a, z), k_b / n_b, wilson_interval(k_b, n_b, z)
    )


def cluster_newcombe_interval(
    clusters_a: Sequence[Cluster], clusters_b: Sequence[Cluster]
) -> tuple[float, float]:
    """Newcombe's method 10 for B − A built on each run's ``rate_interval`` (clustered when
    its questions were sampled more than once), for runs that share no questions."""
    _, k_a, n_a = _pooled(clusters_a)
    _, k_b, n_b = _pooled(clusters_b)
    if n_a <= 0 or n_b <= 0:
        return (-1.0, 1.0)
    return _newcombe(k_a / n_a, rate_interval(clusters_a), k_b / n_b, rate_interval(clusters_b))


def _newcombe(
    p_a: float, ci_a: tuple[float, float], p_b: float, ci_b: tuple[float, float]
) -> tuple[float, float]:
    (l_a, u_a), (l_b, u_b) = ci_a, ci_b
    d = p_b - p_a
    low = d - math.sqrt((p_b - l_b) ** 2 + (u_a - p_a) ** 2)
    high = d + math.sqrt((u_b - p_b) ** 2 + (p_a - l_a) ** 2)
    return (max(-1.0, low), min(1.0, high))


# --------------------------------------------------------------------------- Student's t


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Inverse CDF of Student's t by bisection (no scipy needed for one number per cell)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


# --------------------------------------------------------------------------- means


@dataclass(slots=True)
class Moments:
    """Running count, sum and sum of squares: mean and variance in O(1) memory."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        self.total += x
        self.total_sq += x * x

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def variance(self) -> float | None:
        """Sample variance (n - 1 denominator); None below two values."""
        if self.n < 2:
            return None
        var = (self.total_sq - self.total * self.total / self.n) / (self.n - 1)
        return max(var, 0.0)


def mean_interval(
    values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """Mean of ``values`` and its t interval; the interval is infinite below two values."""
    m = len(values)
    if m == 0:
        raise ValueError("mean_interval needs at least one value")
    mean = sum(values) / m
    if m < 2:
        return (mean, -math.inf, math.inf)
    var = sum((v - mean) ** 2 for v in values) / (m - 1)
    half = t_quantile(0.5 + confidence / 2, m - 1) * math.sqrt(var / m)
    return (mean, mean - half, mean + half)


def paired_interval(
    deltas: Sequence[float], centre: float | None = None, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """t interval for a delta from per-unit (per-question) deltas.

    ``centre`` lets the caller centre the interval on the pooled delta (B − A
    over all rows) while taking its width from the spread of the per-question
    deltas; with equal samples per question the two centres coincide.
    """
    mean, low, high = mean_interval(deltas, confidence)
    if centre is None or math.isinf(low):
        return (low, high)
    half = (high - low) / 2
    return (centre - half, centre + half)


def welch_interval(a: Moments, b: Moments, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Interval for ``mean(b) - mean(a)`` with Welch–Satterthwaite degrees of freedom."""
    if a.n < 2 or b.n < 2 or a.mean is None or b.mean is None:
        return (-math.inf, math.inf)
    va, vb = (a.variance or 0.0) / a.n, (b.variance or 0.0) / b.n
    d = b.mean - a.mean
    se2 = va + vb
    if se2 == 0:
        return (d, d)
    df = se2 * se2 / ((va * va) / (a.n - 1) + (vb * vb) / (b.n - 1))
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(se2)
    return (d - half, d + half)


MeanCluster = tuple[float, int]  # (sum of values, count) of one question


def _cluster_mean_var(clusters: Sequence[MeanCluster]) -> tuple[float, float, int] | None:
    """Pooled mean, its cluster-robust variance and the number of questions; None below two
    questions (no spread between them to measure)."""
    used = [(s, n) for s, n in clusters if n > 0]
    g, n = len(used), sum(c for _, c in used)
    if g < 2:
        return None
    mean = sum(s for s, _ in used) / n
    var = g / (g - 1) * sum((s - mean * c) ** 2 for s, c in used) / (n * n)
    return mean, var, g


def cluster_welch_interval(
    a: Sequence[MeanCluster], b: Sequence[MeanCluster], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Interval for ``mean(b) - mean(a)`` of unpaired runs, each mean's variance
    cluster-robust by question, Welch–Satterthwaite with G - 1 degrees of freedom per run.

    With one value per question it is ``welch_interval`` exactly.
    """
    ma, mb = _cluster_mean_var(a), _cluster_mean_var(b)
    if ma is None or mb is None:
        return (-math.inf, math.inf)
    (mean_a, va, ga), (mean_b, vb, gb) = ma, mb
    d = mean_b - mean_a
    se2 = va + vb
    if se2 == 0:
        return (d, d)
    df = se2 * se2 / ((va * va) / (ga - 1) + (vb * vb) / (gb - 1))
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(se2)
    return (d - half, d + half)


# --------------------------------------------------------------------------- percentiles


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default) of already sorted values; q in [0, 100]."""
    if not sorted_values:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must lie in [0, 100], got {q}")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


class QuantileSketch:
    """Percentiles in bounded memory: exact until ``exact_limit`` values, then log buckets.

    After the switch each value is kept only as the index of a bucket
    ``(gamma^(i-1), gamma^i]``; a bucket is reported by the value whose relative
    distance to both edges is equal, so every percentile is within
    ``(gamma - 1) / (gamma + 1)`` (under 1% for gamma 1.02) of a true value of
    the data (the DDSketch guarantee). Latencies span 0.1 ms to hours, about
    1,300 buckets at most.
    """

    __slots__ = (
        "_exact",
        "_buckets",
        "_zeros",
        "count",
        "total",
        "min",
        "max",
        "exact_limit",
        "gamma",
    )

    def __init__(self, exact_limit: int = 2048, gamma: float = 1.02) -> None:
        self.exact_limit = exact_limit
        self.gamma = gamma
        self._exact: list[float] | None = []
        self._buckets: dict[int, int] = {}
        self._zeros = 0
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    @property
    def is_exact(self) -> bool:
        return self._exact is not None

    @property
    def relative_error(self) -> float:
        return 0.0 if self.is_exact else (self.gamma - 1) / (self.gamma + 1)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def add(self, x: float) -> None:
        if x != x:  # NaN carries no information about latency
            return
        self.count += 1
        self.total += x
        self.min = min(self.min, x)
        self.max = max(self.max, x)
        if self._exact is not None:
            self._exact.append(x)
            if len(self._exact) > self.exact_limit:
                values, self._exact = self._exact, None
                for v in values:
                    self._bucket(v)
            return
        self._bucket(x)

    def extend(self, values: Iterable[float]) -> None:
        for v in values:
            self.add(v)

    def _bucket(self, x: float) -> None:
        if x <= 0:
            self._zeros += 1
            return
        i = math.ceil(math.log(x) / math.log(self.gamma))
        self._buckets[i] = self._buckets.get(i, 0) + 1

    def quantile(self, q: float) -> float | None:
        """Value at quantile ``q`` in [0, 1]; None when empty."""
        if self.count == 0:
            return None
        if self._exact is not None:
            self._exact.sort()
            return percentile(self._exact, q * 100.0)
        rank = q * (self.count - 1)
        seen = self._zeros
        if rank < seen:
            return 0.0
        for i in sorted(self._buckets):
            seen += self._buckets[i]
            if rank < seen:
                value = 2 * self.gamma**i / (self.gamma + 1)
                return min(max(value, self.min), self.max)
        return self.max

    def quantiles(self, qs: Sequence[float]) -> list[float | None]:
        return [self.quantile(q) for q in qs]
