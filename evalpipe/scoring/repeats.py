"""Scores across repeats: pass@k, pass^k, flip rate and the noise floor of a group.

With a question run N times, c of them right (exact match), the unbiased
estimators from the N >= k repeats are

    pass@k = 1 - C(N - c, k) / C(N, k)   at least one of k tries is right
    pass^k = C(c, k) / C(N, k)           all k tries are right

(pass^k as defined for tau-bench), averaged over questions with a Student t
interval over questions. pass@1 = pass^1 = the mean exact match. A question
flips when its repeats do not all get the same verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import comb
from typing import Any

from evalpipe.scoring.stats import detectable_difference, mean_interval, rate


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k repeats drawn without replacement from n is right."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Chance that all of k repeats drawn without replacement from n are right."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


Pair = tuple[str | None, str | None]  # (cell_id, question_id) of a row; None: absent


def question_verdicts(rows: Iterable[Mapping[str, Any]]) -> dict[Pair, list[bool]]:
    """(cell_id, question_id) -> exact-match verdicts of its repeats, in repeat order.
    Infrastructure errors and samples without a verdict are left out."""
    out: dict[Pair, list[tuple[int, bool]]] = {}
    for r in rows:
        if r.get("infra") or r.get("exact") is None:
            continue
        key = (r.get("cell_id"), r.get("question_id"))
        out.setdefault(key, []).append((int(r.get("repeat") or 0), bool(r["exact"])))
    return {key: [v for _, v in sorted(pairs)] for key, pairs in out.items()}


def repeat_scores(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """{repeats, questions, pass@k, pass^k, flip_rate, flipping, noise_floor} of a group.

    repeats: the most repeats any question has; pass@k and pass^k for k = 1..repeats,
    each over the questions with at least k repeats; flip_rate over the questions with
    two or more; flipping: the ids of the questions that flip ("cell:question" when the
    group spans cells); noise_floor: the smallest difference in exact match a second
    run of this size would be detected at (stats.detectable_difference)."""
    verdicts = question_verdicts(rows)
    if not verdicts:
        return None
    counts = [(len(v), sum(v)) for v in verdicts.values()]
    most = max(n for n, _ in counts)
    pass_at = {}
    pass_hat = {}
    for k in range(1, most + 1):
        having = [(n, c) for n, c in counts if n >= k]
        pass_at[str(k)] = mean_interval([pass_at_k(n, c, k) for n, c in having])
        pass_hat[str(k)] = mean_interval([pass_hat_k(n, c, k) for n, c in having])
    several = {key: v for key, v in verdicts.items() if len(v) > 1}
    flips = [key for key, v in several.items() if len(set(v)) > 1]
    cells = {cell for cell, _ in verdicts}
    return {
        "repeats": most,
        "questions": len(verdicts),
        "pass@k": pass_at,
        "pass^k": pass_hat,
        "flip_rate": rate(len(flips), len(several)) if several else None,
        "flipping": [q if len(cells) == 1 else f"{cell}:{q}" for cell, q in flips],
        "noise_floor": detectable_difference([c / n for n, c in counts]),
    }
