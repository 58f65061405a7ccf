"""A generated catalog of any size with the shape of the real one: layered systems, diamonds,
roots with families, variants and constraints. Deterministic for a seed.

    python benchmarks/synthetic_catalog.py OUT_DIR --variables 10000 --relations 7000
"""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

ROOT_FILES = ("units.yaml", "constants.yaml", "references.yaml")
REAL_CATALOG = Path(__file__).resolve().parent.parent / "catalog"
UNITS = ["s", "W", "J", "FLOP", "B", "USD", "token", "1"]
SYSTEMS = 10
PER_FILE = 500


def generate(out: Path, n_variables: int, n_relations: int, seed: int = 0) -> Path:
    """Write a valid catalog to `out` (replaced). Relations define distinct variables; the rest are roots."""
    if n_relations > n_variables:
        raise ValueError("each relation defines its own variable: need relations <= variables")
    rng = random.Random(seed)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in ROOT_FILES:
        shutil.copy(REAL_CATALOG / name, out / name)
    systems = [f"s{i}" for i in range(SYSTEMS)]
    (out / "systems.yaml").write_text(
        "# yaml-language-server: $schema=../schemas/systems.schema.json\nsystems:\n"
        + "".join(f"  - {{name: {s}, prefix: {s}, description: synthetic system {s}}}\n" for s in systems))
    n_roots = n_variables - n_relations
    names = [f"{systems[i % SYSTEMS]}.v{i:06d}" for i in range(n_variables)]
    unit = {n: rng.choice(UNITS) for n in names}
    files: dict[str, list[list[str]]] = {}

    def emit(system: str, text: str) -> None:
        bucket = files.setdefault(system, [[]])
        if len(bucket[-1]) >= PER_FILE:
            bucket.append([])
        bucket[-1].append(text)

    for i, n in enumerate(names):
        root = (f"\n    root: {{category: scenario_boundary, family: fam{i % 37}}}" if i < n_roots else "")
        emit(n.split(".")[0], f"  - name: {n}\n    units: \"{unit[n]}\"\n    description: synthetic variable {i}\n"
                              f"    assumptions: [positive]\n    references: [gpustack_fixture]{root}\n")
    rel_files: dict[str, list[list[str]]] = {}
    for j in range(n_relations):
        target = names[n_roots + j]
        pool = names[: n_roots + j]
        k = rng.randint(1, 4)
        inputs = sorted(set(rng.choice(pool[-2000:] if rng.random() < 0.7 else pool) for _ in range(k)))
        terms = []
        for x in inputs:
            terms.append(f"{x} * unit('{unit[target]}') / unit('{unit[x]}')")
        expr = " + ".join(terms) if rng.random() < 0.6 else " * ".join(
            [terms[0]] + [f"({x} / unit('{unit[x]}'))" for x in inputs[1:]])
        system = target.split(".")[0]
        body = f"  - name: {target}.rel\n    kind: identity\n    defines: {target}\n    expression: \"{expr}\"\n" \
               f"    description: synthetic relation {j}\n    references: [gpustack_fixture]\n"
        bucket = rel_files.setdefault(system, [[]])
        if len(bucket[-1]) >= PER_FILE:
            bucket.append([])
        bucket[-1].append(body)
    for system in systems:
        (out / system).mkdir()
        for idx, chunk in enumerate(files.get(system, [])):
            (out / system / f"vars{idx:03d}.yaml").write_text(
                "# yaml-language-server: $schema=../../schemas/system.schema.json\nvariables:\n" + "".join(chunk))
        for idx, chunk in enumerate(rel_files.get(system, [])):
            (out / system / f"rels{idx:03d}.yaml").write_text(
                "# yaml-language-server: $schema=../../schemas/system.schema.json\nrelations:\n" + "".join(chunk))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--variables", type=int, default=10000)
    parser.add_argument("--relations", type=int, default=7000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    generate(args.out, args.variables, args.relations, args.seed)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
