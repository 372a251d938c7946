"""records.ScoredSample is exactly what the scorer writes: the keys of score_sample's
output and of an unscored sample equal the TypedDict's, every value fits its declared
type, and every declared alternative (a None, a float) really occurs."""

from __future__ import annotations

import types
from typing import Any, NotRequired, Union, get_args, get_origin, get_type_hints

import pytest
from synth import make_sample
from test_scoring_categories import CALC, CASES, RIGHT_CALLS
from typing_extensions import is_typeddict  # also the TypedDicts pydantic reads

from evalpipe.records import ScoredSample
from evalpipe.scoring import CATEGORIES, score_sample
from evalpipe.scoring.run import unscored

HINTS = get_type_hints(ScoredSample)  # NotRequired stripped
WITH_EXTRAS = get_type_hints(ScoredSample, include_extras=True)
REQUIRED = {k for k, hint in WITH_EXTRAS.items() if get_origin(hint) is not NotRequired}
ONLY_UNSCORED = {"scorer_error"}
JUDGEMENT = {"model": "judge-1", "verdict": True, "verdicts": [True, True],
             "consistent": True, "reason": "same number", "raw": "YES", "use": "undecided"}


def scored_samples() -> list[dict[str, Any]]:
    """One scored sample of every verdict kind, a sampled repeat the judge decided, and one whose
    sample has no settings (a hand-made record: no model, format or toolset)."""
    out = []
    for category in CATEGORIES:
        question, kwargs = CASES[category]
        kwargs = dict(kwargs)
        final = kwargs.pop("final_answer", "")
        out.append(score_sample(make_sample(question, final, **kwargs), question))
    judged = make_sample(CALC, "Kết quả là 294.", steps=RIGHT_CALLS)
    judged.update(repeat=1, seed=7)  # a sampled repeat
    out.append(score_sample(judged, CALC, judgement=JUDGEMENT))
    bare = make_sample(CALC, "Kết quả là 294.", steps=RIGHT_CALLS)
    bare["settings"] = {}
    out.append(score_sample(bare, CALC))
    assert {s["category"] for s in out} == set(CATEGORIES)
    return out


def unscored_sample() -> dict[str, Any]:
    sample = make_sample(CALC, "Kết quả là 294.", steps=RIGHT_CALLS)
    return dict(unscored(sample, CALC, ValueError("a scorer bug")))


def fits(value: Any, hint: Any) -> bool:
    """`value` is of the declared type (bool is not an int; an int is a float)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if is_typeddict(hint):
        fields = get_type_hints(hint)
        return (isinstance(value, dict) and set(value) == set(fields)
                and all(fits(value[k], fields[k]) for k in fields))
    if origin is list:
        return isinstance(value, list) and all(fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(fits(k, args[0]) and fits(v, args[1])
                                               for k, v in value.items())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def alternatives(hint: Any) -> set[type]:
    """The runtime types a declared type allows at its top level (Any: none to check)."""
    if hint is Any:
        return set()
    if get_origin(hint) in (Union, types.UnionType):
        return set().union(*(alternatives(arg) for arg in get_args(hint)))
    if hint is type(None):
        return {type(None)}
    if is_typeddict(hint):
        return {dict}
    return {get_origin(hint) or hint}


def test_a_scored_sample_has_exactly_the_declared_keys():
    for out in scored_samples():
        assert set(out) == set(HINTS) - ONLY_UNSCORED, (
            f"{out['category']}: written, not declared: {sorted(set(out) - set(HINTS))}; "
            f"declared, not written: {sorted(set(HINTS) - ONLY_UNSCORED - set(out))}")


def test_an_unscored_sample_has_the_required_keys_and_its_error():
    out = unscored_sample()
    assert set(out) == REQUIRED | ONLY_UNSCORED
    assert out["category"] == "scorer_error" and "a scorer bug" in out["scorer_error"]


@pytest.mark.parametrize("which", ["scored", "unscored"])
def test_every_value_fits_its_declared_type(which):
    records = scored_samples() if which == "scored" else [unscored_sample()]
    for out in records:
        for key, value in out.items():
            assert fits(value, HINTS[key]), f"{out['category']}: {key}={value!r}: {HINTS[key]}"


def test_every_declared_alternative_occurs():
    """A declared `X | None` whose None (or X) the scorer never writes is a type that
    says more than the scorer does."""
    seen: dict[str, set[type]] = {key: set() for key in HINTS}
    for out in [*scored_samples(), unscored_sample()]:
        for key, value in out.items():
            seen[key].add(dict if isinstance(value, dict) else type(value))
    for key, hint in HINTS.items():
        declared = alternatives(hint)
        assert declared <= seen[key], f"{key}: declared {declared}, written {seen[key]}"
