"""Numbers in replies read as a grader reads them, and never a crash: signed
exponents, numbers beyond float range, thousands of digits."""

from __future__ import annotations

import json

import pytest

from evalpipe.scoring.answers.extract import extract_numbers
from evalpipe.scoring.answers.match import make_gold, match_answer

BIG = "9" * 5000


@pytest.mark.parametrize("text, values", [
    ("2.5E-3", [0.0025]),
    ("The answer is 2.5e-3.", [0.0025]),
    ("6.02e+23", [602 * 10**21]),
    ("1.5e3", [1500]),
    ("x = -4.2E+2", [-420]),
    ("1e-5 and 3", [1e-05, 3]),
    ("1e400", [10**400]),
    ("-1.0e309", [-(10**309)]),
    (BIG, [float("inf")]),
    ("-" + BIG + ".5", [float("-inf")]),
    ("7e1234567", [float("inf")]),
    ("7e-1234567", [0.0]),
    ("1" + "0" * 400 + "e1", [10**401]),  # an int beyond float range, then an exponent
    ("-1" + "0" * 4000 + "e-3900", [-(10**100)]),
    ("1" + "0" * 4200 + "e200", [float("inf")]),  # more than 4,300 digits once scaled
])
def test_numbers_with_exponents_and_beyond_float_range(text, values):
    assert [n.value for n in extract_numbers(text)] == values


@pytest.mark.parametrize("gold, reply, exact", [
    (0.0025, "2.5E-3", True),
    (3, "2.5E-3", False),  # the exponent's digits are not a number of their own
    (6.02e23, "6.02e+23", True),
    (23, "6.02e+23", False),
    (3, "1e400", False),
    (3, "-1.0e309", False),
    (2.5, "-1.0e309", False),
    (3, BIG, False),
    (2.5, BIG, False),
    (10**30, "1e30", True),
    (10**30, "1e400", False),
])
def test_hostile_numbers_are_scored_never_raised(gold, reply, exact):
    m = match_answer(reply, make_gold(gold, "number", [], "en"))
    assert m.exact is exact
    json.dumps(m.extracted, allow_nan=False)  # what the scorer records is plain JSON


def test_a_huge_number_next_to_the_answer_does_not_hide_it():
    # lenient: any number of the reply may match; the huge one must not raise on the way
    assert match_answer("1e400 or 2.5", make_gold(2.5, "number", [], "en")).lenient
    assert match_answer(BIG + " or 2.5", make_gold(2.5, "number", [], "en")).lenient


def test_a_number_beyond_float_range_is_reported_as_written():
    m = match_answer(BIG, make_gold(3, "number", [], "en"))
    assert m.extracted.startswith("9999") and len(m.extracted) < 50


def test_a_number_gold_from_a_long_integer_string_keeps_every_digit():
    gold = make_gold("12345678901234567", "number", [], "en")
    assert gold.number == 12345678901234567
    assert match_answer("12345678901234567", gold).exact
    assert not match_answer("12345678901234568", gold).exact
    assert make_gold("-2.5", "number", [], "en").number == -2.5
