"""The fuzzing campaign kept in the project: mutators a hostile contributor or user would try on catalog
files, run files, assignments, validation CSVs, sweep grids, sites files, serving runs, observations and
protocols, and the judge of one outcome (no traceback,
exit code 0-3, every finding with file:line).

Each mutator takes the bytes of a file (or a text value) and a seeded `random.Random`, so a case is
reproduced from its seed. tests/test_fuzz.py draws cases with hypothesis (200 catalogs in CI);
benchmarks/fuzz.py runs thousands with plain seeds and reports the figures.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

# A preset in the mini catalog the catalog cases mutate (tests/helpers.py mini_catalog), so preset
# assignments are mutated too.
FUZZ_PRESET = """# yaml-language-server: $schema=../../schemas/presets.schema.json
presets:
  - name: fuzz_fixture
    description: values for the fuzzing campaign
    provenance: synthetic_fixture
    source: chosen
    references: [gpustack_fixture]
    assignments:
      training.t_compute: 1 s
      training.t_comm: {value: 0.5, units: s, sd: 0.1}
"""

# ---- hostile material ----------------------------------------------------------------------------

HOSTILE_EXPRESSIONS = [
    "__import__('os').system('touch /tmp/gpustack-pwned')",
    "().__class__.__base__.__subclasses__()",
    "(lambda: 1)()",
    "eval('1')",
    "open('/etc/passwd').read()",
    "9**9**9",
    "training.t_compute ** 1e400",
    "training.t_compute * unit('m**1e400')",
    "training.t_compute * unit('s**(1/0)')",
    "training.t_compute ** (10**400)",
    "(" * 5000 + "training.t_compute" + ")" * 5000,
    "training.t_compute" + " + training.t_compute" * 3000,
    "x" * 100_000,
    "training.t_cоmpute",  # a Cyrillic o: a homoglyph of a declared name
    "1e400 * unit('s')",
    "[training.t_compute]",
    "training.t_compute if training.t_comm else 0",
    "Piecewise((1, True))",
    "E + N + S + Q + beta + gamma",
    "training.t_compute; import os",
]

HOSTILE_UNITS = ["m**1e400", "s**1e300", "m**-1e400", "s**(1/1e-400)", "kg**13", "W**0.5**0.5", "1e400",
                 "s*" * 200 + "s", "m**nan", "__import__('os')", "ｓ", "h", "s/0", "s**(1/3)"]

HOSTILE_SCALARS = ["!!timestamp nope", "!!timestamp 2020-13-45", "!!int 0xzz", "!!float 1e400", "!!float x",
                   "!!binary '%%%'", "!!python/object/apply:os.system ['true']", "!!set {a, b}", ".nan", ".inf",
                   "-.inf", "1e400", "9" * 400, "-2e12", "５", "\u202e", "~", "[]", "{}", "!!omap [1]",
                   "!!str", "&a 1", "*a", "<<: *a"]

BILLION_LAUGHS = ("lol0: &a0 [lol]\n" + "".join(f"lol{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n"
                                                  for i in range(1, 10)))


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


# ---- byte-level mutators of a file ---------------------------------------------------------------

def byte_flips(data: bytes, rnd: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 8)):
        if buf:
            buf[rnd.randrange(len(buf))] ^= 1 << rnd.randrange(8)
    return bytes(buf)


def truncate(data: bytes, rnd: random.Random) -> bytes:
    return data[:rnd.randrange(len(data) + 1)]


def bom(data: bytes, rnd: random.Random) -> bytes:
    return b"\xef\xbb\xbf" + data


def crlf(data: bytes, rnd: random.Random) -> bytes:
    return data.replace(b"\n", b"\r\n")


def non_utf8(data: bytes, rnd: random.Random) -> bytes:
    choice = rnd.randrange(3)
    if choice == 0:
        return data.decode("utf-8", "replace").encode("utf-16")
    pos = rnd.randrange(len(data) + 1)
    return data[:pos] + (b"\xff\xfe" if choice == 1 else b"\xc3(") + data[pos:]


def hostile_expression(data: bytes, rnd: random.Random) -> bytes:
    expr = rnd.choice(HOSTILE_EXPRESSIONS)
    lines = _lines(data)
    at = [i for i, line in enumerate(lines) if line.lstrip().startswith((b"expression:", b"condition:"))]
    quoted = json.dumps(expr).encode()
    if at:
        i = rnd.choice(at)
        key = lines[i].split(b":", 1)[0]
        lines[i] = key + b": " + quoted
        return b"\n".join(lines)
    return data + b"\n# appended\nrelations:\n  - {name: training.fuzz, kind: identity, defines: training.t_step, " \
                  b"expression: " + quoted + b", description: x, references: [narayanan2021_megatron]}\n"


def _replace_value(data: bytes, rnd: random.Random, key_pattern: bytes, value: bytes) -> bytes:
    """`data` with the value of a random line whose key matches `key_pattern` replaced by `value`."""
    lines = _lines(data)
    at = [i for i, line in enumerate(lines) if re.match(key_pattern, line)]
    if not at:
        return data
    i = rnd.choice(at)
    lines[i] = lines[i].split(b":", 1)[0] + b": " + value
    return b"\n".join(lines)


def hostile_unit(data: bytes, rnd: random.Random) -> bytes:
    return _replace_value(data, rnd, rb"\s*(units|definition|unit):", json.dumps(rnd.choice(HOSTILE_UNITS)).encode())


def hostile_scalar(data: bytes, rnd: random.Random) -> bytes:
    """A value replaced by a tag, an anchor or alias, a non-finite or huge number, a full-width digit."""
    return _replace_value(data, rnd, rb"\s*-?\s*[a-z_]+:\s*\S", rnd.choice(HOSTILE_SCALARS).encode())


def deep_nesting(data: bytes, rnd: random.Random) -> bytes:
    depth = rnd.choice([50, 500, 5000, 50000])
    nest = b"[" * depth + b"]" * depth if rnd.random() < 0.5 else b"{a: " * depth + b"1" + b"}" * depth
    return data + b"\nnested: " + nest + b"\n"


def anchors(data: bytes, rnd: random.Random) -> bytes:
    return (BILLION_LAUGHS.encode() if rnd.random() < 0.5 else b"base: &b {x: 1}\nother: *b\n") + data


def _entry(lines: list[bytes], rnd: random.Random) -> tuple[int, int] | None:
    """The line span of a random list entry (`  - ...` up to the next one), or None when there is none."""
    starts = [i for i, line in enumerate(lines) if line.startswith(b"  - ")]
    if not starts:
        return None
    i = rnd.choice(starts)
    return i, next((j for j in starts if j > i), len(lines))


def duplicate_entry(data: bytes, rnd: random.Random) -> bytes:
    lines = _lines(data)
    span = _entry(lines, rnd)
    if span is None:
        return data + data
    i, end = span
    return b"\n".join(lines[:end] + lines[i:end] + lines[end:])


def delete_entry(data: bytes, rnd: random.Random) -> bytes:
    lines = _lines(data)
    span = _entry(lines, rnd)
    if span is None:
        return b""
    i, end = span
    return b"\n".join(lines[:i] + lines[end:])


def cycle(data: bytes, rnd: random.Random) -> bytes:
    """A relation defining an input of the step time from the step time (the mini catalog's names)."""
    return data + (b"\n  - name: training.t_compute.loop\n    kind: identity\n    defines: training.t_compute\n"
                   b"    expression: training.t_step\n    description: a cycle\n    references: [narayanan2021_megatron]\n")


def oversized(data: bytes, rnd: random.Random) -> bytes:
    from gpustack_compiler.base.limits import MAX_CATALOG_FILE_BYTES

    return data + b"\n" + b"# " + b"x" * (MAX_CATALOG_FILE_BYTES + rnd.randrange(1000)) + b"\n"


BYTE_MUTATORS = [byte_flips, truncate, bom, crlf, non_utf8, hostile_expression, hostile_unit, hostile_scalar,
                 deep_nesting, anchors, duplicate_entry, delete_entry, cycle, oversized]

# ---- file-system mutators: the file is replaced by something that is not a regular file --------


def as_fifo(path: Path, rnd: random.Random) -> None:
    path.unlink()
    os.mkfifo(path)


def as_symlink_loop(path: Path, rnd: random.Random) -> None:
    path.unlink()
    path.symlink_to(path.name)


def as_directory(path: Path, rnd: random.Random) -> None:
    path.unlink()
    path.mkdir()


def as_dangling_link(path: Path, rnd: random.Random) -> None:
    path.unlink()
    path.symlink_to(path.name + ".gone")


FILE_MUTATORS = [as_fifo, as_symlink_loop, as_directory, as_dangling_link]
CATALOG_MUTATORS = [m.__name__ for m in BYTE_MUTATORS + FILE_MUTATORS]
_BY_NAME = {m.__name__: m for m in BYTE_MUTATORS + FILE_MUTATORS}


def mutate_catalog(root: Path, mutator: str, seed: int) -> str:
    """Apply `mutator` to one of the catalog's files (chosen by the seed); the file's catalog path."""
    rnd = random.Random(seed)
    files = sorted(p for p in root.rglob("*.yaml") if p.is_file())
    path = rnd.choice(files)
    fn = _BY_NAME[mutator]
    if fn in FILE_MUTATORS:
        fn(path, rnd)
    else:
        path.write_bytes(fn(path.read_bytes(), rnd))
    return path.relative_to(root).as_posix()


# ---- documents a user writes: sites files, serving runs, observations, protocols -------------------

HOSTILE_QUANTITIES = ["0", "0 W", "0 Gbit/s", "1e-300 Gbit/s", "1e-320 W", "1e308 ms", "1e308 day", "-1 kW",
                      "1e400 W", ".nan", ".inf", "'５ kW'", "1 s", "1 W**1e400", "~", "[]", "{}", "9" * 400, "-0",
                      "1e-400 s", "'1 __import__(\"os\")'", "1e300", "-1", "0.5"]


def hostile_quantity(data: bytes, rnd: random.Random) -> bytes:
    """A scalar value replaced by a zero, tiny, huge, negative, non-finite or mistyped quantity."""
    return _replace_value(data, rnd, rb"\s*-?\s*[a-z_]+:\s*[-+0-9.'\"a-z]", rnd.choice(HOSTILE_QUANTITIES).encode())


DOCUMENT_MUTATORS = [byte_flips, truncate, bom, crlf, non_utf8, hostile_scalar, hostile_quantity, hostile_quantity,
                     hostile_quantity, deep_nesting, anchors, duplicate_entry, delete_entry, oversized]


def mutate_document(data: bytes, rnd: random.Random) -> bytes:
    return rnd.choice(DOCUMENT_MUTATORS)(data, rnd)


# kind -> the shipped document it mutates (relative to the repository)
DOCUMENTS = {"sites": "sites/example_curtailment.yaml", "serving": "runs/serve_llama70b_8xh100.yaml",
             "observation": "data/observations/smith2022_mtnlg.yaml", "protocol": "experiments/protocols/E001.yaml"}


def document_case(kind: str, rnd: random.Random, repo: Path, work: Path, build: Path) -> list[str]:
    """The `gpustack` arguments that read a mutated copy of the `kind` document (written under `work`)."""
    data = mutate_document((repo / DOCUMENTS[kind]).read_bytes(), rnd)
    base = ["--build-dir", str(build)]
    run = str(repo / "runs" / "llama70b_1024xh100.yaml")
    if kind == "protocol":
        folder = work / "experiments"
        (folder / "protocols").mkdir(parents=True)
        shutil.copy(repo / "experiments" / "protocols.lock", folder)
        shutil.copytree(repo / "experiments" / "sites", folder / "sites")
        for p in (repo / "experiments" / "protocols").glob("*.yaml"):
            shutil.copy(p, folder / "protocols")
        (folder / DOCUMENTS[kind].split("/", 1)[1]).write_bytes(data)
        return [*base, "experiment", "check", "--dir", str(folder)]
    path = work / Path(DOCUMENTS[kind]).name
    path.write_bytes(data)
    if kind == "sites":
        return [*base, "simulate", run, "--sites", str(path), "--days", "1"]
    if kind == "serving":
        return [*base, "estimate", str(path), "--samples", "10"]
    return [*base, "validate", str(path), "--samples", "10"]


# ---- values of commands --------------------------------------------------------------------------

ASSIGN_VALUES = ["1e400 W", "-1e400 W", "9" * 400 + " W", "５ W", "٥ W", "nan W", "inf W", "-1 W", "0 W", "1e-400 W",
                 "1 W**1e400", "1 m**1e400", "1 kW/s", "1 ", " W", "1 W W", "0x10 W", "1_000 W", "1e5 kW",
                 "1 " + "W*" * 300 + "W", "1 __import__('os')", "\x00 W", "1\u00a0W", "1 ｗ", "--1 W", "+1 W"]

GRID_VALUES = ["-1", "0", "1.5", "maybe", "1e400", "9" * 400, "nan", "inf", "true", "yes", "", ",", "1,,2", "５",
               "1" + ",1" * 50, "selective", "bogus", "0x4", "4 ", " 8", "1e3"]
GRID_AXES = ["tp", "pp", "dp", "micro_batch", "recompute", "sequence_parallel", "interleave", "cp"]

RUN_FIELD_VALUES = ["-1", "0", "1e400", "9" * 400, "1.5", "maybe", "~", "[]", "{}", "!!timestamp nope", ".nan",
                    "'５'", "-2e12 token", "1e400 token", "2e12 ｔoken", "1024", "500", "&a 1", "'x' * 9"]
RUN_FIELDS = ["layout.tp", "layout.pp", "layout.dp", "layout.micro_batch", "layout.global_batch", "model.hidden",
              "model.layers", "gpus", "tokens", "model.seq_len", "layout.zero_stage", "layout.sequence_parallel"]


def mutate_value(text: str, rnd: random.Random) -> str:
    """A command-line value: replaced by a hostile one, or flipped, cut or padded."""
    choice = rnd.randrange(4)
    if choice == 0:
        buf = bytearray(text.encode())
        if buf:
            buf[rnd.randrange(len(buf))] = rnd.randrange(32, 127)
        return buf.decode("ascii", "replace")
    if choice == 1:
        return text[:rnd.randrange(len(text) + 1)]
    if choice == 2:
        return text + rnd.choice(["0" * 300, "e400", "\u0665", " ", "**1e400", "/0"])
    return rnd.choice(ASSIGN_VALUES)


def mutate_csv(data: bytes, rnd: random.Random) -> bytes:
    """A validation CSV with a cell replaced by a hostile value, or a byte-level mutation."""
    if rnd.random() < 0.5:
        return rnd.choice([byte_flips, truncate, bom, crlf, non_utf8, duplicate_entry])(data, rnd)
    lines = data.decode("utf-8", "replace").split("\n")
    rows = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
    i = rnd.choice(rows)
    cells = lines[i].split(",")
    j = rnd.randrange(len(cells))
    cells[j] = rnd.choice(RUN_FIELD_VALUES + ASSIGN_VALUES).replace(",", ";")
    lines[i] = ",".join(cells)
    return "\n".join(lines).encode("utf-8", "replace")


# ---- judging an outcome --------------------------------------------------------------------------

@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float = 0.0

    def problems(self, catalog_name: str | None = None) -> list[str]:
        """What breaks the campaign's rules: a traceback, an exit code outside 0-3, a finding without a
        file:line in the catalog, an error that is not one line."""
        out = []
        if "Traceback" in self.stderr or "Traceback" in self.stdout:
            out.append("traceback")
        if self.code not in (0, 1, 2, 3):
            out.append(f"exit code {self.code}")
        if self.code in (2, 3) and not self.stderr.startswith("Error: "):
            out.append("an error that is not an `Error:` line")
        if catalog_name is not None and self.stdout.lstrip().startswith("{"):
            for f in json.loads(self.stdout)["findings"]:
                if not f["file"] or not f["file"].startswith(catalog_name + "/") or not (f["line"] or 0) >= 1:
                    out.append(f"finding without file:line in the catalog: {f}")
        return out


def copy_catalog(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    return dst
