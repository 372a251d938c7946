"""Check question sets before a run: every problem in every file, not just the first.

`validate_paths` returns human-readable errors, one per problem, each written
as "file:line: field 'x': what is wrong: expected ..." (the form of
`InputError`). An empty list means every file is valid.

Checks, per record:
- the schema (`evalpipe.questions.parse_question`), including $refs that must
  name an earlier step;
- ids unique within a file;
- every tool named in gold_calls exists (the built-in tools, search_site, the
  config's custom tools and the question's own);
- executing gold_calls with the real tools (toolset "math") gives the gold
  answer, with a relative tolerance of 1e-9;
- every gold passage names a document of the corpus, ends within its text,
  and contains the answer or one of its aliases. A number may be written with
  thousands separators ("7,006,652", "7.006.652", "7 006 652") and with a
  decimal point or a Vietnamese decimal comma ("1,92").
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

from evalpipe.corpus import CHUNK_SIZE
from evalpipe.errors import InputError
from evalpipe.questions import (
    BFCL_SOURCE,
    DEFAULT_LIMITS,
    Question,
    QuestionLimits,
    QuestionSource,
    as_source,
    load_questions,
    parse_question,
    question_sources,
    read_records,
)
from evalpipe.tools.registry import Tool

REL_TOL = 1e-9
_GROUP_SEP = r"[,.\u00a0\u202f\u2009 ]?"


def _error(file: str, line: int | None, field: str | None, message: str,
           expected: str | None = None) -> str:
    return str(InputError(message, file=file, line=line, field=field, expected=expected))


def known_tools() -> set[str]:
    from evalpipe.tools import BUILTIN_TOOLS

    return set(BUILTIN_TOOLS) | {"search_site"}


def _plain_digits(value: float) -> str:
    """A number without exponent: 1e-05 -> '0.00001', 3.0 -> '3'."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return str(abs(value))
    text = format(Decimal(repr(abs(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def number_pattern(value: float) -> re.Pattern[str]:
    """A regex finding `value` as written in prose: optional thousands
    separators (",", ".", spaces), "." or "," as the decimal mark, and no digit
    glued on either side (so 16 is not found in "160" or "1.16")."""
    digits = _plain_digits(value)
    integer, _, fraction = digits.partition(".")
    head = len(integer) % 3 or 3
    groups = [integer[:head]] + [integer[i:i + 3] for i in range(head, len(integer), 3)]
    body = _GROUP_SEP.join(groups)
    if fraction:
        body += r"[.,]" + fraction + "0*"
    sign = r"[-\u2212]\s?" if value < 0 else ""
    return re.compile(r"(?<!\d)(?<!\d[.,])" + sign + body + r"(?![.,]?\d)")


def _fold(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


def span_contains_answer(span_text: str, q: Question) -> bool:
    """The span holds the gold answer (a number as written, or the text) or an alias."""
    folded = _fold(span_text)
    for alias in q.aliases:
        if alias.strip() and _fold(alias.strip()) in folded:
            return True
    answer = q.answer
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return bool(number_pattern(answer).search(span_text))
    return bool(str(answer).strip()) and _fold(str(answer).strip()) in folded


def _is_plain_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)


def _check_plan(q: Question, file: str, line: int, custom: dict[str, Tool] | None = None
                ) -> list[str]:
    from evalpipe.plans import execute_gold_plan
    from evalpipe.tools import BUILTIN_TOOLS, build_toolset
    from evalpipe.tools.schema_only import schema_tool

    custom = custom or {}
    errors = []
    own = {schema_tool(t).name for t in q.tools}  # the question's own schema-only tools
    # the built-in tools, the config's custom tools and the question's own schema-only ones
    tools = known_tools() | set(custom) | own
    for i, step in enumerate(q.gold_calls or []):
        if step["name"] not in tools:
            suggestion = difflib.get_close_matches(step["name"], sorted(tools), n=1)
            hint = f" (did you mean {suggestion[0]!r}?)" if suggestion else ""
            errors.append(_error(file, line, f"gold_calls[{i}].name",
                                 f"unknown tool {step['name']!r}{hint}",
                                 "one of " + ", ".join(sorted(tools))
                                 + ("" if custom else "; a custom tool needs --config")))
    if errors or not q.gold_calls:
        return errors
    runnable = set(BUILTIN_TOOLS) | set(custom)
    if any(step["name"] not in runnable or step["name"] in own for step in q.gold_calls):
        # search_site needs a retriever, and a schema-only tool (BFCL's "multiply" too) has
        # no implementation: such a plan cannot be replayed here
        return []
    run = execute_gold_plan(q.gold_calls, build_toolset("math").with_tools(*custom.values()))
    for why in run.failed.values():  # the first failure; the steps after it need it
        return [_error(file, line, "gold_calls", f"the gold plan fails: {why}",
                       "a plan the real tools can execute")]
    final = run.results[q.gold_calls[-1]["id"]]
    if q.answer_type in ("calls", "abstain"):
        return []  # graded by the calls alone, or no answer to reach
    if q.answer_type == "text" and not _is_plain_number(final):
        # a custom tool may return text: it must be the answer or an alias
        wanted = {_fold(str(a)).strip() for a in (q.answer, *q.aliases)}
        if _fold(str(final)).strip() in wanted:
            return []
        return [_error(file, line, "answer",
                       f"got {q.answer!r} but executing gold_calls gives {final!r}",
                       "the result of the last gold step, or one of the aliases")]
    try:
        gold = float(q.answer)
    except (TypeError, ValueError):
        return [_error(file, line, "answer",
                       f"got {q.answer!r} but the gold plan gives {final!r}",
                       "the result of the last gold step")]
    if not isinstance(final, (int, float)) or isinstance(final, bool) or not _close(float(final),
                                                                                   gold):
        return [_error(file, line, "answer",
                       f"got {q.answer!r} but executing gold_calls gives {final!r}",
                       "the result of the last gold step (relative tolerance 1e-9)")]
    return []


class _Corpus:
    """The corpus, loaded on first use; a load failure is reported once per span."""

    def __init__(self, root: str):
        self.root = root
        self._texts: dict[str, str] | None = None
        self.problem: str | None = None

    def texts(self) -> dict[str, str]:
        if self._texts is None:
            from evalpipe.corpus import load_corpus

            try:
                self._texts = {d.id: d.text for d in load_corpus(self.root)}
            except InputError as exc:
                self._texts, self.problem = {}, str(exc)
        return self._texts


def _check_passages(q: Question, file: str, line: int, corpus: _Corpus) -> list[str]:
    errors: list[str] = []
    if not q.gold_passages:
        return errors
    texts = corpus.texts()
    for i, span in enumerate(q.gold_passages):
        where = f"gold_passages[{i}]"
        if corpus.problem:
            errors.append(_error(file, line, f"{where}.doc",
                                 f"cannot check the span: {corpus.problem}",
                                 f"a corpus folder at {corpus.root!r}"))
            continue
        text = texts.get(span["doc"])
        if text is None:
            close = difflib.get_close_matches(span["doc"], list(texts), n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            errors.append(_error(file, line, f"{where}.doc",
                                 f"unknown document {span['doc']!r}{hint}",
                                 f"a document id relative to {corpus.root}"))
            continue
        if span["end"] > len(text):
            errors.append(_error(file, line, f"{where}.end",
                                 f"{span['end']} is past the end of {span['doc']!r}",
                                 f"at most {len(text)} (its length in NFC characters)"))
            continue
        if q.answer_type == "abstain":
            continue
        piece = text[span["start"]:span["end"]]
        if not span_contains_answer(piece, q):
            shown = piece if len(piece) <= 80 else piece[:77] + "..."
            wanted = [repr(q.answer)] + [repr(a) for a in q.aliases]
            errors.append(_error(file, line, where,
                                 f"span {span['start']}-{span['end']} of {span['doc']!r} "
                                 f"({shown!r}) does not contain the answer",
                                 "a span holding " + " or ".join(wanted)))
    return errors


# --- gold completeness (warnings) ---------------------------------------------------------

# Question words too common to tie a statement to a question.
_STOP_WORDS = frozenset({
    "how", "many", "much", "what", "which", "who", "when", "where", "does", "did", "the", "and",
    "for", "with", "after", "before", "bao", "nhiêu", "nào", "gì", "ai", "mấy",
})
_STATEMENT = re.compile(r"\n|(?<=[.!?])\s")
_UNIT = re.compile(r"\s*([^\W\d_]+|%)")
MIN_SHARED_WORDS = 2  # rare question words a statement must share to state the fact
COMMON_SHARE = 0.1  # a word in more than this share of chunks is not rare...
MIN_COMMON = 20  # ...nor in more than this many (a small corpus has no common words)


def _unit_after_answer(text: str, q: Question) -> str | None:
    """The word right after a numeric answer in text ("418 cơ sở" -> "cơ"), "" for none."""
    if not isinstance(q.answer, (int, float)):
        return None
    m = number_pattern(q.answer).search(text)
    if not m:
        return None
    w = _UNIT.match(text, m.end())
    if not w:
        return ""
    from evalpipe.scoring.answers.normalize import text_key
    return w.group(1) if w.group(1) == "%" else text_key(w.group(1))


def gold_warnings(path: str | Path | QuestionSource, corpus_root: str = "datasets/site",
                  chunk_size: int = CHUNK_SIZE, limits: QuestionLimits = DEFAULT_LIMITS
                  ) -> list[str]:
    """Chunks that state a question's answer but that no gold passage covers.

    A chunk states the answer when one of its statements (a line or a sentence)
    holds the answer or an alias (a number followed by the same word as in a gold
    passage: "418 cơ sở") and at least MIN_SHARED_WORDS of the question's rare
    words. Retrieving such a chunk would be scored a miss, so the gold is likely
    incomplete. One warning per chunk: "file:line: gold_passages: ... doc:start-end"."""
    from evalpipe.corpus import chunk_corpus, load_corpus
    from evalpipe.scoring.answers.normalize import text_key
    from evalpipe.scoring.retrieval_metrics import covers

    try:
        questions = load_questions(path if isinstance(path, QuestionSource) else str(path),
                                   limits)
        docs = load_corpus(corpus_root)
    except InputError:
        return []  # validate() reports these as errors
    chunks = chunk_corpus(docs, chunk_size)
    texts = {d.id: d.text for d in docs}
    frequency: dict[str, int] = {}
    for c in chunks:
        for w in set(text_key(c.text).split()):
            frequency[w] = frequency.get(w, 0) + 1
    limit = max(COMMON_SHARE * len(chunks), MIN_COMMON)
    out = []
    for q in questions:
        if not q.gold_passages or q.answer_type == "abstain":
            continue
        rare = {w for w in text_key(q.question).split()
                if frequency.get(w, 0) <= limit and w not in _STOP_WORDS}
        numeric = isinstance(q.answer, (int, float)) and not isinstance(q.answer, bool)
        units = ({_unit_after_answer(texts.get(g["doc"], "")[g["start"]:g["end"]], q)
                  for g in q.gold_passages} if numeric else set())
        spans = [(g["doc"], g["start"], g["end"]) for g in q.gold_passages]
        gold_docs = {g["doc"] for g in q.gold_passages}
        for c in chunks:
            if any(covers((c.doc, c.start, c.end), g) for g in spans):
                continue
            chunk_words = set(text_key(c.text).split())
            for statement in _STATEMENT.split(c.text):
                if not statement.strip() or not span_contains_answer(statement, q):
                    continue
                if numeric and _unit_after_answer(statement, q) not in units:
                    continue
                words = set(text_key(statement).split())
                kind = ""
                if statement.lstrip().startswith("|"):  # a table row reads with its header
                    words |= set(text_key(_table_header(texts.get(c.doc, ""), c.start
                                                        + c.text.find(statement))).split())
                    kind = "a table row, with its header, "
                if c.doc in gold_docs and len(rare & chunk_words) >= MIN_SHARED_WORDS:
                    # the post the gold is in: its other chunks speak of the same thing
                    words |= chunk_words
                    kind = "another chunk of the gold's post, "
                if len(rare & words) >= MIN_SHARED_WORDS:
                    shown = statement.strip()
                    shown = shown if len(shown) <= 80 else shown[:77] + "..."
                    line = q.source.rsplit(":", 1)[1] if q.source else "?"
                    out.append(f"{as_source(path).path}:{line}: gold_passages: {q.id}: the answer "
                               f"{q.answer!r} also occurs in {kind}{c.doc}:{c.start}-{c.end} "
                               f"({shown!r}), which no gold passage covers")
                    break
    return out


def _table_header(text: str, at: int) -> str:
    """The first row of the markdown table whose row starts at `at` in the text."""
    lines = text[:max(at, 0)].split("\n")
    header = ""
    for line in reversed(lines[:-1] if lines and not lines[-1].strip() else lines):
        if not line.lstrip().startswith("|"):
            break
        header = line
    return header


def gold_warnings_paths(paths: list[str | dict[str, Any] | QuestionSource],
                        corpus_root: str = "datasets/site",
                        limits: QuestionLimits = DEFAULT_LIMITS) -> list[str]:
    """gold_warnings for files, folders (their *.jsonl files) and mapped sources."""
    out = []
    for source in question_sources(paths):
        out.extend(gold_warnings(source, corpus_root, limits=limits))
    return out


def validate_file(path: str | Path | dict[str, Any] | QuestionSource,
                  corpus: _Corpus | str = "datasets/site",
                  custom: dict[str, Tool] | None = None,
                  limits: QuestionLimits = DEFAULT_LIMITS) -> list[str]:
    """Every problem in one question file (a path, or a config's {path, fields, values}
    entry); `custom`: the config's custom tools by name. Read as `run` reads it
    (questions.read_records, under the same limits), every bad record named."""
    if isinstance(corpus, str):
        corpus = _Corpus(corpus)
    source = as_source(path)
    file = source.path
    if not Path(file).exists() and not file.startswith(BFCL_SOURCE):
        return [_error(file, None, None, "file not found", "a question file or folder")]
    questions: list[tuple[int, Question]] = []
    problems: list[InputError] = []
    records = 0
    try:
        for number, record in read_records(source, problems, limits):
            records += 1
            try:
                questions.append((number, parse_question(record, file=file, line=number)))
            except InputError as exc:
                problems.append(exc)
    except InputError as exc:  # the file as a whole: unreadable, unsupported, bad mapping
        problems.append(exc)
    errors = [str(e) for e in problems]
    if not records and not errors:
        errors.append(_error(file, None, None, "no questions", "at least one record"))

    seen: dict[str, int] = {}
    for number, q in questions:
        if q.id in seen:
            errors.append(_error(file, number, "id", f"duplicate id {q.id!r} (first on line "
                                                     f"{seen[q.id]})", "ids unique within a file"))
        else:
            seen[q.id] = number
        errors.extend(_check_plan(q, file, number, custom))
        errors.extend(_check_passages(q, file, number, corpus))
    return sorted(errors, key=_line_of)


def _line_of(message: str) -> tuple[int, str]:
    m = re.match(r"^.*?:(\d+):", message)
    return (int(m.group(1)) if m else 0, message)


def validate_paths(paths: list[str | dict[str, Any] | QuestionSource],
                   corpus_root: str = "datasets/site",
                   custom_tools: Iterable[str] = (),
                   limits: QuestionLimits = DEFAULT_LIMITS) -> list[str]:
    """Every problem in the given question files (paths, or a config's {path, fields,
    values} entries); folders expand to their *.jsonl files.
    `custom_tools`: the config's `package.module:function` tools, which gold plans may
    call (and which are run to check them).

    Returns an empty list when everything is valid."""
    from evalpipe.tools.builtin import tool_from_callable

    corpus = _Corpus(corpus_root)
    custom = {t.name: t for t in (tool_from_callable(spec, field=f"custom_tools[{i}]")
                                  for i, spec in enumerate(custom_tools))}
    errors: list[str] = []
    for given in paths:
        sources = question_sources([given])
        if not sources:
            errors.append(_error(as_source(given).path, None, None,
                                 "folder holds no question files", "*.jsonl files"))
        for source in sources:
            errors.extend(validate_file(source, corpus, custom, limits))
    return errors


def validate(paths: str | Path | Iterable[str | Path | dict[str, Any] | QuestionSource], *,
             corpus: str | Path = "datasets/site", custom_tools: Iterable[str] = (),
             limits: QuestionLimits = DEFAULT_LIMITS) -> list[str]:
    """Every problem in question files or folders, one line each; [] when valid.
    `custom_tools`: a config's custom tools, which gold plans may call; `limits`: the
    sizes the files are read under (a config's `question_limits`)."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    return validate_paths([p if isinstance(p, (dict, QuestionSource)) else str(p) for p in items],
                          corpus_root=str(corpus),
                          custom_tools=custom_tools, limits=limits)
