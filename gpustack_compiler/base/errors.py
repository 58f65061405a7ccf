"""The domain errors users can cause. Library code raises them; the command line alone decides what
exit code each becomes (gpustack_sim/cli/main.py)."""

from __future__ import annotations


class GpustackError(Exception):
    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message + (f" (hint: {self.hint})" if self.hint else "")

    def __reduce__(self):
        # An exception pickles its message alone by default; resolutions kept in the build cache hold some.
        return type(self), (self.message, self.hint)


class InputError(GpustackError):
    """Bad input: an argument, a run file, a data file, a name that does not exist."""


class CatalogError(GpustackError):
    """The catalog has errors; `findings` holds every one of them."""

    def __init__(self, message: str, hint: str | None = None, findings=None):
        super().__init__(message, hint)
        self.findings = findings

    def __reduce__(self):
        return type(self), (self.message, self.hint, self.findings)


class InfrastructureError(GpustackError):
    """Something outside the input failed: a server that does not answer, a disk that cannot be written."""


class ResolveError(InputError):
    """The scenario cannot be resolved as asked: an ambiguous or unknown selection, or a relation that
    cannot be evaluated (no fixed point, a complex value)."""


class ViolationError(GpustackError):
    """An assigned value outside what the catalog declares for its variable (a negative length, a fraction
    above 1): a finding about the input, exit 1, unless violations are allowed."""


class FindingError(GpustackError):
    """Well-formed input asking for what cannot be done (a replay that makes no progress): a finding, exit 1."""
