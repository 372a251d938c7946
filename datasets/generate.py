#!/usr/bin/env python
"""Generate the bundled question sets, deterministically.

    python datasets/generate.py

Rewrites datasets/{arithmetic,plan,site_rag,control}.jsonl and the default
sample datasets/sample/*.jsonl (6 questions per suite), then validates them
with evalpipe.validate (exit 1 on any error). With --check it writes nothing
and exits 1 when a committed file differs from what it would write. Arithmetic and plan questions
come from templates and a seeded random generator; every answer is the result
of running the gold calls with the real tools. The RAG questions, their
supporting quotes and the control questions are written by hand below; gold
spans are found with text.find(quote) in the NFC text of datasets/site, never
typed in.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ inside datasets/
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (ROOT, HERE):  # evalpipe from this checkout; rag_questions.py beside this file
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from rag_questions import ABSTAIN, MORE_GOLD, RAG  # the hand-written site_rag table

from evalpipe.corpus import load_corpus
from evalpipe.plans import execute_gold_plan
from evalpipe.tools import build_toolset

SEED = 20250415
SITE = HERE / "site"
SAMPLE = HERE / "sample"
TOOLSET = build_toolset("math")
FIELDS = ("id", "suite", "question", "answer", "answer_type", "aliases", "lang", "gold_calls",
          "gold_passages", "tags")


# ---------------------------------------------------------------- helpers

def run_plan(steps: list[dict]) -> int | float:
    """The result of the last step, computed by the real tools."""
    run = execute_gold_plan(steps, TOOLSET)
    if run.failed or run.skipped:
        raise ValueError(f"a generated plan does not run: {run.failed or run.skipped}")
    return run.results[steps[-1]["id"]]


def exact(op: str, a: Fraction, b: Fraction | None = None) -> Fraction | None:
    """The exact rational result of a tool call; None when it is not rational."""
    if op == "add":
        return a + b
    if op == "subtract":
        return a - b
    if op == "multiply":
        return a * b
    if op == "divide":
        return None if b == 0 else a / b
    if op == "power":
        return a ** int(b) if b.denominator == 1 and b >= 0 else None
    if op == "sqrt":
        num, den = a.numerator, a.denominator
        rn, rd = int(num ** 0.5), int(den ** 0.5)
        for r in (rn - 1, rn, rn + 1):
            for s in (rd - 1, rd, rd + 1):
                if r >= 0 and s > 0 and Fraction(r, s) ** 2 == a:
                    return Fraction(r, s)
        return None
    raise ValueError(op)


def short_decimal(x: Fraction | None, places: int = 4) -> bool:
    """x is a finite decimal with at most `places` digits after the point."""
    return x is not None and (10 ** places * x).denominator == 1


def as_number(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


def fmt(x: float, lang: str, *, grouped: bool = False, paren: bool = False) -> str:
    """A number as written in a question: Vietnamese decimal comma, optional
    thousands grouping, negative second operands in parentheses."""
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    if isinstance(x, int):
        text = f"{abs(x):,}" if grouped else str(abs(x))
        if grouped and lang == "vi":
            text = text.replace(",", ".")
    else:
        text = repr(abs(x))
        if lang == "vi":
            text = text.replace(".", ",")
    if x < 0:
        text = "-" + text
        if paren:
            text = f"({text})"
    return text


def record(**fields) -> dict:
    fields.setdefault("aliases", [])
    fields.setdefault("gold_calls", [])
    fields.setdefault("gold_passages", [])
    return {k: fields[k] for k in FIELDS}


# ---------------------------------------------------------------- arithmetic

# (op, style, lang) -> templates; {a} and {b} are the operands as written.
ARITH_TEMPLATES: dict[tuple[str, str, str], list[str]] = {
    ("multiply", "plain", "vi"): ["{a} nhân {b} bằng bao nhiêu?", "{a} nhân với {b} được mấy?"],
    ("multiply", "plain", "en"): ["What is {a} times {b}?", "What is {a} multiplied by {b}?"],
    ("multiply", "imperative", "vi"): ["Tính {a} nhân {b}.", "Hãy tính tích của {a} và {b}."],
    ("multiply", "imperative", "en"): ["Multiply {a} by {b}.", "Find the product of {a} and {b}."],
    ("multiply", "symbolic", "vi"): ["{a} × {b} = ?", "Kết quả của {a} * {b} là gì?"],
    ("multiply", "symbolic", "en"): ["Compute {a} * {b}.", "{a} × {b} = ?"],
    ("multiply", "word", "vi"): [
        ("Một tiệm tóc bán được {a} gói dịch vụ, mỗi gói giá {b} đồng. Tổng doanh thu là bao "
        "nhiêu đồng?"),
        "Mỗi thùng có {b} chai nước. Hỏi {a} thùng có tất cả bao nhiêu chai?",
    ],
    ("multiply", "word", "en"): [
        "A warehouse holds {a} boxes with {b} screws in each. How many screws are there?",
        ("A server handles {b} requests per minute. How many requests does it handle in {a} "
        "minutes?"),
    ],
    ("add", "plain", "vi"): ["{a} cộng {b} bằng bao nhiêu?", "{a} cộng với {b} được mấy?"],
    ("add", "plain", "en"): ["What is {a} plus {b}?", "What do you get when you add {a} and {b}?"],
    ("add", "imperative", "vi"): ["Tính {a} cộng {b}.", "Hãy tính tổng của {a} và {b}."],
    ("add", "imperative", "en"): ["Add {a} and {b}.", "Find the sum of {a} and {b}."],
    ("add", "symbolic", "vi"): ["{a} + {b} = ?", "Kết quả của {a} + {b} là gì?"],
    ("add", "symbolic", "en"): ["Compute {a} + {b}.", "{a} + {b} = ?"],
    ("add", "word", "vi"): [
        ("Tháng trước công ty chi {a} đồng, tháng này chi {b} đồng. Tổng chi của hai tháng là "
        "bao nhiêu đồng?"),
        "Kho A có {a} sản phẩm, kho B có {b} sản phẩm. Cả hai kho có bao nhiêu sản phẩm?",
    ],
    ("add", "word", "en"): [
        ("A shop sold {a} items in March and {b} items in April. How many items did it sell in "
        "the two months together?"),
        "A site had {a} visitors on Saturday and {b} on Sunday. How many visitors in total?",
    ],
    ("subtract", "plain", "vi"): ["{a} trừ {b} bằng bao nhiêu?", "{a} trừ đi {b} còn bao nhiêu?"],
    ("subtract", "plain", "en"): ["What is {a} minus {b}?", "What is {a} take away {b}?"],
    ("subtract", "imperative", "vi"): ["Tính {a} trừ {b}.", "Hãy tính hiệu của {a} và {b}."],
    ("subtract", "imperative", "en"): ["Subtract {b} from {a}.",
                                       "Find the difference {a} minus {b}."],
    ("subtract", "symbolic", "vi"): ["{a} - {b} = ?", "Kết quả của {a} - {b} là gì?"],
    ("subtract", "symbolic", "en"): ["Compute {a} - {b}.", "{a} - {b} = ?"],
    ("subtract", "word", "vi"): [
        "Tài khoản có {a} đồng, sau đó rút ra {b} đồng. Số dư còn lại là bao nhiêu đồng?",
        "Một kho có {a} bao gạo, đã xuất {b} bao. Kho còn lại bao nhiêu bao?",
    ],
    ("subtract", "word", "en"): [
        "A budget of {a} dollars has {b} dollars spent. How much is left (it may be negative)?",
        "A tank held {a} litres and {b} litres were pumped out. How many litres remain?",
    ],
    ("divide", "plain", "vi"): ["{a} chia {b} bằng bao nhiêu?", "{a} chia cho {b} được bao nhiêu?"],
    ("divide", "plain", "en"): ["What is {a} divided by {b}?", "How much is {a} over {b}?"],
    ("divide", "imperative", "vi"): ["Tính {a} chia {b}.", "Hãy tính thương của {a} chia cho {b}."],
    ("divide", "imperative", "en"): ["Divide {a} by {b}.", "Find the quotient of {a} and {b}."],
    ("divide", "symbolic", "vi"): ["{a} : {b} = ?", "Kết quả của {a} / {b} là gì?"],
    ("divide", "symbolic", "en"): ["Compute {a} / {b}.", "{a} ÷ {b} = ?"],
    ("divide", "word", "vi"): [
        "Chia đều {a} kg gạo cho {b} hộ gia đình. Mỗi hộ được bao nhiêu kg?",
        "Một đoạn dây dài {a} mét được cắt thành {b} đoạn bằng nhau. Mỗi đoạn dài bao nhiêu mét?",
    ],
    ("divide", "word", "en"): [
        ("{a} litres of water are shared equally among {b} tanks. How many litres go into each "
        "tank?"),
        "A bill of {a} dollars is split equally between {b} people. How much does each pay?",
    ],
    ("power", "plain", "vi"): ["{a} mũ {b} bằng bao nhiêu?", "Lũy thừa bậc {b} của {a} là bao nhiêu?"],
    ("power", "plain", "en"): ["What is {a} to the power of {b}?",
                               "What is {a} raised to the {b_th} power?"],
    ("power", "symbolic", "vi"): ["Tính {a}^{b}.", "{a}^{b} = ?"],
    ("power", "symbolic", "en"): ["Compute {a}^{b}.", "{a} ** {b} = ?"],
    ("sqrt", "plain", "vi"): ["Căn bậc hai của {a} là bao nhiêu?", "Tính căn bậc hai của {a}."],
    ("sqrt", "plain", "en"): ["What is the square root of {a}?", "Find the square root of {a}."],
    ("sqrt", "symbolic", "vi"): ["√{a} = ?", "Tính sqrt({a})."],
    ("sqrt", "symbolic", "en"): ["Compute sqrt({a}).", "√{a} = ?"],
}

# How many questions per operation; 130 on the four calculator tools, 30 in "math".
ARITH_COUNTS = {"multiply": 36, "add": 32, "subtract": 32, "divide": 30, "power": 15, "sqrt": 15}
DIFFICULTIES = ["easy", "medium", "hard", "medium", "hard"]
DIVISORS = [8, 16, 25, 40, 50, 80, 125, 250, 400, 625, 2, 4, 5, 20]


def ordinal(number: str) -> str:
    """'3' -> '3rd', '11' -> '11th', '22' -> '22nd' (English ordinal suffixes)."""
    if not number.isdigit():
        return number
    n = int(number)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return number + suffix


def _digits(rng: random.Random, n: int) -> int:
    return rng.randint(10 ** (n - 1), 10 ** n - 1)


def arith_operands(op: str, diff: str, rng: random.Random, word: bool) -> tuple[dict, list[str]]:
    """Arguments for one call and the extra tags (negative, decimal, ...)."""
    tags: list[str] = []
    if op == "multiply":
        if diff == "easy":
            a, b = _digits(rng, 3), _digits(rng, 2)
        elif diff == "medium":
            a, b = _digits(rng, 4), _digits(rng, 3)
        else:
            a, b = (_digits(rng, 4), _digits(rng, 4)) if rng.random() < 0.5 else (
                _digits(rng, 5), _digits(rng, 3))
            if not word and rng.random() < 0.35:
                a, b = (-a, b) if rng.random() < 0.5 else (a, -b)
        return {"a": a, "b": b}, tags
    if op == "add":
        if diff == "easy":
            a, b = _digits(rng, 4), _digits(rng, 4)
        elif diff == "medium":
            a, b = _digits(rng, 6), _digits(rng, 5)
        else:
            a, b = _digits(rng, 7), _digits(rng, 7)
            if not word:
                r = rng.random()
                if r < 0.3:
                    a = -_digits(rng, 6)
                elif r < 0.55:
                    a, b = round(rng.uniform(100, 9999), 2), round(rng.uniform(100, 9999), 2)
        return {"a": a, "b": b}, tags
    if op == "subtract":
        if diff == "easy":
            a, b = _digits(rng, 4), _digits(rng, 3)
        elif diff == "medium":
            a, b = _digits(rng, 6), _digits(rng, 6)
        else:
            a, b = _digits(rng, 7), _digits(rng, 7)
            if not word:
                r = rng.random()
                if r < 0.3:
                    b = -_digits(rng, 5)
                elif r < 0.55:
                    a, b = round(rng.uniform(10, 999), 2), round(rng.uniform(1000, 9999), 2)
        if word and a < b and rng.random() < 0.5:
            a, b = b, a
        return {"a": a, "b": b}, tags
    if op == "divide":
        if diff == "easy":
            b = rng.randint(12, 99)
            a = b * rng.randint(101, 999)
        elif diff == "medium":
            b = rng.choice(DIVISORS[:10])
            a = _digits(rng, rng.choice([4, 5]))
        else:
            b = rng.choice(DIVISORS[:10])
            a = _digits(rng, rng.choice([6, 7]))
            if not word and rng.random() < 0.3:
                a = -a
        return {"a": a, "b": b}, tags
    if op == "power":
        while True:
            base, exponent = rng.randint(11, 99), rng.randint(3, 6)
            if base ** exponent < 10 ** 11:
                return {"base": base, "exponent": exponent}, tags
    if op == "sqrt":
        root = Fraction(rng.randint(101, 3999))
        if diff == "hard":
            root += Fraction(1, 2)
        return {"x": as_number(root * root)}, tags
    raise ValueError(op)


def arithmetic(rng: random.Random) -> list[dict]:
    out: list[dict] = []
    seen: set[tuple] = set()
    used: Counter = Counter()  # rotates through the templates of each (op, style, lang)
    n = 0
    for op, count in ARITH_COUNTS.items():
        styles = (["plain", "imperative", "symbolic", "word"] if op in ("multiply", "add",
                                                                      "subtract", "divide")
                  else ["plain", "symbolic"])
        for i in range(count):
            lang = "vi" if i % 2 == 0 else "en"
            style = styles[(i // 2) % len(styles)]
            diff = DIFFICULTIES[i % len(DIFFICULTIES)]
            if op in ("power",):
                diff = "medium" if i % 3 else "hard"
            for _ in range(200):
                args, tags = arith_operands(op, diff, rng, style == "word")
                key = (op, tuple(args.values()))
                values = [Fraction(str(v)) for v in args.values()]
                result = exact(op, *values)
                if key not in seen and short_decimal(result):
                    break
            else:
                raise RuntimeError(f"no operands for {op} {diff}")
            seen.add(key)
            steps = [{"id": "s1", "name": op, "arguments": args}]
            answer = run_plan(steps)
            if answer != as_number(result):
                raise AssertionError(f"{op}{args}: tool gives {answer}, exact {result}")
            grouped = (style in ("plain", "word") and i % 7 == 3
                       and all(isinstance(v, int) and abs(v) >= 10000 for v in args.values()))
            vals = list(args.values())
            a_text = fmt(vals[0], lang, grouped=grouped)
            b_text = fmt(vals[1], lang, grouped=grouped, paren=True) if len(vals) > 1 else ""
            templates = ARITH_TEMPLATES[(op, style, lang)]
            used[(op, style, lang)] += 1
            question = templates[used[(op, style, lang)] % len(templates)].format(
                a=a_text, b=b_text, b_th=ordinal(b_text))
            if any(v < 0 for v in vals) or answer < 0:
                tags.append("negative")
            if any(isinstance(v, float) for v in vals) or isinstance(answer, float):
                tags.append("decimal")
            if grouped:
                tags.append("grouped_digits")
            if lang == "vi" and any(isinstance(v, float) for v in vals):
                tags.append("decimal_comma")
            n += 1
            out.append(record(
                id=f"arith-{n:03d}", suite="arithmetic", question=question, answer=answer,
                answer_type="number", lang=lang, gold_calls=steps,
                tags=[f"difficulty:{diff}", f"style:{style}", f"op:{op}", "steps:1"] + tags))
    return out


# ---------------------------------------------------------------- plans

def _ops_text(lang: str) -> dict[str, dict[str, str]]:
    if lang == "vi":
        return {
            "add": {"sym": "+", "verb": "cộng", "noun": "tổng"},
            "subtract": {"sym": "-", "verb": "trừ", "noun": "hiệu"},
            "multiply": {"sym": "×", "verb": "nhân", "noun": "tích"},
            "divide": {"sym": ":", "verb": "chia", "noun": "thương"},
        }
    return {
        "add": {"sym": "+", "verb": "add", "noun": "sum"},
        "subtract": {"sym": "-", "verb": "subtract", "noun": "difference"},
        "multiply": {"sym": "*", "verb": "multiply", "noun": "product"},
        "divide": {"sym": "/", "verb": "divide", "noun": "quotient"},
    }


def _then_vi(op: str, x: str) -> str:
    return {"add": f"cộng thêm {x}", "subtract": f"trừ đi {x}", "multiply": f"nhân với {x}",
            "divide": f"chia cho {x}"}[op]


def _then_en(op: str, x: str) -> str:
    return {"add": f"add {x}", "subtract": f"subtract {x}", "multiply": f"multiply by {x}",
            "divide": f"divide by {x}"}[op]


def _pair(op: str, lang: str, a: str, b: str) -> str:
    """'the sum of a and b' / 'tổng của a và b'."""
    noun = _ops_text(lang)[op]["noun"]
    if lang == "vi":
        return f"{noun} của {a} và {b}"
    return f"the {noun} of {a} and {b}"


def _step(sid: str, op: str, a, b) -> dict:
    return {"id": sid, "name": op, "arguments": {"a": a, "b": b}}


def _rand_operand(rng: random.Random, op: str) -> int:
    return {"add": rng.randint(12, 999), "subtract": rng.randint(10, 999),
            "multiply": rng.randint(3, 99), "divide": rng.choice([2, 4, 5, 8, 16, 25, 40])}[op]


def plan_shapes():
    """(shape, tags, builder) where builder(rng, lang) -> (question, steps)."""

    def seq2(rng, lang):
        op1, op2 = rng.choice([("add", "multiply"), ("subtract", "multiply"),
                               ("multiply", "subtract"), ("multiply", "add"), ("add", "divide"),
                               ("multiply", "divide"), ("subtract", "divide"),
                               ("divide", "add")])
        a, b, c = rng.randint(12, 999), rng.randint(11, 499), _rand_operand(rng, op2)
        if op1 == "multiply":
            a, b = rng.randint(12, 99), rng.randint(12, 99)
        if op1 == "divide":
            b = rng.choice([4, 5, 8, 16, 25])
            a = b * rng.randint(11, 300)
        steps = [_step("s1", op1, a, b), _step("s2", op2, "$s1", c)]
        t = _ops_text(lang)
        A, B, C = fmt(a, lang), fmt(b, lang), fmt(c, lang)
        form = rng.randrange(3)
        if lang == "vi":
            q = [f"Tính ({A} {t[op1]['sym']} {B}) {t[op2]['verb']} {C}.",
                 f"Lấy {A} {t[op1]['verb']} {B}, sau đó {_then_vi(op2, C)}. Kết quả là bao nhiêu?",
                 f"Đầu tiên tính {A} {t[op1]['verb']} {B}, rồi {_then_vi(op2, C)}."][form]
        else:
            first = {"add": f"Add {A} and {B}", "subtract": f"Subtract {B} from {A}",
                     "multiply": f"Multiply {A} by {B}", "divide": f"Divide {A} by {B}"}[op1]
            q = [f"Compute ({A} {t[op1]['sym']} {B}) {t[op2]['sym']} {C}.",
                 f"{first}, then {_then_en(op2, C)}. What is the result?",
                 f"What is ({A} {t[op1]['sym']} {B}) {t[op2]['sym']} {C}?"][form]
        return q, steps

    def reversed2(rng, lang):
        kind = rng.randrange(4)
        t = _ops_text(lang)
        if kind == 0:  # c * (a + b)
            a, b, c = rng.randint(12, 999), rng.randint(12, 999), rng.randint(3, 99)
            steps = [_step("s1", "add", a, b), _step("s2", "multiply", c, "$s1")]
            A, B, C = fmt(a, lang), fmt(b, lang), fmt(c, lang)
            q = (f"Lấy {C} nhân với {_pair('add', lang, A, B)}." if lang == "vi"
                 else f"Multiply {C} by {_pair('add', lang, A, B)}.")
        elif kind == 1:  # c - a * b
            a, b = rng.randint(12, 99), rng.randint(12, 99)
            c = rng.randint(1000, 99999)
            steps = [_step("s1", "multiply", a, b), _step("s2", "subtract", c, "$s1")]
            A, B, C = fmt(a, lang), fmt(b, lang), fmt(c, lang)
            q = (f"Lấy {C} trừ đi {_pair('multiply', lang, A, B)}." if lang == "vi"
                 else f"Subtract {_pair('multiply', lang, A, B)} from {C}.")
        elif kind == 2:  # c / (a - b)
            while True:
                a, b = rng.randint(50, 999), rng.randint(10, 499)
                c = rng.randint(100, 99999)
                if a != b and short_decimal(Fraction(c, a - b)):
                    break
            steps = [_step("s1", "subtract", a, b), _step("s2", "divide", c, "$s1")]
            A, B, C = fmt(a, lang), fmt(b, lang), fmt(c, lang)
            q = (f"Chia {C} cho {_pair('subtract', lang, A, B)} ({A} trừ {B})." if lang == "vi"
                 else f"Divide {C} by {_pair('subtract', lang, A, B)} ({A} minus {B}).")
        else:  # c - (a + b)
            a, b, c = rng.randint(100, 9999), rng.randint(100, 9999), rng.randint(1000, 99999)
            steps = [_step("s1", "add", a, b), _step("s2", "subtract", c, "$s1")]
            A, B, C = fmt(a, lang), fmt(b, lang), fmt(c, lang)
            q = (f"{C} trừ đi {_pair('add', lang, A, B)} thì được bao nhiêu?" if lang == "vi"
                 else f"What is {C} minus {_pair('add', lang, A, B)}?")
        del t
        return q, steps

    def parallel3(rng, lang):
        kind = rng.randrange(4)
        if kind == 3:  # revenue word problem: a*b + c*d
            a, c = rng.randint(12, 250), rng.randint(12, 250)
            b, d = rng.randint(5, 60) * 1000, rng.randint(5, 60) * 1000
            steps = [_step("s1", "multiply", a, b), _step("s2", "multiply", c, d),
                     _step("s3", "add", "$s1", "$s2")]
            A, B, C, D = (fmt(x, lang) for x in (a, b, c, d))
            q = (f"Một tiệm bán {A} vé giá {B} đồng và {C} vé giá {D} đồng. Tổng doanh thu là "
                 f"bao nhiêu đồng?" if lang == "vi" else
                 f"A shop sells {A} tickets at {B} dong each and {C} tickets at {D} dong each. "
                 f"What is the total revenue in dong?")
            return q, steps
        op1, op2, op3 = [("add", "subtract", "multiply"), ("multiply", "multiply", "subtract"),
                         ("add", "add", "divide")][kind]
        while True:
            a, b = rng.randint(12, 999), rng.randint(12, 999)
            c, d = rng.randint(100, 999), rng.randint(10, 99)
            if op1 == "multiply":
                a, b, c, d = (rng.randint(12, 99) for _ in range(4))
            steps = [_step("s1", op1, a, b), _step("s2", op2, c, d),
                     _step("s3", op3, "$s1", "$s2")]
            r1 = exact(op1, Fraction(a), Fraction(b))
            r2 = exact(op2, Fraction(c), Fraction(d))
            if short_decimal(exact(op3, r1, r2)):
                break
        t = _ops_text(lang)
        A, B, C, D = (fmt(x, lang) for x in (a, b, c, d))
        form = rng.randrange(2)
        if lang == "vi":
            q = [f"Tính ({A} {t[op1]['sym']} {B}) {t[op3]['sym']} ({C} {t[op2]['sym']} {D}).",
                 (f"Tính {t[op1]['noun']} của {A} và {B}, {t[op2]['noun']} của {C} và {D}, rồi "
                 f"lấy kết quả thứ nhất {t[op3]['verb']} kết quả thứ hai.")][form]
        else:
            q = [f"What is ({A} {t[op1]['sym']} {B}) {t[op3]['sym']} ({C} {t[op2]['sym']} {D})?",
                 f"Take {_pair(op1, lang, A, B)} and {_pair(op2, lang, C, D)}, then "
                 f"{t[op3]['verb']} the first by the second."
                 if op3 in ("multiply", "divide") else
                 f"Take {_pair(op1, lang, A, B)} and {_pair(op2, lang, C, D)}, then subtract the "
                 f"second from the first."][form]
        return q, steps

    def reversed3(rng, lang):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        c, d = rng.randint(12, 99), rng.randint(12, 99)
        steps = [_step("s1", "add", a, b), _step("s2", "multiply", c, d),
                 _step("s3", "subtract", "$s2", "$s1")]
        A, B, C, D = (fmt(x, lang) for x in (a, b, c, d))
        q = (f"Trừ {_pair('add', lang, A, B)} khỏi {_pair('multiply', lang, C, D)}." if lang == "vi"
             else f"Subtract {_pair('add', lang, A, B)} from {_pair('multiply', lang, C, D)}.")
        return q, steps

    def seq3(rng, lang):
        while True:
            a, b, c = rng.randint(12, 999), rng.randint(12, 999), rng.randint(3, 49)
            d = rng.randint(100, 9999)
            op3 = rng.choice(["subtract", "add", "divide"])
            if op3 == "divide":
                d = rng.choice([4, 8, 16, 25, 40, 125])
            steps = [_step("s1", "add", a, b), _step("s2", "multiply", "$s1", c),
                     _step("s3", op3, "$s2", d)]
            if short_decimal(exact(op3, Fraction((a + b) * c), Fraction(d))):
                break
        A, B, C, D = (fmt(x, lang) for x in (a, b, c, d))
        if lang == "vi":
            q = f"Cộng {A} với {B}, nhân kết quả với {C}, rồi {_then_vi(op3, D)}."
        else:
            q = f"Add {A} and {B}, multiply the result by {C}, then {_then_en(op3, D)}."
        return q, steps

    def parallel4(rng, lang):
        while True:
            a, c = rng.randint(12, 99), rng.randint(12, 99)
            b, d = rng.randint(12, 999), rng.randint(12, 999)
            e = rng.choice([3, 4, 5, 6, 8])
            if short_decimal(Fraction(a * b + c * d, e)):
                break
        steps = [_step("s1", "multiply", a, b), _step("s2", "multiply", c, d),
                 _step("s3", "add", "$s1", "$s2"), _step("s4", "divide", "$s3", e)]
        A, B, C, D, E = (fmt(x, lang) for x in (a, b, c, d, e))
        if lang == "vi":
            q = (f"Một nhóm mua {A} món giá {B} nghìn đồng và {C} món giá {D} nghìn đồng, rồi "
                 f"chia đều hoá đơn cho {E} người. Mỗi người trả bao nhiêu nghìn đồng?")
        else:
            q = (f"A team buys {A} items at {B} dollars and {C} items at {D} dollars, then splits "
                 f"the bill equally among {E} people. How many dollars does each person pay?")
        return q, steps

    def seq4(rng, lang):
        while True:
            a, b, c = rng.randint(12, 999), rng.randint(12, 999), rng.randint(3, 49)
            d = rng.randint(10, 999)
            e = rng.choice([4, 5, 8, 16, 25, 40])
            if short_decimal(Fraction((a + b) * c - d, e)):
                break
        steps = [_step("s1", "add", a, b), _step("s2", "multiply", "$s1", c),
                 _step("s3", "subtract", "$s2", d), _step("s4", "divide", "$s3", e)]
        A, B, C, D, E = (fmt(x, lang) for x in (a, b, c, d, e))
        q = (f"Tính (({A} + {B}) × {C} - {D}) : {E}." if lang == "vi"
             else f"Compute (({A} + {B}) * {C} - {D}) / {E}.")
        return q, steps

    return [
        ("seq2", ["steps:2", "sequential"], seq2, 20),
        ("reversed2", ["steps:2", "sequential", "reversed_order"], reversed2, 20),
        ("parallel3", ["steps:3", "parallel"], parallel3, 20),
        ("reversed3", ["steps:3", "parallel", "reversed_order"], reversed3, 8),
        ("seq3", ["steps:3", "sequential"], seq3, 10),
        ("parallel4", ["steps:4", "parallel", "word_problem"], parallel4, 6),
        ("seq4", ["steps:4", "sequential"], seq4, 6),
    ]


def plans(rng: random.Random) -> list[dict]:
    out: list[dict] = []
    seen: set[str] = set()
    n = 0
    for shape, tags, build, count in plan_shapes():
        for i in range(count):
            lang = "vi" if i % 2 == 0 else "en"
            while True:
                question, steps = build(rng, lang)
                if question not in seen:
                    break
            seen.add(question)
            answer = run_plan(steps)
            extra = ["negative"] if answer < 0 else []
            if isinstance(answer, float):
                extra.append("decimal")
            n += 1
            out.append(record(
                id=f"plan-{n:03d}", suite="plan", question=question, answer=answer,
                answer_type="number", lang=lang, gold_calls=steps,
                tags=[f"shape:{shape}"] + tags + extra))
    return out


# ---------------------------------------------------------------- control

CONTROL = [
    # (lang, question, answer, aliases, tags)
    ("en", "What is the capital of France?", "Paris", [], ["general_knowledge"]),
    ("en", "What is the capital of Japan?", "Tokyo", [], ["general_knowledge"]),
    ("en", "What is the capital of Australia?", "Canberra", [], ["general_knowledge"]),
    ("en", "What is the capital of Canada?", "Ottawa", [], ["general_knowledge"]),
    ("en", "What is the capital of Vietnam?", "Hanoi", ["Ha Noi", "Hà Nội"],
     ["general_knowledge"]),
    ("en", "Say hello in French.", "Bonjour", ["Salut"], ["chat", "translation"]),
    ("en", "How do you say 'thank you' in Spanish?", "Gracias", [], ["chat", "translation"]),
    ("en", "Translate the word 'cat' into Vietnamese.", "mèo", ["con mèo"], ["translation"]),
    ("en", "Say 'good morning' in Vietnamese.", "Chào buổi sáng", ["buổi sáng tốt lành"],
     ["chat", "translation"]),
    ("en", "What colour do you get by mixing blue and yellow?", "green", [],
     ["general_knowledge"]),
    ("en", "How many days are there in a week?", 7, [], ["general_knowledge"]),
    ("en", "How many hours are there in a day?", 24, [], ["general_knowledge"]),
    ("en", "What is the chemical symbol for gold?", "Au", [], ["general_knowledge"]),
    ("en", "Which planet is known as the Red Planet?", "Mars", ["Sao Hỏa"], ["general_knowledge"]),
    ("en", "What is the opposite of 'hot'?", "cold", ["chilly"], ["chat"]),
    ("en", "How many legs does a spider have?", 8, [], ["general_knowledge"]),
    ("en", "What is the largest ocean on Earth?", "Pacific", ["Pacific Ocean"],
     ["general_knowledge"]),
    ("en", "Who wrote the play 'Romeo and Juliet'?", "Shakespeare", ["William Shakespeare"],
     ["general_knowledge"]),
    ("en", "What language is mainly spoken in Brazil?", "Portuguese", ["Português"], ["general_knowledge"]),
    ("en", "At how many degrees Celsius does water freeze at sea level?", 0, [],
     ["general_knowledge"]),
    ("en", "Reply with the single word 'yes'.", "yes", [], ["chat", "instruction"]),
    ("en", "How many minutes are there in an hour?", 60, [], ["general_knowledge"]),
    ("vi", "Thủ đô của Việt Nam là thành phố nào?", "Hà Nội", ["Ha Noi", "Hanoi"],
     ["general_knowledge"]),
    ("vi", "Thủ đô của Nhật Bản là gì?", "Tokyo", ["Tô-ky-ô", "Tô-ki-ô", "Đông Kinh"], ["general_knowledge"]),
    ("vi", "Thủ đô của Pháp là gì?", "Paris", ["Pa-ri"], ["general_knowledge"]),
    ("vi", "Thủ đô của Thái Lan là gì?", "Bangkok", ["Băng Cốc", "Krung Thep"], ["general_knowledge"]),
    ("vi", "Một tuần có mấy ngày?", 7, [], ["general_knowledge"]),
    ("vi", "Một năm có bao nhiêu tháng?", 12, [], ["general_knowledge"]),
    ("vi", "Nước đóng băng ở bao nhiêu độ C (ở áp suất thường)?", 0, [], ["general_knowledge"]),
    ("vi", "Hãy chào bằng tiếng Anh.", "Hello", ["Hi", "Hey"], ["chat", "translation"]),
    ("vi", "Nói 'cảm ơn' bằng tiếng Anh như thế nào?", "Thank you", ["Thanks"],
     ["chat", "translation"]),
    ("vi", "Con mèo trong tiếng Anh là gì?", "cat", [], ["translation"]),
    ("vi", "Nói 'xin chào' bằng tiếng Nhật.", "Konnichiwa", ["こんにちは", "Konichiwa", "Kon'nichiwa"],
     ["chat", "translation"]),
    ("vi", "Ai là tác giả của Truyện Kiều?", "Nguyễn Du", ["Nguyen Du"], ["general_knowledge"]),
    ("vi", "Hành tinh nào gần Mặt Trời nhất?", "Sao Thủy", ["Sao Thuỷ", "Thủy Tinh", "Mercury"],
     ["general_knowledge"]),
    ("vi", "Con nhện có mấy chân?", 8, [], ["general_knowledge"]),
    ("vi", "Đại dương lớn nhất thế giới là đại dương nào?", "Thái Bình Dương",
     ["Thai Binh Duong", "Pacific"], ["general_knowledge"]),
    ("vi", "Từ trái nghĩa với 'nóng' là gì?", "lạnh", ["rét"], ["chat"]),
    ("vi", "Một giờ có bao nhiêu phút?", 60, [], ["general_knowledge"]),
    ("vi", "Thành phố Đà Nẵng nằm ở miền nào của Việt Nam?", "miền Trung",
     ["Trung Bộ", "miền trung"], ["general_knowledge"]),
    ("vi", "Kí hiệu hoá học của vàng là gì?", "Au", [], ["general_knowledge"]),
    ("vi", "Trộn màu xanh dương với màu vàng thì được màu gì?", "xanh lá",
     ["xanh lá cây", "xanh lục"], ["general_knowledge"]),
    ("vi", "Hãy trả lời bằng đúng một từ: 'vâng'.", "vâng", [], ["chat", "instruction"]),
    ("vi", "Một ngày có bao nhiêu giờ?", 24, [], ["general_knowledge"]),
]


def control() -> list[dict]:
    out = []
    for n, (lang, question, answer, aliases, tags) in enumerate(CONTROL, start=1):
        atype = "number" if isinstance(answer, int) else "text"
        out.append(record(id=f"ctrl-{n:03d}", suite="control", question=question, answer=answer,
                          answer_type=atype, aliases=aliases, lang=lang, tags=tags))
    return out


# ---------------------------------------------------------------- site_rag

def _doc_lang(text: str) -> str:
    m = re.search(r"^- lang: (\w+)", text, re.MULTILINE)
    return m.group(1) if m else "en"


def site_rag() -> list[dict]:
    docs = {d.id: d.text for d in load_corpus(SITE)}
    out = []
    n = 0
    for item in RAG:
        lang, question, answer, prefix, quotes = item[:5]
        opts = item[5] if len(item) > 5 else {}
        matches = [d for d in docs if d.startswith(prefix)]
        if len(matches) != 1:
            raise SystemExit(f"doc prefix {prefix!r} matches {matches}")
        doc = matches[0]
        text = docs[doc]
        if isinstance(quotes, str):
            quotes = [quotes]
        n += 1
        quotes = [*quotes, *MORE_GOLD.get(f"rag-{n:03d}", [])]
        spans = []
        for quote in quotes:
            other = None
            if "::" in quote:  # "doc-prefix::quote" for a passage in another post
                other, quote = quote.split("::", 1)
                odoc = next(d for d in docs if d.startswith(other))
                otext = docs[odoc]
            else:
                odoc, otext = doc, text
            start = otext.find(quote)
            if start < 0:
                raise SystemExit(f"quote not found in {odoc}: {quote!r}")
            if otext.find(quote, start + 1) >= 0:
                raise SystemExit(f"quote not unique in {odoc}: {quote!r}")
            spans.append({"doc": odoc, "start": start, "end": start + len(quote)})
        atype = "number" if isinstance(answer, (int, float)) else "text"
        doc_lang = _doc_lang(text)
        tags = ["numeric" if atype == "number" else "short_text", f"doc_lang:{doc_lang}"]
        if lang != doc_lang:
            tags.append("cross_lingual")
        tags += opts.get("tags", [])
        out.append(record(
            id=f"rag-{n:03d}", suite="site_rag", question=question, answer=answer,
            answer_type=atype, aliases=opts.get("aliases", []), lang=lang,
            gold_passages=spans, tags=tags))
    for lang, question, why in ABSTAIN:
        n += 1
        out.append(record(
            id=f"rag-{n:03d}", suite="site_rag", question=question,
            answer="Tôi không biết" if lang == "vi" else "I don't know",
            answer_type="abstain", lang=lang, tags=["abstain", why]))
    return out


# ---------------------------------------------------------------- sample and output

def pick_sample(records: list[dict], suite: str, rng: random.Random) -> list[dict]:
    """Six varied questions: three per language, different shapes/ops/tags."""
    if suite == "site_rag":
        abstain = [r for r in records if r["answer_type"] == "abstain"]
        answerable = [r for r in records if r["answer_type"] != "abstain"]
        first = rng.choice([r for r in abstain if r["lang"] == "en"])
        chosen = [first, rng.choice([r for r in abstain if r["lang"] == "vi"
                                     and r["tags"][-1] != first["tags"][-1]])]
        wanted = [("vi", "cross_lingual"), ("en", "changed_fact"), ("vi", "numeric"),
                  ("en", "short_text")]
        for lang, tag in wanted:
            pool = [r for r in answerable if r["lang"] == lang and tag in r["tags"]
                    and r not in chosen]
            chosen.append(rng.choice(pool))
        # The default job takes the first `limit` questions of each file: alternate answerable
        # and abstain questions so that any cut of two or more reaches both.
        answer_first = sorted(chosen[2:], key=lambda r: r["id"])
        abstain_first = sorted(chosen[:2], key=lambda r: r["id"])
        mixed = [r for pair in zip(answer_first, abstain_first) for r in pair]
        return mixed + answer_first[len(abstain_first):]
    if suite == "arithmetic":
        key = {r["id"]: next(t for t in r["tags"] if t.startswith("op:")) for r in records}
        pool = [r for r in records if key[r["id"]] in ("op:add", "op:subtract", "op:multiply",
                                                      "op:divide")]
        wanted = [("vi", "op:multiply"), ("en", "op:multiply"), ("vi", "op:divide"),
                  ("en", "op:add"), ("vi", "op:subtract"), ("en", "op:divide")]
        return sorted((rng.choice([r for r in pool if r["lang"] == lang and key[r["id"]] == op])
                       for lang, op in wanted), key=lambda r: r["id"])
    if suite == "plan":
        wanted = [("vi", "shape:seq2"), ("en", "shape:seq2"), ("vi", "shape:reversed2"),
                  ("en", "shape:reversed2"), ("vi", "shape:parallel3"), ("en", "shape:parallel3")]
        return sorted((rng.choice([r for r in records if r["lang"] == lang and tag in r["tags"]])
                       for lang, tag in wanted), key=lambda r: r["id"])
    chosen = []  # control: per language one number and two text answers
    for lang in ("vi", "en"):
        chosen.append(rng.choice([r for r in records if r["lang"] == lang
                                  and r["answer_type"] == "number"]))
        chosen += rng.sample([r for r in records if r["lang"] == lang
                              and r["answer_type"] == "text"], 2)
    return sorted(chosen, key=lambda r: r["id"])


def dumps(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def build() -> dict[Path, str]:
    """Every output file and its content."""
    rng = random.Random(SEED)
    sets = {
        "arithmetic": arithmetic(rng),
        "plan": plans(rng),
        "site_rag": site_rag(),
        "control": control(),
    }
    sample_rng = random.Random(SEED + 1)
    files: dict[Path, str] = {}
    for suite, records in sets.items():
        files[HERE / f"{suite}.jsonl"] = dumps(records)
        files[SAMPLE / f"{suite}.jsonl"] = dumps(pick_sample(records, suite, sample_rng))
        langs = Counter(r["lang"] for r in records)
        print(f"{suite:11s} {len(records):4d}  " + "  ".join(f"{k}={v}" for k, v in
                                                             sorted(langs.items())))
    return files


def main(argv: list[str]) -> int:
    check = "--check" in argv
    files = build()
    if check:  # compare with the committed files, write nothing
        stale = [p for p, text in files.items()
                 if not p.is_file() or p.read_text(encoding="utf-8") != text]
        for p in stale:
            print(f"out of date: {p.relative_to(ROOT)} (run python datasets/generate.py)",
                  file=sys.stderr)
        if stale:
            return 1
    else:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
    from evalpipe._validate import validate_paths

    errors = validate_paths([str(p) for p in files], corpus_root=str(SITE))
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
