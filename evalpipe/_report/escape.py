"""Text is data: one escaping rule per output kind, applied by each writer to every cell
and every value it places in its output, never per field.

Any model id, suite name, cell id, question id, answer or reply may hold text that an
output would otherwise obey: a spreadsheet formula, Markdown or HTML markup, a LaTeX
command, a `</script>` that ends a JSON block, mathtext in a plot label. Each function
here turns text into a literal of one output kind, so that it is shown as written:

| kind | function | what it neutralises |
|---|---|---|
| CSV | `csv_cell` | a text cell a spreadsheet would run as a formula (OWASP's list) |
| Markdown | `md`, `md_code` | table pipes, line breaks, emphasis, code, links, HTML, math |
| LaTeX | `tex` | the ten specials, `[`/`*` after a row break, ligatures, line breaks |
| HTML | `html_text`, `json_script` | markup and attributes; a JSON block that ends its script |
| JSON | `json_text` | a lone surrogate no UTF-8 file can hold |
| XML (JUnit) | `xml_chars` | characters XML 1.0 cannot hold (xml.etree escapes markup) |
| plots (matplotlib) | `plot_text`, `PLOT_RC` | mathtext, TeX, legend-hidden labels |

Every kind writes a lone surrogate (a half of a UTF-16 pair that no UTF-8 file can hold)
as the visible escape `\\udXXX`, so that writing the output never fails on it.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def _visible_surrogates(text: str) -> str:
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# -- CSV -----------------------------------------------------------------------------------

# What makes a spreadsheet (Excel, LibreOffice, Google Sheets) read a cell as a formula or
# a command, per OWASP's CSV-injection guidance: = + - @, tab, carriage return, line feed,
# NUL, and the full-width forms of = + - @ that some spreadsheets fold to ASCII. Leading
# spaces are looked past: an import that trims them would see the formula.
_FORMULA_START = re.compile("^[ \u00a0]*[=+\\-@\t\r\n\x00\uff1d\uff0b\uff0d\uff20]")
_PLAIN_NUMBER = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")


def csv_cell(value: Any) -> Any:
    """A value as a CSV writer should write it: a number stays a number (written as
    Python writes it, so -0.05 is read back as -0.05); None is an empty cell; text that a
    spreadsheet would run as a formula gets a leading apostrophe (the cell then shows
    '=1+1 as text), and text that is only a number, such as -3, is left as it is."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else value
    text = _visible_surrogates(str(value))
    if _FORMULA_START.match(text) and not _PLAIN_NUMBER.match(text):
        return "'" + text
    return text


# -- Markdown (GitHub) ---------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"\r\n|[\r\n]|[\\`*~|$<]|\](?=[(\[])|&(?=#?\w+;)|_")


def md(text: Any) -> str:
    """Text as literal GitHub Markdown, inline or in a table cell: backslash, backtick,
    `*`, `~`, `|`, `$` (math) and `<` (HTML, autolinks) are escaped; `]` where a link
    would follow (so no link or image forms), `&` where an entity would, `_` where it
    could open or close emphasis (not inside a word: `site_rag` stays as it is); a line
    break becomes `<br>`. Our own figures, `62.5% (10/16) [41.2, 80.1]`, come out
    unchanged."""
    text = _visible_surrogates(str(text))

    def one(m: re.Match[str]) -> str:
        ch = m.group()
        if ch in ("\r\n", "\r", "\n"):
            return "<br>"
        if ch == "_":
            i = m.start()
            inside = (0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum())
            return "_" if inside else "\\_"
        return "\\" + ch

    return _MD_SPECIAL.sub(one, text)


def md_code(text: Any) -> str:
    """Text as a Markdown code span outside tables: fenced with one backtick more than the
    longest run inside it, so nothing in it is read as markup; line breaks become spaces."""
    text = re.sub(r"\r\n|[\r\n]", " ", _visible_surrogates(str(text)))
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# -- LaTeX ---------------------------------------------------------------------------------

_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
        "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
        "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
        "`": r"\textasciigrave{}", "'": r"\textquotesingle{}", '"': r"\textquotedbl{}",
        "[": "{[}", "]": "{]}"}
_TEX_SPECIAL = re.compile(r"\r\n|[\r\n\t\f\v]|[\\&%$#_{}~^<>|`'\"\[\]]|-(?=-)|,(?=,)|^\*"
                          r"|[\x00-\x08\x0e-\x1f\x7f]|[\ud800-\udfff]")


def tex(text: Any) -> str:
    """Text as literal LaTeX for a table cell or a caption (T1 or OT1 fonts): the ten
    specials; `<`, `>`, `|` and quotes as text symbols (not the inverted marks OT1 prints,
    nor T1's guillemet and quote ligatures); `[` and `]` braced (a row break or booktabs'
    rules would read a cell starting with `[` as their option), as is a leading `*`;
    `--` and `,,` kept apart (not dashes or a low quote); a line break as a space;
    control characters and lone surrogates as visible \\uXXXX escapes."""

    def one(m: re.Match[str]) -> str:
        ch = m.group()
        if ch in _TEX:
            return _TEX[ch]
        if ch in ("-", ","):
            return ch + "{}"
        if ch == "*":
            return "{*}"
        if ch in ("\r\n", "\r", "\n", "\t", "\f", "\v"):
            return " "
        return rf"\textbackslash{{}}u{ord(ch):04x}"

    return _TEX_SPECIAL.sub(one, str(text))


# -- HTML ----------------------------------------------------------------------------------

def html_text(text: Any) -> str:
    """Text for an HTML element or a quoted attribute value: & < > " ' escaped."""
    return html.escape(_visible_surrogates(str(text)), quote=True)


def json_script(data: Any) -> str:
    """JSON for a <script type="application/json"> block: every `<` escaped, so no string
    can close the block or open a comment; U+2028/U+2029 and lone surrogates as JSON
    escapes (the page reads the same strings back)."""
    text = json_text(data)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


# -- JSON and XML --------------------------------------------------------------------------

def json_text(data: Any, indent: int | None = None) -> str:
    """JSON with non-ASCII kept as it is, but a lone surrogate written as its JSON escape
    (`\\ud800`), which reads back as the same string and, unlike the raw character, can
    be written to a UTF-8 file."""
    return _visible_surrogates(json.dumps(data, indent=indent, ensure_ascii=False,
                                          default=str))


# Characters XML 1.0 cannot hold at all, escaped or not: controls but tab, LF and CR;
# lone surrogates; U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_chars(text: Any) -> str:
    """Text an XML 1.0 document can hold (JUnit XML, written with xml.etree, which
    escapes the markup): each character XML cannot hold as a visible \\uXXXX escape."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", str(text))


# -- plots (matplotlib) --------------------------------------------------------------------

PLOT_RC = {"text.parse_math": False, "text.usetex": False}  # `$...$` is text, not math


def plot_text(text: Any) -> str:
    """A label, title or tick as matplotlib draws it as written (with PLOT_RC): a leading
    underscore, which would hide a legend entry, is kept visible by a zero-width space
    before it; lone surrogates as visible escapes."""
    text = _visible_surrogates(str(text))
    return "\u200b" + text if text.startswith("_") else text


# -- prose with values in it -----------------------------------------------------------------

@dataclass(frozen=True)
class Inline:
    """How one output kind writes a sentence: its words and values as text, and names
    (a cell id, a config key) as code. Notes written once with an `Inline` read right in
    every kind."""

    text: Callable[[Any], str]
    code: Callable[[Any], str]


PLAIN = Inline(str, lambda value: f"`{value}`")  # text with `code` marks (the viewer's notes)
MARKDOWN = Inline(md, md_code)
HTML = Inline(html_text, lambda value: f"<code>{html_text(value)}</code>")


__all__ = ["HTML", "MARKDOWN", "PLAIN", "PLOT_RC", "Inline", "csv_cell", "html_text",
           "json_script", "json_text", "md", "md_code", "plot_text", "tex", "xml_chars"]
