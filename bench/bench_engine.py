"""evalpipe's batched engine vs a plain one-question-at-a-time agent loop.

    python bench/bench_engine.py                                # 64 questions
    python bench/bench_engine.py --n 16                         # quicker
    python bench/bench_engine.py --model qwen2.5-coder-0.5b --n 16
    python bench/bench_engine.py --model qwen2.5-coder-1.5b --dtype float32,bfloat16 \
        --sides engine,engine-1 --n 16          # both dtypes, alternating

Three sides, each run once per round, the rounds alternating: the engine batched,
the engine with a batch cap of 1 (one conversation at a time) and the plain
model.generate loop. Every side uses the same model (default smollm2-135m,
float32), the hermes format, the calculator tools and the same questions
(datasets/arithmetic.jsonl and datasets/plan.jsonl, interleaved; synthesised when
absent). The plain loop is the tutorial way: for each question,
apply_chat_template + model.generate per turn, parse the reply, run the tools,
repeat. Prints tokens/second (median and range) and questions/second of each, the
load before and after each run, and how many final answers equal the batched
engine's. With several dtypes (`--dtype float32,bfloat16`) every side runs at each,
one model loaded per dtype, all alternating within each round; each dtype's answers
are counted against its own batched engine's.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


MAX_TURNS = 5


def add_threads_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: PyTorch's own choice, one per core; on a "
                         "shared, oversubscribed machine 1 can be faster, see docs/speed.md)")


def use_threads(n: int | None) -> int:
    """Set torch's thread count when asked; the count in use."""
    import torch

    if n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def bench_questions(n: int):
    """n questions: arithmetic and plan interleaved (synthesised if the files are missing)."""
    from evalpipe.questions import Question, load_questions

    sets = [load_questions(p) for p in (REPO / "datasets/arithmetic.jsonl",
                                        REPO / "datasets/plan.jsonl") if p.is_file()]
    out = []
    for group in zip(*sets) if sets else []:
        out.extend(group)
    if len(out) < n:
        rng = random.Random(0)
        for i in range(n - len(out)):
            a, b = rng.randrange(10, 2000), rng.randrange(2, 500)
            out.append(Question(id=f"synth-{i}", suite="arithmetic",
                                question=f"What is {a} multiplied by {b}?", answer=a * b,
                                answer_type="number"))
    return out[:n]


def make_runtime(backend, toolset_name: str = "calculator", max_new_tokens: int = 256,
                 batch_size: int = 16):
    from evalpipe.backends.base import GenerationSettings
    from evalpipe.engine import CellRuntime
    from evalpipe.formats import get_format
    from evalpipe.tools import build_toolset

    return CellRuntime(
        cell_id="bench", fingerprint="bench", settings={}, backend=backend,
        fmt=get_format("hermes"), toolset=build_toolset(toolset_name),
        generation=GenerationSettings(max_new_tokens=max_new_tokens, batch_size=batch_size),
        max_turns=MAX_TURNS)


def run_engine(runtime, questions) -> tuple[float, dict[str, str], float, int]:
    """Wall seconds, final answer per question id, seconds inside the model (the backend
    session's submit and poll) and tokens generated."""
    from evalpipe.engine import Engine

    inside = 0.0

    def timed(method):
        def call(*args, **kwargs):
            nonlocal inside
            t = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                inside += time.perf_counter() - t
        return call

    def open_session(backend, settings):
        session = backend.session(settings)
        session.submit, session.poll = timed(session.submit), timed(session.poll)
        return session

    answers, tokens = {}, 0
    t0 = time.perf_counter()
    for samples in Engine(open_session).run(runtime, questions, "bench"):
        for s in samples:
            answers[s.question_id] = s.final_answer
            tokens += sum(t["completion_tokens"] or 0 for t in s.turns)
    return time.perf_counter() - t0, answers, inside, tokens


def one_at_a_time(runtime, questions, complete) -> tuple[float, dict[str, str]]:
    # complete(wire) returns the reply's text; the caller counts its tokens.
    """The tutorial agent loop: one question at a time, one `complete(wire messages)`
    call per turn, the same prompts, parsing and tools as the engine."""
    from evalpipe.engine import DEFAULT_SYSTEM_PROMPT, FORMAT_FEEDBACK
    from evalpipe.records import ToolCall
    from evalpipe.tools.registry import result_text

    fmt, tools = runtime.fmt, runtime.toolset
    answers = {}
    t0 = time.perf_counter()
    for q in questions:
        messages = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                    {"role": "user", "content": q.question}]
        answer = ""
        for turn in range(MAX_TURNS):
            wire, _ = fmt.prepare(messages, tools.schemas(), False)
            reply = complete(wire)
            parsed = fmt.parse(reply, lenient=True)
            calls = [ToolCall(c.name, c.arguments, id=f"call_{turn}_{i}")
                     for i, c in enumerate(parsed.calls)]
            messages.append({"role": "assistant", "content": reply, **({"tool_calls": [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}
                if calls else {})})
            if calls:
                for event in tools.execute(calls):
                    messages.append({"role": "tool", "tool_call_id": event.call_id,
                                     "name": event.name, "content": result_text(event)})
            elif parsed.errors:
                kinds = ", ".join(sorted({e.kind for e in parsed.errors}))
                messages.append({"role": "user", "content": FORMAT_FEEDBACK.format(errors=kinds),
                                 "format_feedback": True})
            else:
                answer = parsed.content
                break
        answers[q.id] = answer
    return time.perf_counter() - t0, answers


def run_plain(backend, runtime, questions) -> tuple[float, dict[str, str], int]:
    """apply_chat_template + model.generate per turn, as tutorials write it; with the
    tokens generated."""
    import torch

    tok, model = backend.tokenizer, backend.model
    tokens = 0

    def complete(wire):
        nonlocal tokens
        text = tok.apply_chat_template(wire, add_generation_prompt=True, tokenize=False)
        ids = tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=runtime.generation.max_new_tokens,
                                 do_sample=False, eos_token_id=backend.eos_ids,
                                 pad_token_id=tok.pad_token_id)
        new = out[0, ids["input_ids"].shape[1]:]
        tokens += int(new.shape[0])
        return tok.decode(new, skip_special_tokens=True)

    seconds, answers = one_at_a_time(runtime, questions, complete)
    return seconds, answers, tokens


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="model alias (or folder)")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--dtype", default="float32",
                    help="weights dtype, or several comma-separated (each side runs at each)")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64, help="the engine's batch cap")
    ap.add_argument("--repeats", type=int, default=2,
                    help="alternating rounds; each side runs once per round")
    ap.add_argument("--sides", default="engine,engine-1,generate",
                    help="of engine (batched), engine-1 (batch cap 1: one conversation at "
                         "a time) and generate (the plain model.generate loop)")
    add_threads_option(ap)
    args = ap.parse_args(argv)

    import statistics

    import torch
    from machine import cpu_line, load_now

    from evalpipe.backends import load_backend

    use_threads(args.threads)
    dtypes = args.dtype.split(",")
    questions = bench_questions(args.n)
    caps = {"engine": args.batch_size, "engine-1": 1}
    sides = [(side, dtype) for dtype in dtypes for side in args.sides.split(",")]
    backends = {}
    for dtype in dtypes:
        backends[dtype] = load_backend({"id": args.model, "dtype": dtype})
        print(f"engine: {backends[dtype].log_line()}", flush=True)
    # The engine packs its model's weights in place: the plain loop gets a copy of its
    # own, loaded for model.generate (never packed).
    plain = {d: load_backend({"id": args.model, "dtype": d, "generation": "hf"})
             for d in dtypes} if "generate" in args.sides.split(",") else {}
    # Warm-up (every side): one short generation each, so none pays first-call costs.
    for dtype in dtypes:
        run_engine(make_runtime(backends[dtype], max_new_tokens=4), questions[:2])
        if dtype in plain:
            run_plain(plain[dtype], make_runtime(plain[dtype], max_new_tokens=4),
                      questions[:1])

    def label(side: str, dtype: str) -> str:
        return side if len(dtypes) == 1 else f"{side} {dtype}"

    rows: dict[str, list[tuple[float, int, float, float]]] = {label(*s): [] for s in sides}
    answers: dict[str, dict[str, str]] = {}
    for _ in range(args.repeats):
        for side, dtype in sides:
            backend = backends[dtype]
            backend.prefix_store.clear()  # each side starts cold, as a fresh run would
            before = load_now()
            if side == "generate":
                runtime = make_runtime(plain[dtype], max_new_tokens=args.max_new_tokens)
                seconds, got, tokens = run_plain(plain[dtype], runtime, questions)
            else:
                runtime = make_runtime(backend, max_new_tokens=args.max_new_tokens,
                                       batch_size=caps[side])
                seconds, got, _, tokens = run_engine(runtime, questions)
            rows[label(side, dtype)].append((seconds, tokens, before, load_now()))
            answers.setdefault(label(side, dtype), got)
            # each run as it ends, so a run cut short by a time limit still leaves figures
            print(f"{label(side, dtype)}: {tokens} tokens in {seconds:.1f} s = "
                  f"{tokens / seconds:.1f} tokens/s (load {before:.1f} -> {load_now():.1f})",
                  flush=True)

    n = len(questions)
    print(f"model {args.model}, {n} questions (hermes, calculator, up to {MAX_TURNS} turns, "
          f"max_new_tokens={args.max_new_tokens}, dtype={args.dtype}, greedy), "
          f"torch threads {torch.get_num_threads()}, {args.repeats} alternating rounds")
    print(f"machine: {cpu_line()}")
    print("| side | tokens/s median (range) | questions/s median | tokens | load before -> after "
          "| final answers equal to the batched engine's (same dtype) |")
    print("|---|---|---|---|---|---|")
    for side, dtype in sides:
        name = label(side, dtype)
        reference = answers.get(label("engine", dtype)) or answers[name]
        rates = [tokens / seconds for seconds, tokens, _, _ in rows[name]]
        qps = statistics.median(n / seconds for seconds, _, _, _ in rows[name])
        loads = ", ".join(f"{b:.1f} -> {a:.1f}" for _, _, b, a in rows[name])
        same = sum(answers[name][q.id] == reference[q.id] for q in questions)
        print(f"| {name} | {statistics.median(rates):.1f} ({min(rates):.1f}-{max(rates):.1f}) "
              f"| {qps:.3f} | {rows[name][0][1]} | {loads} | {same}/{n} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
