"""Vietnamese spelling variants read the same in answer matching and retrieval."""

from __future__ import annotations

import pytest

from evalpipe.retrieval.tokenize import tokenize
from evalpipe.scoring.answers.normalize import loose_key, text_key
from evalpipe.vietnamese import canonical_tones, normalize_tone, strip_diacritics


@pytest.mark.parametrize("variant, canonical", [
    ("qủa", "quả"),  # the decision: a tone on the u of "qu" is a misplaced "quả"
    ("gìa", "già"), ("hòa", "hoà"), ("thúy", "thuý"), ("khỏe", "khoẻ"),
])
def test_scoring_and_retrieval_agree_on_every_variant(variant, canonical):
    assert text_key(variant) == text_key(canonical) == canonical
    assert tokenize(variant, bigrams=False) == tokenize(canonical, bigrams=False) == [canonical]


def test_case_does_not_change_where_the_tone_goes():
    assert normalize_tone("HÒA") == "HOÀ" and normalize_tone("Qủa") == "Quả"
    assert canonical_tones("Tỉnh Hòa Bình, qủa cam") == "Tỉnh Hoà Bình, quả cam"


def test_words_that_are_not_one_syllable_with_one_tone_are_kept():
    assert canonical_tones("résumé naïve hòahòa python") == "résumé naïve hòahòa python"
    # distinct words stay distinct: the tone is kept, only its seat moves
    assert text_key("quả") != text_key("qua") and text_key("hồ") != text_key("ho")


def test_strip_diacritics_is_shared():
    assert strip_diacritics("Đường Hoà Bình") == "Duong Hoa Binh"
    assert loose_key("Qủa Đào") == "qua dao"
