"""BFCL's own AST checker as an oracle for evalpipe's verdicts.

The checker is imported from the pinned bfcl-eval wheel itself (zipimport),
with its SDK-importing model-config module replaced by a stub; nothing is
installed. For every item of the AST categories, the gold call and
perturbations of it get BFCL's verdict and evalpipe's ("every call valid
against its tool's schema, and the plan matched"), under evalpipe's rules and
under `match: bfcl`.

Run as a script for the agreement table: python3 tests/bfcl_oracle.py
"""

from __future__ import annotations

import copy
import sys
import types
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from evalpipe.bfcl import BfclData
from evalpipe.bfcl.convert import convert_item
from evalpipe.records import ToolCall
from evalpipe.scoring.plan import Executed, match_plan
from evalpipe.tools.registry import Toolset
from evalpipe.tools.schema_only import schema_tool

AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
_STUBBED = "bfcl_eval.constants.model_config"


def load_checker(wheel: Path) -> Callable[..., dict]:
    """bfcl_eval's ast_checker, imported from the wheel file with the one module that
    imports every model SDK stubbed out."""
    stub = types.ModuleType(_STUBBED)
    stub.MODEL_CONFIG_MAPPING = defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
    sys.modules[_STUBBED] = stub
    sys.path.insert(0, str(wheel))
    try:
        from bfcl_eval.constants.enums import Language
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    finally:
        sys.path.remove(str(wheel))

    def check(functions, output, ground_truth, category) -> bool:
        return bool(ast_checker(functions, output, ground_truth, Language.PYTHON, category,
                                "oracle")["valid"])

    return check


# --- gold calls and their perturbations, in BFCL's output form [{name: {arg: value}}] ---

def first_value(acceptable: list) -> Any:
    return next(v for v in acceptable if v != "")


def gold_output(ground_truth: list[dict]) -> list[dict]:
    """The gold call: the first acceptable value of every argument that must be given."""
    out = []
    for call in ground_truth:
        (name, args), = call.items()
        out.append({name: {k: _concrete(first_value(v)) for k, v in args.items() if "" not in v}})
    return out


def _concrete(value: Any) -> Any:
    """A nested possible answer (dict of acceptable lists) as one concrete value."""
    if isinstance(value, dict):
        return {k: _concrete(first_value(v)) if isinstance(v, list) else v
                for k, v in value.items() if not (isinstance(v, list) and "" in v)}
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value


def _args(output: list[dict], i: int) -> dict:
    return next(iter(output[i].values()))


def _first(output: list[dict], want: Callable[[str, Any], bool]) -> tuple[int, str] | None:
    for i in range(len(output)):
        for k, v in _args(output, i).items():
            if want(k, v):
                return i, k
    return None


def _set(output, where, value):
    out = copy.deepcopy(output)
    i, k = where
    _args(out, i)[k] = value
    return out


def _wrong_type(v: Any) -> Any:
    if isinstance(v, bool):
        return "yes"
    if isinstance(v, str):
        return 12345
    if isinstance(v, (int, float)):
        return [v]
    return "text"


def _wrong_value(v: Any) -> Any:
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 7
    if isinstance(v, float):
        return v * 2 + 1.5
    if isinstance(v, str):
        return v + " qzx"
    if isinstance(v, list):
        return v + v[:1] if v else ["qzx"]
    return {"qzx": 1}


def _case_and_spacing(s: str) -> str:
    return "  " + s.swapcase().replace(" ", "   ") + " "


def perturbations(ground_truth: list[dict], functions: list[dict]
                  ) -> Iterator[tuple[str, list[dict]]]:
    gold = gold_output(ground_truth)
    yield "gold", gold
    (name0, _), = gold[0].items()
    yield "wrong_name", [{name0 + "_x": _args(gold, 0)}] + gold[1:]
    docs = {f["name"]: f for f in functions}
    for i, call in enumerate(gold):
        (name, args), = call.items()
        required = [r for r in docs[name]["parameters"].get("required", []) if r in args]
        if required:
            out = copy.deepcopy(gold)
            del _args(out, i)[required[0]]
            yield "missing_required", out
            break
    out = copy.deepcopy(gold)
    _args(out, 0)["extra_arg_qzx"] = 1
    yield "extra_argument", out
    where = _first(gold, lambda k, v: True)
    if where:
        value = _args(gold, where[0])[where[1]]
        yield "wrong_type", _set(gold, where, _wrong_type(value))
        yield "wrong_value", _set(gold, where, _wrong_value(value))
    for i, call in enumerate(ground_truth):
        (name, args), = call.items()
        second = next(((k, [x for x in v if x != ""][1]) for k, v in args.items()
                       if len([x for x in v if x != ""]) > 1), None)
        if second:
            yield "second_acceptable", _set(gold, (i, second[0]), _concrete(second[1]))
            break
    for i, call in enumerate(ground_truth):
        (name, args), = call.items()
        optional = next(((k, v) for k, v in args.items() if "" in v and len(v) > 1), None)
        if optional:
            value = _concrete(first_value(optional[1]))
            yield "optional_given", _set(gold, (i, optional[0]), value)
            break
    where = _first(gold, lambda k, v: isinstance(v, str) and v.strip() and v.swapcase() != v)
    if where:
        yield "string_case_spacing", _set(gold, where,
                                          _case_and_spacing(_args(gold, where[0])[where[1]]))
    if len(gold) > 1 and gold[0] != gold[-1]:
        yield "swapped_order", list(reversed(gold))
    yield "duplicated_call", gold + [copy.deepcopy(gold[0])]
    where = _first(gold, lambda k, v: type(v) is int)
    if where:
        yield "integral_float_for_int", _set(gold, where, float(_args(gold, where[0])[where[1]]))
    where = _first(gold, lambda k, v: type(v) in (int, float))
    if where:
        yield "numeric_string", _set(gold, where, str(_args(gold, where[0])[where[1]]))


# --- evalpipe's verdict --------------------------------------------------------------------

def evalpipe_verdict(record: dict, output: list[dict], rules: str) -> bool:
    """Format valid (every call names an offered tool and validates) and plan matched."""
    toolset = Toolset({t["function"]["name"]: schema_tool(t) for t in record["tools"]})
    executed = []
    for position, call in enumerate(output):
        (name, args), = call.items()
        ok = toolset.check(ToolCall(name, args)) is None
        if not ok:
            return False
        executed.append(Executed(name, args, None, ok, 0, position))
    return match_plan(executed, record["gold_calls"], rules).exact


def schema_problems(row: dict[str, Any]) -> list[str]:
    """The schema-check messages of a row's calls (why evalpipe called them invalid)."""
    toolset = Toolset({t["function"]["name"]: schema_tool(t) for t in row["record"]["tools"]})
    out = []
    for call in row["output"]:
        (name, args), = call.items()
        problem = toolset.check(ToolCall(name, args))
        if problem:
            out.append(problem[1])
    return out


def cases(data: BfclData, categories=AST_CATEGORIES) -> Iterator[dict[str, Any]]:
    """Every (item, perturbation) with both verdicts."""
    for category in categories:
        answers = data.answers(category)
        for item in data.questions(category):
            answer = answers[item["id"]]
            record = convert_item(category, item, answer, item["id"])
            if record is None:
                continue
            for kind, output in perturbations(answer["ground_truth"], item["function"]):
                yield {"category": category, "id": item["id"], "perturbation": kind,
                       "output": output, "record": record, "item": item, "answer": answer}


def agreement(data: BfclData, categories=AST_CATEGORIES) -> list[dict[str, Any]]:
    check = load_checker(data.path)
    rows = []
    for case in cases(data, categories):
        bfcl = check(case["item"]["function"], case["output"], case["answer"]["ground_truth"],
                     case["category"])
        rows.append({**{k: case[k] for k in ("category", "id", "perturbation", "output",
                                             "record")},
                     "bfcl": bfcl,
                     "evalpipe": evalpipe_verdict(case["record"], case["output"], "evalpipe"),
                     "match_bfcl": evalpipe_verdict(case["record"], case["output"], "bfcl")})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    groups: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for r in rows:
        for key in ((r["category"], r["perturbation"]), ("all", r["perturbation"])):
            g = groups[key]
            g["n"] += 1
            g["bfcl_pass"] += r["bfcl"]
            g["agree"] += r["bfcl"] == r["evalpipe"]
            g["agree_bfcl"] += r["bfcl"] == r["match_bfcl"]
    lines = [("| category | perturbation | cases | BFCL passes | agree (evalpipe rules) "
             "| agree (match: bfcl) |"), "|---|---|---:|---:|---:|---:|"]
    for (cat, kind), g in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        lines.append(f"| {cat} | {kind} | {g['n']} | {g['bfcl_pass']} | "
                     f"{g['agree'] / g['n']:.1%} | {g['agree_bfcl'] / g['n']:.1%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    with BfclData() as data:
        rows = agreement(data)
    print(table(rows))
    for rules in ("evalpipe", "match_bfcl"):
        bad = [r for r in rows if r["bfcl"] != r[rules]]
        print(f"\n{rules}: {len(bad)} disagreements of {len(rows)}")
        for r in bad[:40]:
            print(f"  {r['id']} {r['perturbation']}: BFCL {r['bfcl']} evalpipe {r[rules]} "
                  f"{str(r['output'])[:160]}")
