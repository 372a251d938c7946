"""Intervals for rates and means; percentiles for costs; the cluster bootstrap and the
smallest difference a run of a given size can detect."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal
Z80 = 0.8416212335729143  # the 80th percentile: 80% power


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval of a proportion (no continuity correction)."""
    if n <= 0:
        return None, None
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # at 0 or n successes the bound is exactly 0 or 1; rounding would leave 3e-18
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


def rate(successes: int, n: int) -> dict[str, float | int | None]:
    """{"rate", "n", "lo", "hi"} of a proportion with its Wilson 95% interval."""
    lo, hi = wilson(successes, n)
    return {"rate": successes / n if n else None, "n": n, "lo": lo, "hi": hi}


_T_CACHE: dict[int, float] = {}


def _t975(df: int) -> float:
    value = _T_CACHE.get(df)
    if value is None:
        from scipy.special import stdtrit  # scipy.stats would cost seconds to import

        value = _T_CACHE[df] = float(stdtrit(df, 0.975))
    return value


def mean_interval(values: Sequence[float], method: str = "t", seed: int = 0,
                  resamples: int = 2000, bounds: tuple[float, float] = (0.0, 1.0)
                  ) -> dict[str, float | int | None]:
    """{"rate", "n", "lo", "hi"} of a mean with a 95% interval.

    method "t": Student t (deterministic, what the tables use by default);
    "bootstrap": percentile bootstrap with a seeded generator. Intervals are
    clipped to `bounds` (the scores averaged here live in [0, 1]). None for the
    interval when n < 2."""
    arr = np.asarray(values, dtype=float)
    n = int(arr.size)
    if n == 0:
        return {"rate": None, "n": 0, "lo": None, "hi": None}
    mean = float(arr.mean())
    if n < 2:
        return {"rate": mean, "n": n, "lo": None, "hi": None}
    if method == "t":
        half = _t975(n - 1) * float(arr.std(ddof=1)) / math.sqrt(n)
        lo, hi = mean - half, mean + half
    elif method == "bootstrap":  # each value its own cluster: the plain bootstrap
        lo, hi = cluster_bootstrap(arr, np.ones(n), resamples, seed) or (mean, mean)
    else:
        raise ValueError(f"unknown interval method {method!r}; expected 't' or 'bootstrap'")
    return {"rate": mean, "n": n, "lo": max(bounds[0], lo), "hi": min(bounds[1], hi)}


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """mean, p50, p95 (linear interpolation) and n."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"mean": None, "p50": None, "p95": None, "n": 0}
    p50, p95 = np.percentile(arr, [50, 95])
    return {"mean": float(arr.mean()), "p50": float(p50), "p95": float(p95), "n": int(arr.size)}


def cluster_bootstrap(sums: ArrayLike, counts: ArrayLike, resamples: int = 2000,
                      seed: int = 0, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of sum(sums) / sum(counts), resampling clusters
    (questions, with their repeats and cells inside) with replacement; a cluster of one
    pair gives the ordinary paired bootstrap of a mean difference. Vectorised in blocks
    of at most ~4M draws."""
    cluster_sums = np.asarray(sums, dtype=float)
    cluster_counts = np.asarray(counts, dtype=float)
    m = cluster_sums.size
    if m == 0 or cluster_counts.sum() == 0:
        return None
    rng = np.random.default_rng(seed)
    block = max(1, min(resamples, 4_000_000 // m))
    stats = []
    done = 0
    while done < resamples:
        size = min(block, resamples - done)
        idx = rng.integers(0, m, size=(size, m))
        num = cluster_sums[idx].sum(axis=1)
        den = cluster_counts[idx].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats.append(np.where(den > 0, num / np.where(den > 0, den, 1), np.nan))
        done += size
    values = np.concatenate(stats)
    values = values[~np.isnan(values)]
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(lo), float(hi)


def detectable_difference(a: Sequence[float], b: Sequence[float] | None = None
                          ) -> float | None:
    """The noise floor: the smallest difference of two means that a two-sided test at
    5% detects with 80% power, (z.975 + z.80) * sqrt(var_a / m_a + var_b / m_b), at
    most 1 (100 points: no difference of two scores in [0, 1] is larger, so a floor
    of 1 says the runs are too small to detect any).

    `a` and `b` are per-question scores in [0, 1] (a question's mean over its
    repeats), so repeats shrink only the within-question part of the variance.
    Without `b` the other run is taken to be like `a` (same size, same spread). The
    runs are treated as independent, which errs on the safe side for a paired
    comparison. Scores that do not vary (every question 0%, or every one 100%) have
    no spread to measure; theirs is taken as that of a proportion with one more
    question right and one more wrong (Laplace's rule), not 0. None with fewer than
    2 questions."""
    xa = np.asarray(a, dtype=float)
    xb = xa if b is None else np.asarray(b, dtype=float)
    if xa.size < 2 or xb.size < 2:
        return None
    se = math.sqrt(_spread(xa) / xa.size + _spread(xb) / xb.size)
    return min(1.0, (Z95 + Z80) * se)


def _spread(x: np.ndarray) -> float:
    """The variance of per-question scores; for scores that all agree, the variance
    of a proportion with one success and one failure added."""
    var = float(x.var(ddof=1))
    if var > 0:
        return var
    p = (float(x.sum()) + 1) / (x.size + 2)
    return p * (1 - p)
