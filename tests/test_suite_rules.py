"""Rules the test suite keeps about itself: no test decides pass or fail on the clock."""

from __future__ import annotations

import re
from pathlib import Path

import hypothesis

TESTS = Path(__file__).parent
# A read of the real clock or a real sleep, in test code or in a script a test runs.
CLOCK = re.compile(r"\btime\.(time|perf_counter|monotonic|sleep)\(|(?<![\w.])sleep\(")


def test_hypothesis_examples_have_no_deadline():
    # Hypothesis fails an example that takes over 200 ms by default: on a loaded machine
    # that is the clock deciding. conftest.py turns the deadline off for every test.
    assert hypothesis.settings.default.deadline is None


def test_every_clock_read_in_the_tests_says_why_it_decides_nothing():
    """A test may read the clock or sleep only to bound a wait or to provoke a race, never
    to decide pass or fail, and a comment on the line or at most three lines above says
    which."""
    unexplained = []
    for path in sorted(TESTS.glob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            if not CLOCK.search(line) or line.lstrip().startswith(("def ", "#")):
                continue
            above = lines[max(0, number - 4):number - 1]
            if "#" not in line and not any(a.lstrip().startswith("#") for a in above):
                unexplained.append(f"{path.name}:{number}: {line.strip()}")
    assert unexplained == []
