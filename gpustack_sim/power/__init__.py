"""A GPU's clock, power and throughput under a board power cap, resolved through the catalog."""

from .cap import CAP_FIGURES, CapResponse, power_under_cap

__all__ = ["CAP_FIGURES", "CapResponse", "power_under_cap"]
