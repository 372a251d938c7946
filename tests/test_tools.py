"""The tool registry: schema checks before running, bounds, limits, order, user tools."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path

import pytest

from evalpipe.errors import InputError
from evalpipe.records import ToolCall
from evalpipe.tools import BUILTIN_TOOLS, TOOLSETS, Tool, ToolLimits, Toolset, build_toolset
from evalpipe.tools.builtin import MAX_FIB_N, tool_from_callable
from evalpipe.tools.registry import MAX_ARGUMENT_CHARS, result_text


def one(toolset: Toolset, name: str, arguments) -> dict:
    return toolset.execute([ToolCall(name, arguments, id="c0")])[0].to_dict()


@pytest.fixture(scope="module")
def math_tools() -> Toolset:
    return build_toolset("math")


def test_toolsets_and_schemas(math_tools):
    assert build_toolset("none").names == []
    assert build_toolset("calculator").names == ["add", "subtract", "multiply", "divide"]
    assert set(math_tools.names) == {tool.name for tool in TOOLSETS["math"]}
    for schema in math_tools.schemas():
        assert schema["type"] == "function"
        fn = schema["function"]
        assert fn["name"] in BUILTIN_TOOLS and fn["description"]
        assert fn["parameters"]["additionalProperties"] is False
    with pytest.raises(InputError):
        build_toolset("everything")


@pytest.mark.parametrize("name,arguments,result", [
    ("add", {"a": 12, "b": 30}, 42),
    ("add", {"a": 0.1, "b": 0.2}, 0.3),
    ("subtract", {"a": 5, "b": 7.5}, -2.5),
    ("multiply", {"a": 1234, "b": 5678}, 7006652),
    ("divide", {"a": 10, "b": 2}, 5),
    ("power", {"base": 2, "exponent": 10}, 1024),
    ("sqrt", {"x": 81}, 9),
    ("fib", {"n": 10}, 55),
    ("fib", {"n": 0}, 0),
])
def test_builtin_results(math_tools, name, arguments, result):
    event = one(math_tools, name, arguments)
    assert event["error"] is None and event["result"] == result
    assert event["call_id"] == "c0" and event["ms"] >= 0


@pytest.mark.parametrize("arguments,fragment", [
    ({"a": 1}, "'b' is a required property"),
    ({"a": 1, "b": 2, "c": 3}, "Additional properties"),
    ({"a": "1", "b": 2}, "is not of type 'number'"),
    ({"a": True, "b": 2}, "is not of type 'number'"),
    ({"a": None, "b": 2}, "is not of type 'number'"),
    ({"a": [1], "b": {"x": 1}}, "is not of type 'number'"),
])
def test_schema_is_checked_before_running(math_tools, arguments, fragment):
    event = one(math_tools, "add", arguments)
    assert event["error"] == "invalid_arguments" and event["result"] is None
    assert fragment in event["error_message"]


def test_arguments_that_are_not_an_object(math_tools):
    event = math_tools.execute([ToolCall("add", [1, 2])])[0]  # type: ignore[arg-type]
    assert event.error == "invalid_arguments"


def test_unknown_tool_names_what_is_offered(math_tools):
    event = one(math_tools, "rm", {"path": "/"})
    assert event["error"] == "unknown_tool"
    assert "add" in event["error_message"] and "fib" in event["error_message"]
    assert one(build_toolset("none"), "add", {"a": 1, "b": 2})["error"] == "unknown_tool"


def test_oversized_arguments_are_refused(math_tools):
    event = one(math_tools, "add", {"a": 1, "b": "9" * (MAX_ARGUMENT_CHARS + 1)})
    assert event["error"] == "invalid_arguments" and "limit" in event["error_message"]


@pytest.mark.parametrize("name,arguments,kind,fragment", [
    ("fib", {"n": MAX_FIB_N + 1}, "invalid_arguments", "maximum"),
    ("fib", {"n": -1}, "invalid_arguments", "minimum"),
    ("fib", {"n": 2.5}, "invalid_arguments", "integer"),
    ("power", {"base": 10, "exponent": 400}, "tool_exception", "digits"),
    ("power", {"base": 0, "exponent": -1}, "tool_exception", "ZeroDivisionError"),
    ("power", {"base": -8, "exponent": 0.5}, "tool_exception", "real"),
    ("divide", {"a": 1, "b": 0}, "tool_exception", "ZeroDivisionError"),
    ("sqrt", {"x": -4}, "tool_exception", "negative"),
    ("multiply", {"a": 1e308, "b": 10}, "tool_exception", "finite"),
])
def test_bounds(math_tools, name, arguments, kind, fragment):
    event = one(math_tools, name, arguments)
    assert event["error"] == kind
    assert fragment in event["error_message"]
    assert "error" in json.loads(result_text(math_tools.execute(
        [ToolCall(name, arguments)])[0]))


def test_fib_at_its_limit_is_exact(math_tools):
    event = one(math_tools, "fib", {"n": MAX_FIB_N})
    assert event["error"] is None and isinstance(event["result"], int)
    assert len(str(event["result"])) == 209


def test_slow_tool_times_out_and_the_run_goes_on():
    release, finished = threading.Event(), threading.Event()

    def slow(x: int) -> int:
        release.wait(60)  # the tool runs until the test releases it; the bound ends a failure
        finished.set()
        return x

    tool = Tool("slow", "Sleeps.", {"type": "object", "properties": {"x": {"type": "integer"}},
                                     "required": ["x"]}, slow)
    toolset = Toolset({"slow": tool}, ToolLimits(timeout_s=0.2))
    event = toolset.execute([ToolCall("slow", {"x": 1}, id="c")])[0]
    returned_while_the_tool_ran = not finished.is_set()
    release.set()
    assert returned_while_the_tool_ran  # the loop did not wait for the tool
    assert event.error == "timeout" and event.result is None
    assert "within 0.2 s" in json.loads(result_text(event))["error"]


def test_long_results_are_truncated_and_flagged():
    tool = Tool("long", "Long text.", {"type": "object", "properties": {}}, lambda: "x" * 10_000)
    listy = Tool("listy", "Long list.", {"type": "object", "properties": {}},
                 lambda: list(range(5000)))
    toolset = Toolset({"long": tool, "listy": listy}, ToolLimits(max_result_chars=100))
    for name in ("long", "listy"):
        event = toolset.execute([ToolCall(name, {})])[0]
        assert event.truncated and event.error is None
        assert isinstance(event.result, str) and event.result.endswith("[truncated]")
        assert len(event.result) <= 100 + len(" [truncated]")
    short = Toolset({"long": tool}, ToolLimits(max_result_chars=20_000))
    assert not short.execute([ToolCall("long", {})])[0].truncated


def test_a_raising_tool_is_reported():
    def broken() -> int:
        raise RuntimeError("disk on fire")

    toolset = Toolset({"broken": Tool("broken", "x", {"type": "object"}, broken)})
    event = toolset.execute([ToolCall("broken", {})])[0]
    assert event.error == "tool_exception" and "disk on fire" in event.error_message


def test_parallel_calls_come_back_in_call_order():
    # Call i finishes only after call i + 1 has: they end in reverse order, and come back
    # in call order all the same.
    ended = [threading.Event() for _ in range(4)]

    def step(i: int) -> int:
        if i + 1 < len(ended):
            ended[i + 1].wait(60)  # the bound only ends a failed test
        ended[i].set()
        return i

    tool = Tool("step", "Steps.", {"type": "object", "properties": {"i": {"type": "integer"}},
                                   "required": ["i"]}, step)
    toolset = Toolset({"step": tool, **build_toolset("calculator").tools},
                      ToolLimits(timeout_s=60))  # a bound for a failed test, never reached
    calls = [ToolCall("step", {"i": i}, id=f"c{i}") for i in range(4)]
    calls.append(ToolCall("add", {"a": 1, "b": 2}, id="sum"))
    events = toolset.execute(calls)
    assert [e.call_id for e in events] == ["c0", "c1", "c2", "c3", "sum"]
    assert [e.result for e in events] == [0, 1, 2, 3, 3]
    # A reply with an unknown tool runs its calls one after another, in call order.
    calls = [ToolCall("add", {"a": 1, "b": 1}, id="a"), ToolCall("nope", {}, id="bad"),
             ToolCall("add", {"a": 2, "b": 2}, id="b")]
    events = toolset.execute(calls)
    assert [(e.call_id, e.result, e.error) for e in events] == [
        ("a", 2, None), ("bad", None, "unknown_tool"), ("b", 4, None)]
    # Four calls that each wait for all four to be running: in series the barrier breaks.
    meet = threading.Barrier(4, timeout=60)  # the bound only ends a failed test
    toolset = toolset.with_tools(Tool("meet", "Meets.", {"type": "object", "properties": {}},
                                      lambda: meet.wait() >= 0))
    together = toolset.execute([ToolCall("meet", {}, id=f"p{i}") for i in range(4)])
    assert [(e.call_id, e.result, e.error) for e in together] == [
        (f"p{i}", True, None) for i in range(4)]


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_tools_for_test.py").write_text(textwrap.dedent('''
        def convert_currency(amount: float, rate: float, round_to: int = 2) -> float:
            """Convert an amount with an exchange rate."""
            return round(amount * rate, round_to)

        def shout(text: str, loud: bool = True) -> str:
            return text.upper() if loud else text

        def untyped(x):
            return x
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_tools_for_test"


def test_user_tools_from_module_and_function(user_module):
    tool = tool_from_callable(f"{user_module}:convert_currency")
    assert tool.name == "convert_currency"
    assert tool.description == "Convert an amount with an exchange rate."
    assert tool.parameters == {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "rate": {"type": "number"},
                       "round_to": {"type": "integer"}},
        "required": ["amount", "rate"], "additionalProperties": False}
    toolset = build_toolset("calculator", custom=[f"{user_module}:convert_currency",
                                                  f"{user_module}:shout"])
    assert toolset.names[-2:] == ["convert_currency", "shout"]
    events = toolset.execute([ToolCall("convert_currency", {"amount": 10, "rate": 1.25}),
                              ToolCall("shout", {"text": "hi"}),
                              ToolCall("shout", {"text": 3})])
    assert [e.result for e in events[:2]] == [12.5, "HI"]
    assert events[2].error == "invalid_arguments"
    assert build_toolset("none", custom=[f"{user_module}:shout"]).names == []


@pytest.mark.parametrize("spec", ["no_such_module_xyz:f", "json:no_such_function", "json",
                                  "my_tools_for_test:untyped"])
def test_bad_user_tool_specs_are_input_errors(user_module, spec):
    with pytest.raises(InputError):
        tool_from_callable(spec)


def test_result_text():
    toolset = build_toolset("calculator")
    ok, bad = toolset.execute([ToolCall("add", {"a": 1, "b": 2}), ToolCall("x", {})])
    assert result_text(ok) == "3"
    assert json.loads(result_text(bad)) == {"error": bad.error_message}


FUTURE_TOOLS = '''
from __future__ import annotations


def capital(country: str) -> str:
    """The capital of a country."""
    return {"France": "Paris", "Vietnam": "Hanoi"}.get(country, "unknown")


def area(width: float, height: float) -> float:
    return width * height
'''


def test_a_module_with_postponed_annotations_works(tmp_path, monkeypatch):
    """`from __future__ import annotations` turns hints into strings: they are resolved
    (it failed with "no simple type hint")."""
    (tmp_path / "future_tools.py").write_text(FUTURE_TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    tool = tool_from_callable("future_tools:capital")
    assert tool.parameters["properties"] == {"country": {"type": "string"}}
    assert tool_from_callable("future_tools:area").parameters["required"] == ["width", "height"]


def test_a_bad_custom_tool_names_custom_tools_with_file_and_line(tmp_path, user_module):
    from evalpipe.config import load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("questions: [q.jsonl]\nmodels: [m]\ncustom_tools:\n"
                   f"  - {user_module}:shout\n  - {user_module}:untyped\n")
    with pytest.raises(InputError) as err:
        load_config(cfg)
    message = str(err.value)
    assert message.startswith(f"{cfg}:5: field 'custom_tools[1]'")
    assert "parameter 'x' has no simple type hint" in message


def test_the_command_imports_a_tool_module_from_the_current_folder(tmp_path):
    """As `python -m evalpipe` does; the `evalpipe` script alone did not (PYTHONPATH=.
    was needed). The entry script sits elsewhere, as an installed console script does."""
    import os
    import subprocess
    import sys

    work, scripts = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    scripts.mkdir()
    (scripts / "evalpipe_entry.py").write_text("from evalpipe.cli import main\nmain()\n")
    (work / "future_tools.py").write_text(FUTURE_TOOLS)
    (work / "q.jsonl").write_text(json.dumps({
        "id": "c1", "suite": "geo", "question": "What is the capital of France?",
        "answer": "Paris", "gold_calls": [{"id": "s1", "name": "capital",
                                           "arguments": {"country": "France"}}]}) + "\n")
    (work / "c.yaml").write_text("questions: [q.jsonl]\nmodels: [m]\ntoolsets: [none]\n"
                                 "custom_tools: ['future_tools:capital']\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)  # this checkout only
    res = subprocess.run([sys.executable, str(scripts / "evalpipe_entry.py"), "validate",
                          "--config", "c.yaml"], cwd=work, env=env, capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "ok: no problems found" in res.stdout
    # without the config the tool is unknown, and the message says what to add
    res = subprocess.run([sys.executable, str(scripts / "evalpipe_entry.py"), "validate",
                          "q.jsonl"], cwd=work, env=env, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 2 and "unknown tool 'capital'" in res.stderr
    assert "a custom tool needs --config" in res.stderr


def test_validate_runs_a_gold_plan_through_a_custom_tool(tmp_path, monkeypatch):
    from evalpipe._validate import validate

    (tmp_path / "future_tools.py").write_text(FUTURE_TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [{"id": "c1", "suite": "geo", "question": "Capital of France?", "answer": "Paris",
             "gold_calls": [{"id": "s1", "name": "capital", "arguments": {"country": "France"}}]},
            {"id": "c2", "suite": "geo", "question": "Capital of Vietnam?", "answer": "Paris",
             "gold_calls": [{"id": "s1", "name": "capital",
                             "arguments": {"country": "Vietnam"}}]},
            {"id": "a1", "suite": "geo", "question": "Area of 2 by 3?", "answer": 6,
             "gold_calls": [{"id": "s1", "name": "area", "arguments": {"width": 2, "height": 3}}]}]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = validate(tmp_path / "q.jsonl", custom_tools=["future_tools:capital",
                                                           "future_tools:area"])
    assert len(problems) == 1 and ":2: field 'answer'" in problems[0]
    assert "gives 'Hanoi'" in problems[0]
