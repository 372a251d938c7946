"""Reading an answer: which part of a final reply is its answer, and whether it is the
gold (README.md in this folder says how, step by step).

    gold = make_gold(answer, answer_type, aliases, lang, question)   # once per question
    match = match_answer(reply, gold)                                # per reply
"""

from evalpipe.scoring.answers.match import AnswerMatch, Gold, make_gold, match_answer

__all__ = ["AnswerMatch", "Gold", "make_gold", "match_answer"]
