"""Scoring throughput: score_sample + aggregate over synthetic samples.

    python bench/bench_scoring.py            # 100,000 samples
    python bench/bench_scoring.py --n 20000

Synthesises a realistic mix (calculator plans right and wrong, malformed and
refused calls, turn limits, closed-book and RAG questions, abstentions,
Vietnamese and English replies with every number format, 16 cells x 4 suites),
then times scoring and aggregation separately and prints samples per second.
Sample synthesis is not timed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import timeit
from collections import Counter
from pathlib import Path

from machine import load_note  # bench/machine.py: CPU, flags, load

# tests/synth.py builds sample records without a model
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from synth import call, chunk, make_sample

from evalpipe.questions import Question
from evalpipe.scoring import aggregate, score_sample


def _questions() -> list[Question]:
    qs = []
    for i in range(40):
        a, b, c = 10 + i, 20 + 3 * i, 3 + i % 7
        qs.append(Question(
            id=f"plan-{i}", suite="plan", question=f"Tính ({a} + {b}) nhân {c}.",
            answer=(a + b) * c, answer_type="number", lang="vi" if i % 2 else "en",
            gold_calls=[{"id": "s1", "name": "add", "arguments": {"a": a, "b": b}},
                        {"id": "s2", "name": "multiply", "arguments": {"a": "$s1", "b": c}}]))
        qs.append(Question(
            id=f"arith-{i}", suite="arithmetic", question=f"{a * 1000 + b} * {c * 101}?",
            answer=(a * 1000 + b) * c * 101, answer_type="number", lang="en",
            gold_calls=[{"id": "s1", "name": "multiply",
                         "arguments": {"a": a * 1000 + b, "b": c * 101}}]))
        qs.append(Question(
            id=f"rag-{i}", suite="site_rag", question=f"Phòng {i} mở cửa lúc mấy giờ?",
            answer=f"{7 + i % 4} giờ 30", answer_type="text", aliases=[f"{7 + i % 4}:30"],
            lang="vi", gold_passages=[{"doc": f"doc{i}.md", "start": 100, "end": 180}]))
        qs.append(Question(
            id=f"ctl-{i}", suite="control", question="Ai là thị trưởng năm 1700?",
            answer="không biết", answer_type="abstain", lang="vi", gold_calls=[]))
    return qs


def _sample(q: Question, rng: random.Random, cell: int) -> dict:
    cell_id = f"cell-{cell:02d}"
    roll = rng.random()
    if q.suite == "site_rag":
        doc = q.gold_passages[0]["doc"]
        shown = [chunk(doc, 90, 200, 1), chunk("other.md", 0, 120, 2), chunk("x.md", 5, 90, 3)]
        missed = [chunk("other.md", 0, 120, 1), chunk(doc, 400, 520, 2), chunk("y.md", 0, 80, 3)]
        retrieved = shown if roll < 0.7 else missed
        reply = rng.choice([f"Phòng mở cửa lúc {q.answer}.", "Lúc 8 giờ.", "Tôi không biết.",
                            f"It opens at {q.aliases[0]}."])
        return make_sample(q, reply, retrieved=retrieved, retrieval_mode="prepend",
                           toolset="none", cell_id=cell_id)
    if q.suite == "control":
        reply = rng.choice(["Tôi không biết.", "Không có thông tin về điều này.",
                            "Thị trưởng là ông Nguyễn Văn A.", "I don't know."])
        steps = [[call("add", {"a": 1, "b": 2}, 3)]] if roll < 0.1 else []
        return make_sample(q, reply, steps=steps, cell_id=cell_id)
    steps_right = []
    env: dict = {}
    for st in q.gold_calls:
        args = {k: env[v[1:]] if isinstance(v, str) else v for k, v in st["arguments"].items()}
        env[st["id"]] = args["a"] + args["b"] if st["name"] == "add" else args["a"] * args["b"]
        steps_right.append([call(st["name"], args, env[st["id"]])])
    answer = q.answer
    formats = [f"{answer}", f"{answer:,}", f"{answer:,}".replace(",", "."),
               f"{answer:,}".replace(",", " "), f"{answer}.0"]
    written = rng.choice(formats)
    if roll < 0.05:
        return make_sample(q, stop_reason="infra_error", cell_id=cell_id)
    if roll < 0.45:
        reply = rng.choice([f"Kết quả là {written}.", f"The answer is {written}.", written])
        return make_sample(q, reply, steps=steps_right, cell_id=cell_id)
    if roll < 0.55:
        bad = {"raw": "<tool_call>{add 1 2", "parse_errors": [
            {"kind": "not_json", "message": "Expecting ','", "snippet": "{add 1 2"}],
            "strict_errors": [{"kind": "not_json", "message": "x", "snippet": "{add"}]}
        return make_sample(q, f"Kết quả là {answer + 1}.", steps=[bad], cell_id=cell_id)
    if roll < 0.62:
        return make_sample(q, steps=[[call("add", {"a": "1", "b": 2}, error="invalid_arguments")]]
                           * 5, stop_reason="turn_limit", cell_id=cell_id)
    if roll < 0.75:
        first = q.gold_calls[0]["arguments"]
        wrong = first["a"] * first["b"]
        return make_sample(q, f"The answer is {wrong}.",
                           steps=[[call("multiply", dict(first), wrong)]], cell_id=cell_id)
    if roll < 0.85:
        return make_sample(q, f"Đáp số: {answer - 7}", steps=steps_right, cell_id=cell_id)
    return make_sample(q, rng.choice([f"{answer}", "bảy triệu", f"Khoảng {answer // 1000} nghìn"]),
                       cell_id=cell_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    questions = _questions()
    pairs = []
    for i in range(args.n):
        q = questions[i % len(questions)]
        pairs.append((_sample(q, rng, cell=(i // len(questions)) % 16), q))

    wall, cpu = time.perf_counter(), time.process_time()
    scored = [score_sample(s, q) for s, q in pairs]
    score_wall, score_cpu = time.perf_counter() - wall, time.process_time() - cpu

    wall, cpu = time.perf_counter(), time.process_time()
    rows = aggregate(scored)
    agg_wall, agg_cpu = time.perf_counter() - wall, time.process_time() - cpu

    # A fixed pure-Python loop timed in the same run: the ratio below carries over
    # between machines better than samples/s does on a busy one.
    reference = min(timeit.Timer("sum(range(1000))", timer=time.process_time)
                    .repeat(number=2000, repeat=5)) / 2000

    n = args.n
    print(f"samples            {n:,}   (wall = elapsed; cpu = this process's CPU time, "
          "steadier on a shared machine)")
    for label, w, c in [("score_sample", score_wall, score_cpu),
                        ("aggregate", agg_wall, agg_cpu),
                        ("score + aggregate", score_wall + agg_wall, score_cpu + agg_cpu)]:
        print(f"{label:18s} wall {w:6.2f} s {n / w:9,.0f} samples/s   "
              f"cpu {c:6.2f} s {n / c:9,.0f} samples/s")
    print(f"aggregate rows     {len(rows)}")
    per_sample = (score_cpu + agg_cpu) / n
    print(f"reference loop     sum(range(1000)) = {reference * 1e6:.1f} us cpu; one sample "
          f"scored and aggregated = {per_sample / reference:.1f} reference loops")
    mix = Counter(s["category"] for s in scored)
    print("categories         " + ", ".join(f"{k} {v}" for k, v in mix.most_common()))
    print(f"note: {load_note()}")


if __name__ == "__main__":
    main()
