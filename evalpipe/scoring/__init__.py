"""Scoring: pure functions from sample records (and their questions) to scores.

    from evalpipe.scoring import score_sample, aggregate
    scored = [score_sample(sample, questions[sample["question_id"]]) for sample in samples]
    rows = aggregate(scored)                      # per (cell_id, suite), plus suite "all"

No model, no network, no tool execution: any run can be re-scored later.
docs/scoring.md defines every field, category and flag.
"""

from evalpipe.scoring.aggregate import RATE_NAMES, aggregate
from evalpipe.scoring.answers import AnswerMatch, Gold, make_gold, match_answer
from evalpipe.scoring.answers.extract import detect_language, extract_numbers, last_number
from evalpipe.scoring.answers.normalize import loose_key, text_key
from evalpipe.scoring.categories import CATEGORIES, FLAGS
from evalpipe.scoring.plan import PlanResult, executed_calls, match_plan
from evalpipe.scoring.score import SCORER_VERSION, score_sample
from evalpipe.scoring.stats import mean_interval, wilson

__all__ = [
    "CATEGORIES", "FLAGS", "RATE_NAMES", "SCORER_VERSION", "AnswerMatch", "Gold", "PlanResult",
    "aggregate", "detect_language", "executed_calls", "extract_numbers", "last_number",
    "loose_key", "make_gold", "match_answer", "match_plan", "mean_interval", "score_sample",
    "text_key", "wilson",
]
