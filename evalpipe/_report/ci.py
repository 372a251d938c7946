"""A comparison as CI systems show it: JUnit XML and a Markdown step summary.

Both hold one entry per matched cell (then the pooled row) and gated metric
(compare.gate_entries): a regression is a failed test, a metric no pair applies to
is skipped, a comparison the gate could not judge skips every test with its reason,
and one --strict refused is an error on every test. The figures that could be
computed are in each entry either way, so a refused night still shows what changed.

Text from the runs (cell ids, run ids, reasons) is data: the XML is built with
xml.etree (which escapes markup) after each character XML 1.0 cannot hold is written
as a visible escape (escape.xml_chars, XML's rule among the report's output kinds);
the summary's text follows the Markdown rule (escape.md, markdown_table).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from evalpipe._report.compare import Comparison, GateEntry, gate_entries, summary_line
from evalpipe._report.escape import md, md_code, xml_chars

SUITE = "evalpipe compare"


def junit_xml(cmp: Comparison) -> bytes:
    """The comparison as a JUnit XML report (UTF-8, with its declaration)."""
    entries = gate_entries(cmp)
    if not entries:  # nothing was paired: one test carries the verdict
        reason = summary_line(cmp).removeprefix("verdict: ")
        status = "refused" if cmp.refused else "not compared" if cmp.not_compared else "passed"
        entries = [GateEntry(SUITE, "verdict", status, reason, reason, [])]
    counts = {"tests": len(entries),
              "failures": sum(e.status == "regressed" for e in entries),
              "errors": sum(e.status == "refused" for e in entries),
              "skipped": sum(e.status in ("not compared", "no pairs") for e in entries)}
    root = _element("testsuites", name=SUITE, time="0", **counts)
    suite = _sub(root, "testsuite", name=f"{SUITE}: {cmp.run_a} -> {cmp.run_b}", time="0",
                 **counts)
    properties = _sub(suite, "properties")
    for name, value in (("run_a", cmp.run_a), ("run_b", cmp.run_b), ("path_a", cmp.path_a),
                        ("path_b", cmp.path_b), ("threshold", cmp.threshold),
                        ("verdict", summary_line(cmp))):
        _sub(properties, "property", name=name, value=value)
    for e in entries:
        case = _sub(suite, "testcase", classname=e.cell, name=e.metric, time="0")
        if e.status == "regressed":
            _sub(case, "failure", type="regression", message=e.reason).text = xml_chars(e.delta)
        elif e.status == "refused":
            _sub(case, "error", type="refused", message=e.reason).text = xml_chars(e.delta)
        elif e.status in ("not compared", "no pairs"):
            _sub(case, "skipped", message=e.reason)
        _sub(case, "system-out").text = xml_chars(f"{e.status}: {e.delta}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _element(tag: str, **attributes: Any) -> ET.Element:
    return ET.Element(tag, {k: xml_chars(v) for k, v in attributes.items()})


def _sub(parent: ET.Element, tag: str, **attributes: Any) -> ET.Element:
    return ET.SubElement(parent, tag, {k: xml_chars(v) for k, v in attributes.items()})


GATE = {"passed": "ok", "improved": "improved", "regressed": "REGRESSION",
        "no pairs": "no pairs", "not compared": "not compared", "refused": "refused"}


def step_summary(cmp: Comparison) -> str:
    """The comparison as a Markdown step summary (what GitHub Actions shows from
    $GITHUB_STEP_SUMMARY): the verdict, then one row per cell and metric."""
    from evalpipe._report.tables import markdown_table

    icon = (":no_entry:" if cmp.refused else ":warning:" if cmp.not_compared
            else ":x:" if cmp.regressions else ":white_check_mark:")
    rows = [[e.cell, e.metric, *e.figures[:5], GATE[e.status]] for e in gate_entries(cmp)]
    out = [f"### evalpipe compare: {md_code(cmp.run_a)} -> {md_code(cmp.run_b)}\n",
           f"{icon} {md(summary_line(cmp))}\n"]
    if rows:
        out.append(markdown_table(["cell", "metric", "n", "A %", "B %", "diff pts", "95% CI",
                                   "gate"], rows))
    return "\n".join(out) + "\n"
