"""The one place the datacenter raises errors a user can cause (bad sites file, bad parameters).

Everything goes through `bad_input`, so renaming the domain error class is a one-line change."""

from __future__ import annotations

from gpustack_compiler.errors import UsageError


def bad_input(message: str, hint: str | None = None) -> UsageError:
    """A one-line error naming where the bad input is (file:line: field: what is wrong)."""
    return UsageError(message, hint)
