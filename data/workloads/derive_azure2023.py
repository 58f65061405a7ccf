"""Derive the compact workload families azure_conv_2023.yaml and azure_code_2023.yaml from the Azure LLM
inference trace 2023 (CC-BY 4.0). Run once by hand with the two CSV files of Azure/AzurePublicDataset
(data/AzureLLMInferenceTrace_{conv,code}.csv); nothing reads the CSVs at run time.

    python3 data/workloads/derive_azure2023.py CONV.csv CODE.csv
"""

from __future__ import annotations

import csv
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml

QUANTILES = np.linspace(0, 1, 101)
HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def derive(path: Path, name: str, family: str, source: str) -> dict:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if rows[0] != HEADER:
        raise SystemExit(f"{path}: header {rows[0]} is not {HEADER}")
    t = np.array([datetime.fromisoformat(r[0][:26]).timestamp() for r in rows[1:]])
    t -= t[0]
    inp = np.array([int(r[1]) for r in rows[1:]])
    out = np.array([int(r[2]) for r in rows[1:]])
    minutes = np.bincount((t // 60).astype(int))
    gaps = np.diff(t)
    # Burstiness inside a minute: the coefficient of variation of the gaps with the minute's rate removed.
    rate = minutes[(t[1:] // 60).astype(int)] / 60.0
    scaled = gaps * rate
    return {
        "name": name,
        "family": family,
        "kind": "trace_derived",
        "description": f"Arrival process and request lengths of the Azure LLM inference trace 2023 ({family}), "
                       f"{len(t)} requests over {t[-1] / 60:.1f} minutes, as compact distributions.",
        "source": {"reference": "patel2024_splitwise_traces", "licence": "CC-BY 4.0",
                   "locator": f"Azure/AzurePublicDataset commit b469a11, data/AzureLLMInferenceTrace_{source}.csv: TIMESTAMP, ContextTokens, "
                              "GeneratedTokens of every row"},
        "arrivals": {"process": "trace_profile", "mean_rate_per_s": round(float(len(t) / t[-1]), 6),
                     "bin_s": 60, "relative_rate": [round(float(x), 6) for x in minutes / minutes.mean()],
                     "gap_cv": round(float(scaled.std() / scaled.mean()), 6)},
        "input_tokens": {"quantiles": [int(round(v)) for v in np.quantile(inp, QUANTILES)],
                         "mean": round(float(inp.mean()), 3)},
        "output_tokens": {"quantiles": [int(round(v)) for v in np.quantile(out, QUANTILES)],
                          "mean": round(float(out.mean()), 3)},
        "input_output_correlation": round(float(np.corrcoef(inp, out)[0, 1]), 4),
    }


def main() -> None:
    here = Path(__file__).parent
    for path, name, family, source in ((Path(sys.argv[1]), "azure_conv_2023", "chat", "conv"),
                                       (Path(sys.argv[2]), "azure_code_2023", "code", "code")):
        data = derive(path, name, family, source)
        text = ("# Derived by data/workloads/derive_azure2023.py from the Azure LLM inference trace 2023 (CC-BY 4.0;\n"
                "# attribution: Patel et al., Splitwise, ISCA 2024). Do not edit by hand.\n"
                + yaml.safe_dump(data, sort_keys=False, width=120))
        (here / f"{name}.yaml").write_text(text)


if __name__ == "__main__":
    main()
