"""Answer extraction and exact match: numbers, text, abstain; strict and lenient variants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalpipe.scoring.answers.extract import detect_language, extract_numbers, last_number
from evalpipe.scoring.answers.match import make_gold, match_answer
from evalpipe.scoring.answers.normalize import loose_key, text_key


def values(text: str, lang: str = "en") -> list:
    return [n.value for n in extract_numbers(text, lang)]


@pytest.mark.parametrize("text, lang, expected", [
    ("7006652", "en", 7006652),
    ("7,006,652", "en", 7006652),
    ("7,006,652", "vi", 7006652),
    ("7.006.652", "vi", 7006652),
    ("7.006.652", "en", 7006652),
    ("7 006 652", "en", 7006652),
    ("7\u00a0006\u00a0652", "vi", 7006652),       # no-break space
    ("7\u202f006\u202f652", "en", 7006652),       # narrow no-break space
    ("7006652.0", "en", 7006652.0),
    ("7006652.0", "vi", 7006652.0),
    ("7,006,652.25", "en", 7006652.25),
    ("7.006.652,25", "vi", 7006652.25),
    ("7 006 652,5", "vi", 7006652.5),
    ("-3,5", "vi", -3.5),
    ("-3.5", "en", -3.5),
    ("\u22124", "en", -4),                          # U+2212 minus sign
    ("x = -5", "en", -5),
    ("3.14", "vi", 3.14),
    ("0,125", "en", 0.125),                         # a leading zero group is never thousands
    ("1,234", "en", 1234),
    ("1,234", "vi", 1.234),                         # vi: comma is the decimal mark
    ("1.234", "vi", 1234),                          # vi: dot groups thousands
    ("1.234", "en", 1.234),
    ("1234,5", "vi", 1234.5),
    ("1.5e3", "en", 1500),                          # integral: read as an exact int
    ("The answer is 294.", "en", 294),
    ("Kết quả là 294.", "vi", 294),
    ("(12 + 30) × 7 = 294", "vi", 294),
    ("5kg", "en", 5),
    ("$1,234.50", "en", 1234.5),
    ("50%", "en", 50),
])
def test_last_number_formats(text, lang, expected):
    got = last_number(text, lang)
    assert got is not None
    assert got.value == expected
    assert type(got.value) is type(expected)


@pytest.mark.parametrize("text, expected", [
    ("s1 gives 42", [42]),                # a number inside a word is not a number
    ("H2O and v1.2", []),
    ("12-5", [12, 5]),                    # a hyphen between numbers is not a sign
    ("1.2.3", [1, 2, 3]),                 # not a grouping: separate numbers
    ("2023 123", [2023, 123]),            # a four-digit group cannot start a spaced grouping
    ("1 234 567 and 8", [1234567, 8]),
    ("1, 2, 3", [1, 2, 3]),
    ("no digits here", []),
])
def test_extract_all_numbers(text, expected):
    assert values(text) == expected


def test_ambiguous_reading_keeps_the_other_as_alt():
    (n,) = extract_numbers("1,234", "vi")
    assert (n.value, n.alt) == (1.234, 1234)
    (n,) = extract_numbers("1,234", "en")
    assert (n.value, n.alt) == (1234, 1.234)


def gold(answer, answer_type="number", aliases=(), lang="en"):
    return make_gold(answer, answer_type, list(aliases), lang)


@pytest.mark.parametrize("reply, answer, lang, exact, strict, lenient", [
    ("294", 294, "vi", True, True, True),
    ("294.", 294, "vi", True, True, True),
    ("**294**", 294, "en", True, True, True),
    ("Kết quả là 294.", 294, "vi", True, False, True),
    ("The answer is 7,006,652.", 7006652, "en", True, False, True),
    ("Đáp số: 7.006.652", 7006652, "vi", True, False, True),
    ("7006652.0", 7006652, "en", True, True, True),
    ("294 is wrong, it is 295", 294, "en", False, False, True),   # last number decides
    ("-3,5", -3.5, "vi", True, True, True),
    ("0.1 + 0.2 = 0.30000000000000004", 0.3, "en", True, False, True),  # relative tolerance
    ("0.33", 0.333333333333, "en", True, True, True),    # rounded to 2 decimals: accepted
    ("0.3", 0.333333333333, "en", False, False, False),  # 1 decimal: too coarse
    ("0.34", 0.333333333333, "en", False, False, False),  # not a rounding of the gold
    ("1,234", 1234, "vi", False, False, True),           # vi reads 1.234; lenient takes the alt
    ("293", 294, "en", False, False, False),
    ("bảy triệu", 7000000, "vi", True, False, True),     # words: read, never strict
    ("7 triệu", 7000000, "vi", True, False, True),
    ("7,5 triệu", 7500000, "vi", True, False, True),
    ("186k", 186000, "en", True, False, True),
    ("1.5M", 1500000, "en", True, False, True),
    ("2tr", 2000000, "vi", True, False, True),
    ("2tr5", 2500000, "vi", True, False, True),
    ("2 triệu 500 nghìn đồng", 2500000, "vi", True, False, True),
    ("3 nghìn", 3000, "vi", True, False, True),
    ("hai trăm chín mươi tư", 294, "vi", True, False, True),
    ("Two hundred and ninety-four.", 294, "en", True, False, True),
    ("một nghìn không trăm linh năm", 1005, "vi", True, False, True),
    ("3MB", 3000000, "en", False, False, False),         # a unit, not a magnitude
    ("5kg", 5000, "en", False, False, False),
    ("hai năm", 7, "vi", False, False, False),           # two years, no numeral
    ("", 294, "en", False, False, False),
])
def test_number_match(reply, answer, lang, exact, strict, lenient):
    m = match_answer(reply, gold(answer, lang=lang))
    assert (m.exact, m.strict, m.lenient) == (exact, strict, lenient)


def test_integers_compare_exactly_even_when_huge():
    assert match_answer("12345678901234567891", gold(12345678901234567891)).exact
    assert not match_answer("12345678901234567892", gold(12345678901234567891)).exact


@pytest.mark.parametrize("reply, lang, flag", [
    ("bảy triệu", "vi", True),
    ("Seven million.", "en", True),
    ("7 triệu người", "vi", True),
    ("about 7 million", "en", True),
    ("7,000,000", "en", False),
    ("I don't know.", "en", False),
])
def test_number_words_flag(reply, lang, flag):
    m = match_answer(reply, gold(7000000, lang=lang))
    assert m.number_words is flag
    assert m.exact is (reply != "I don't know.")  # magnitudes and words are read


@pytest.mark.parametrize("a, b", [
    ("hòa", "hoà"), ("thuý", "thúy"), ("Khỏe", "khoẻ"), ("  Hà   Nội! ", "hà nội"),
    ("HỒ CHÍ MINH", "hồ chí minh"), ("Hồ Chí Minh", "Ho\u0302\u0300 Chi\u0301 Minh"),
])
def test_text_key_folds(a, b):
    assert text_key(a) == text_key(b)


@pytest.mark.parametrize("a, b", [("ho", "hồ"), ("ha noi", "hà nội"), ("ma", "mà")])
def test_text_key_keeps_diacritics(a, b):
    assert text_key(a) != text_key(b)
    assert loose_key(a) == loose_key(b)


@pytest.mark.parametrize("reply, answer, aliases, exact, strict, lenient", [
    ("Hà Nội", "Hà Nội", (), True, True, True),
    ("Thủ đô là Hà Nội.", "Hà Nội", (), True, False, True),
    ("Thủ đô là Ha Noi.", "Hà Nội", (), False, False, True),    # diacritics dropped: lenient only
    ("Hồ Tây", "Hồ", (), True, False, True),
    ("Ho Tay", "Hồ", (), False, False, True),
    ("hoa binh", "Hòa Bình", (), False, False, True),
    ("Tỉnh Hoà Bình", "Hòa Bình", (), True, False, True),      # tone placement folded
    ("It's Saigon.", "Thành phố Hồ Chí Minh", ("Saigon", "Sài Gòn"), True, False, True),
    ("Parisian", "Paris", (), False, False, False),            # whole phrase only
    ("", "Paris", (), False, False, False),
])
def test_text_match(reply, answer, aliases, exact, strict, lenient):
    m = match_answer(reply, gold(answer, "text", aliases, "vi"))
    assert (m.exact, m.strict, m.lenient) == (exact, strict, lenient)


@pytest.mark.parametrize("reply, exact, strict, lenient", [
    ("I don't know.", True, True, True),            # equals the alias
    ("The provided passages do not contain this information.", True, False, True),
    ("This is not in the provided context.", True, False, True),
    ("I cannot find that in the documents.", True, False, True),
    ("Tôi không biết.", True, False, True),
    ("Không có thông tin về điều này.", True, False, True),
    ("Tôi không tìm thấy câu trả lời.", True, False, True),
    ("không biết", True, True, True),
    ("khong biet", False, False, True),                 # no diacritics: lenient only
    ("The answer is 42.", False, False, False),
    # a tool's error passed on as the answer is no abstention, whatever words it holds
    ('{"error": "unknown tool \'count_employees\'; offered: add, multiply"}', False, False,
     False),
    ('```json\n[{"error": "no information"}]\n```', False, False, False),
])
def test_abstain_match(reply, exact, strict, lenient):
    m = match_answer(reply, gold("không biết", "abstain", ("I don't know",), "vi"))
    assert (m.exact, m.strict, m.lenient) == (exact, strict, lenient)
    assert m.abstained is exact


@pytest.mark.parametrize("reply, expected", [
    ("Kết quả là 294.", "vi"), ("The answer is 360.", "en"), ("294", None),
    ("Paris", None), ("Thành phố Hồ Chí Minh", "vi"), ("The capital is Hà Nội.", "en"),
    ("", None),
])
def test_detect_language(reply, expected):
    assert detect_language(reply, text_key(reply)) == expected


@given(st.text(max_size=60), st.sampled_from(["vi", "en"]))
def test_variants_nest_for_numbers(reply, lang):
    m = match_answer(reply, gold(294, lang=lang))
    assert not m.strict or m.exact
    assert not m.exact or m.lenient


@given(st.text(max_size=60))
def test_variants_nest_for_text(reply):
    m = match_answer(reply, gold("Hà Nội", "text", ("Hanoi",), "vi"))
    assert not m.strict or m.exact
    assert not m.exact or m.lenient


@given(st.integers(min_value=-10**12, max_value=10**12), st.sampled_from(["vi", "en"]))
def test_every_grouping_reads_back(n, lang):
    plain = str(abs(n))
    groups = []
    while plain:
        groups.insert(0, plain[-3:])
        plain = plain[:-3]
    sign = "-" if n < 0 else ""
    for sep in (",", ".", " "):
        written = sign + sep.join(groups)
        if len(groups) == 2 and sep != " ":
            continue  # "1,234" is ambiguous by design: the language decides
        assert last_number(f"Đáp số: {written}", lang).value == n, written
