"""Errors users can cause, each with its exit code; mapped to one `Error:` line in one place."""

from __future__ import annotations

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3


class GpustackError(Exception):
    exit_code = EXIT_FINDINGS

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(GpustackError):
    exit_code = EXIT_USAGE


class FindingsError(GpustackError):
    """The catalog has errors; the findings were already printed."""

    exit_code = EXIT_FINDINGS


class InfrastructureError(GpustackError):
    exit_code = EXIT_INFRA
