"""The sparse tokenizer: NFC/NFD, casefold, tone placement, bigrams."""

from __future__ import annotations

import unicodedata

import pytest

from evalpipe.retrieval.tokenize import Tokenizer, normalize_tone, tokenize
from evalpipe.vietnamese import strip_diacritics


@pytest.mark.parametrize("old, new", [
    ("hòa", "hoà"), ("hòe", "hoè"), ("thúy", "thuý"), ("khỏe", "khoẻ"), ("ủy", "uỷ"),
    ("qủa", "quả"), ("qúy", "quý"), ("gìa", "già"), ("tòan", "toàn"),
])
def test_tone_placement_old_and_misplaced_map_to_canonical(old: str, new: str) -> None:
    assert normalize_tone(old) == new
    assert normalize_tone(new) == new


@pytest.mark.parametrize("word", [
    "quả", "của", "già", "giữa", "gì", "người", "hoàng", "tuyết", "khuỷu", "oải", "mía",
    "thuở", "tiếng", "quốc", "đường", "python", "x2", "hòahòa",
])
def test_tone_placement_leaves_canonical_and_non_syllables_alone(word: str) -> None:
    assert normalize_tone(word) == word


def test_nfd_and_case_give_the_same_tokens() -> None:
    text = "Máy Chủ ở HÒA BÌNH chạy Linux"
    assert tokenize(unicodedata.normalize("NFD", text)) == tokenize(text)
    assert tokenize(text.upper()) == tokenize(text.lower())
    assert all(unicodedata.is_normalized("NFC", t) for t in tokenize(text))


def test_old_and_new_tone_style_give_the_same_tokens() -> None:
    assert tokenize("thủy điện Hòa Bình, sức khỏe") == tokenize("thuỷ điện Hoà Bình, sức khoẻ")


def test_words_single_chars_and_bigrams() -> None:
    assert Tokenizer(bigrams=False)("Tôi ở Hà Nội, a-b_c 3.5") == [
        "tôi", "ở", "hà", "nội", "a", "b", "c", "3", "5"]
    toks = tokenize("máy chủ, mạng")
    assert toks == ["máy", "chủ", "mạng", "máy_chủ"]  # no bigram across the comma


def test_bigrams_only_for_pairs_with_a_vietnamese_syllable() -> None:
    toks = tokenize("how much máy chủ cost")
    bigrams = [t for t in toks if "_" in t]
    assert bigrams == ["much_máy", "máy_chủ", "chủ_cost"]  # no "how_much"
    # With accents folded away the decision still follows the original letters.
    folded = Tokenizer(fold_accents=True)("máy chủ and more")
    assert [t for t in folded if "_" in t] == ["may_chu", "chu_and"]


def test_underscore_never_collides_with_a_bigram() -> None:
    assert "máy_chủ" not in tokenize("máy_chủ")
    assert tokenize("snake_case")[:2] == ["snake", "case"]


def test_combining_mark_without_precomposed_form_stays_in_the_word() -> None:
    # q + combining diaeresis has no precomposed letter; it must not split the word.
    assert Tokenizer(bigrams=False)("q\u0308ab") == ["q\u0308ab"]


def test_strip_accents() -> None:
    assert strip_diacritics("Đường Hoà Bình") == "Duong Hoa Binh"
    assert Tokenizer(bigrams=False, fold_accents=True)("đường hòa") == ["duong", "hoa"]
