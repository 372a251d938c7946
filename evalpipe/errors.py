"""Errors that reach the user as one clear message and an exit code.

Exit codes, for scripts (docs/runs.md): 0 finished, 2 bad input, 3 a regression
found by `compare --fail-on-regression`, 4 nothing the gate could judge (no pairs,
too few, grids that differ, a run mostly infra errors) or a judge that gave no verdict
at all (`evalpipe judge`), 129/130/143 interrupted by
SIGHUP/SIGINT (Ctrl-C)/SIGTERM, 1 anything else.
"""

from __future__ import annotations


class EvalpipeError(Exception):
    """A failure the user can act on; the CLI prints it and exits 1."""

    exit_code = 1


class InputError(EvalpipeError):
    """Bad input: names the file, line and field, and what was expected. Exit 2."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None, expected: str | None = None):
        self.message = message
        self.file, self.line, self.field, self.expected = file, line, field, expected
        where = ":".join(str(p) for p in (file, line) if p is not None)
        parts = [where] if where else []
        if field:
            parts.append(f"field '{field}'")
        parts.append(message)
        if expected:
            parts.append(f"expected {expected}")
        super().__init__(": ".join(parts))


class ModelUnavailableError(EvalpipeError):
    """A model cannot be loaded (no network, missing file, unknown alias)."""


class UnknownModelError(ModelUnavailableError):
    """A model id that names nothing evalpipe can find: not an alias, not an existing
    folder or .gguf file, not a Hub model in the local cache (and the Hub cannot be
    asked). Bad input, so a script can tell a typo from a crash: exit 2."""

    exit_code = 2


class InfraError(EvalpipeError):
    """The backend or the harness failed; samples get stop_reason infra_error."""


class StorageError(EvalpipeError):
    """The run directory cannot be written (full disk, read-only or unwritable
    folder); what was written before stays readable and the run resumes."""


class RegressionFound(EvalpipeError):
    """The regression gate found a regression. Exit 3."""

    exit_code = 3


class NotCompared(EvalpipeError):
    """The regression gate had nothing it could judge (no matched cells or questions,
    too few pairs, a run mostly infrastructure errors): never a silent pass. Exit 4."""

    exit_code = 4


class NoVerdict(EvalpipeError):
    """The judge answered but gave no verdict on any reply it was asked about
    (`evalpipe judge`): like a gate with nothing it could judge, never a silent pass.
    Exit 4."""

    exit_code = 4


class Interrupted(EvalpipeError):
    """SIGHUP, SIGINT or SIGTERM stopped the run; exit 128 + the signal number (129, 130,
    143)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class DataWarning(UserWarning):
    """Something in the files evalpipe reads or keeps was wrong and is worked around (a
    torn last record, a record written twice, a broken generation cache): a warning,
    never a stop. The command line prints each as one `warning:` line."""


class EngineWarning(UserWarning):
    """The local engine runs slower than this machine allows (a C kernel that a compiler
    failed to build or that did not load): torch's operations run instead. The command
    line prints each as one `warning:` line."""


__all__ = ["DataWarning", "EngineWarning", "EvalpipeError", "InfraError", "InputError",
           "Interrupted", "ModelUnavailableError", "NotCompared", "RegressionFound", "StorageError"]
