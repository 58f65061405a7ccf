"""Spectral analysis of a site's power series: the energy of its fluctuations in a frequency band
(Welch's method, SciPy), for a site that must keep oscillations out of a danger band."""

from __future__ import annotations

import numpy as np

from gpustack_compiler.base.errors import InputError


def band_energy(power_w: np.ndarray, resolution_s: float, band_hz: tuple[float, float], segment_s: float) -> float:
    """Variance of `power_w` (W^2) carried by frequencies in `band_hz`: Welch's power spectral density
    (Hann segments of `segment_s`, half overlapping, each segment's mean removed) integrated over the band.
    The series must be defined everywhere (no NaN) and sampled fast enough for the band's upper edge."""
    from scipy.signal import welch

    lo, hi = band_hz
    fs = 1.0 / resolution_s
    if not 0 <= lo < hi:
        raise InputError(f"band {band_hz!r} Hz is not an interval of frequencies")
    if hi > fs / 2:
        raise InputError(f"band edge {hi:g} Hz is above the Nyquist frequency {fs / 2:g} Hz of a series sampled "
                         f"every {resolution_s:g} s")
    if np.isnan(power_w).any():
        raise InputError("the power series is undefined (NaN) in some bins: a phase ran without a node power")
    n = min(len(power_w), max(2, round(segment_s * fs)))
    freq, psd = welch(power_w, fs=fs, nperseg=n, detrend="constant", scaling="density")
    inside = (freq >= lo) & (freq <= hi)
    if inside.sum() < 2:
        raise InputError(f"segments of {n / fs:g} s resolve the band {lo:g}-{hi:g} Hz in fewer than two frequencies")
    return float(np.trapezoid(psd[inside], freq[inside]))
