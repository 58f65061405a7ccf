"""Measured evidence as data (`data/observations/*.yaml`, schemas/observations.schema.json): a value with
its unit and uncertainty, the catalog variable it measures, the run it was measured on, the source with
a locator, and whether it is calibration or evaluation data (never both).

Observations are immutable once added: `data/observations.lock` holds the SHA-256 of each one's
canonical content (and of the run file it names), so a changed value needs a new id. An observation that
must be restated (a setup it left unstated, a corrected assignment) is never edited or removed: a new one
names it in `supersedes`, the old one stays in its file and in the lock, and every consumer (calibration,
validation, listings) skips a superseded observation and says how many it skipped (`in_force`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from gpustack_compiler.base.errors import InputError

from .run import RunSpec
from .run_file import load_run
from .serve_run import ServeRunSpec

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
KEY_PATTERN = r"^[a-z][a-z0-9_]*$"
LOCK_NAME = "observations.lock"
LOCK_FORMAT = 2  # 2: hashes over the fields the file gives (1 also hashed the schema's defaults)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class Uncertainty(_Strict):
    """The interval the true value lies in, in the measured value's unit."""

    kind: Annotated[Literal["rounding", "instrument", "reported_range", "seed_spread"], Field(description=(
        "rounding: the source prints the value to this precision and states no error; instrument: the "
        "measuring instrument's stated error; reported_range: the source reports a range; seed_spread: the "
        "mean of independent seeds, low and high two standard errors either side."))]
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> Uncertainty:
        if not self.low <= self.high:
            raise ValueError("needs low <= high")
        return self


class Measured(_Strict):
    value: Annotated[float, Field(gt=0, description="The measured value, as the source reports it.")]
    units: Annotated[str, Field(min_length=1, description="Catalog units, e.g. 's', 'TFLOP/s', '1'.")]
    uncertainty: Uncertainty

    @model_validator(mode="after")
    def _inside(self) -> Measured:
        if not self.uncertainty.low <= self.value <= self.uncertainty.high:
            raise ValueError("the value must lie within its uncertainty (low <= value <= high)")
        return self


class Measures(_Strict):
    variable: Annotated[str, Field(min_length=1, description="The catalog variable measured.")]
    flop_convention: Annotated[Literal["model", "hardware", "megatron_recompute"] | None, Field(description=(
        "How FLOPs were counted, for FLOP rates and utilizations (catalog/bindings/measured_runs.yaml, "
        "flop_conventions, says which variable goes with which convention)."))] = None


class Source(_Strict):
    reference: Annotated[str, Field(min_length=1, description="A key of catalog/references.yaml.")]
    locator: Annotated[str, Field(min_length=1, description="Where in the source: page, table, row.")]
    licence: Annotated[str, Field(min_length=1, description="Licence of the source, as it states it.")]
    file: Annotated[str | None, Field(description="The file the value was read from, where one is at hand.")] = None
    sha256: Annotated[str | None, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of that file.")] = None

    @model_validator(mode="after")
    def _checksum_names_a_file(self) -> Source:
        if self.sha256 is not None and self.file is None:
            raise ValueError("a sha256 needs the `file` it is the checksum of")
        return self


class Assumption(_Strict):
    """A run field the source does not report, and why it has the value the run gives it."""

    field: Annotated[str, Field(min_length=1, description=(
        "Dotted run field, e.g. layout.micro_batch, or assign.NAME for an assignment."))]
    reason: Annotated[str, Field(min_length=1)]

    @model_validator(mode="after")
    def _a_run_field(self) -> Assumption:
        top = self.field.split(".")[0]
        if top not in RunSpec.model_fields and top not in ServeRunSpec.model_fields:
            raise ValueError(f"`{self.field}` is not a field of the run (schemas/run.schema.json, or "
                             "schemas/serve_run.schema.json for a serving run)")
        return self


class Decision(_Strict):
    """Observations sharing a group are alternative layouts of one model on the same hardware: decision
    regret compares the layout the model ranks first with the best measured one."""

    group: Annotated[str, Field(pattern=ID_PATTERN)]
    better: Literal["higher", "lower"]


def _run_kind(data) -> str:
    kind = data.get("kind") if isinstance(data, dict) else getattr(data, "kind", None)
    return "serving" if kind == "serving" else "training"


# A serving run says `kind: serving`; its errors then name serving fields only.
InlineRun = Annotated[Annotated[RunSpec, Tag("training")] | Annotated[ServeRunSpec, Tag("serving")],
                      Discriminator(_run_kind)]


class Component(_Strict):
    """A kernel or memory benchmark measured on its own (a GEMM of one shape, an attention kernel, a STREAM
    kernel): the presets and values that set it up, and the hardware generation whose calibration preset
    it informs. Component measurements are calibration data only; end-to-end runs never are fitted to."""

    generation: Annotated[str, Field(pattern=KEY_PATTERN, description=(
        "Hardware generation (a key of catalog/bindings/calibration_fit.yaml, components.generations)."))]
    presets: Annotated[list[str], Field(min_length=1, description="Presets in order (later ones win).")]
    variants: dict[str, str] = Field(default_factory=dict, description="Variant selections, NAME -> KEY.")
    assign: dict[str, float | str] = Field(default_factory=dict, description=(
        "The benchmark's setup, NAME -> value in declared units or '8192 token'."))


class LearningProvenance(_Strict):
    """What a local learning measurement was made from and on, enough to make it again."""

    config: Annotated[str, Field(min_length=1, description="The learning config, relative to the repository.")]
    config_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    code_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description=(
        "SHA-256 over the sources of gpustack_sim/learning/ that trained the model."))]
    catalog_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="The catalog's content hash.")]
    corpus: Annotated[str, Field(min_length=1)]
    corpus_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    machine: Annotated[str, Field(min_length=1, description="Processor, cores and operating system.")]
    software: Annotated[str, Field(min_length=1, description="Python, JAX and optax versions.")]


class LearningSetup(_Strict):
    """One condition of the local learning workload (`gpustack learn`, gpustack_sim/learning/): the catalog
    roots that set it (catalog/learning/conditions.yaml), its seeds and each seed's curve. Unlike a
    component benchmark it may be evaluation data: whole conditions are held out to score the learning model."""

    condition: Annotated[str, Field(pattern=ID_PATTERN)]
    method: Literal["data_parallel", "local_sgd", "diloco"]
    assign: Annotated[dict[str, float], Field(description="learning.* roots -> value in declared units.")]
    seeds: Annotated[list[int], Field(min_length=1)]
    seed_values: Annotated[list[float], Field(min_length=1, description=(
        "The measured value of each seed, in the order of `seeds`."))]
    curves: Annotated[list[str], Field(min_length=1, description=(
        "Each seed's curve (loss against tokens and FLOPs), content-addressed JSON, relative to this file's folder."))]
    provenance: LearningProvenance

    @model_validator(mode="after")
    def _one_per_seed(self) -> LearningSetup:
        if not len(self.seeds) == len(self.seed_values) == len(self.curves):
            raise ValueError("seeds, seed_values and curves give one entry per seed")
        return self


class Observation(_Strict):
    id: Annotated[str, Field(pattern=ID_PATTERN, description="Unique and permanent: a changed value is a new id.")]
    split: Annotated[Literal["calibration", "evaluation"], Field(description=(
        "calibration: may be fitted to (`gpustack calibrate`); evaluation: only scored (`gpustack validate`)."))]
    panel: Annotated[str, Field(pattern=KEY_PATTERN, description=(
        "The published table or set the observation belongs to; coverage and ranking are scored per panel."))]
    measured: Measured
    measures: Measures
    run: Annotated[InlineRun | None, Field(description=(
        "The run, inline: a training run (schemas/run.schema.json), or a serving run with `kind: serving` "
        "(schemas/serve_run.schema.json)."))] = None
    run_file: Annotated[str | None, Field(description="Or a run file, relative to this file's folder.")] = None
    component: Annotated[Component | None, Field(description="Or a component benchmark (calibration only).")] = None
    learning: Annotated[LearningSetup | None, Field(description=(
        "Or a condition of the local learning workload."))] = None
    assumptions: list[Assumption] = Field(default_factory=list)
    decision: Decision | None = None
    source: Source
    note: str | None = None
    inadmissible: Annotated[str | None, Field(min_length=1, description=(
        "Why the measurement fails its admissibility check (a diverged run, too few seeds, too sparse a "
        "curve): recorded and locked like any other, never fitted to or scored."))] = None
    supersedes: Annotated[str | None, Field(pattern=ID_PATTERN, description=(
        "The id of an earlier observation this one restates (same split; the earlier one stays, locked, and "
        "is skipped by calibration and validation). One successor per id; the id must be among the "
        "observations loaded with this one (keep a successor in its predecessor's file)."))] = None

    @model_validator(mode="after")
    def _one_run(self) -> Observation:
        if sum(x is not None for x in (self.run, self.run_file, self.component, self.learning)) != 1:
            raise ValueError("give exactly one of `run`, `run_file`, `component` and `learning`")
        if self.component is not None and self.split != "calibration":
            raise ValueError("a component benchmark is calibration data (split: calibration)")
        return self


class ObservationFile(_Strict):
    """data/observations/*.yaml: each observation complete in itself, so its content hash covers exactly
    what it says."""

    observations: Annotated[list[Observation], Field(min_length=1)]


@dataclass(frozen=True)
class Loaded:
    """One observation as read: where it is, its content hash, and its run."""

    obs: Observation
    file: Path
    line: int
    sha256: str
    run: RunSpec | ServeRunSpec | None  # None for a component benchmark or a learning condition

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def canonical_sha256(data) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_file(path: Path) -> list[Loaded]:
    """Every observation of one file; a problem is one line naming the file, line and field."""
    from gpustack_compiler.base.documents import read_mapping, validate
    from gpustack_compiler.base.yaml_lines import line_at

    data = read_mapping(path, "observation file")
    top = validate(ObservationFile, data, str(path))
    out = []
    for i, obs in enumerate(top.observations):
        run, extra = obs.run, b""
        if obs.run_file is not None:
            run_path = path.parent / obs.run_file
            run = load_run(run_path)
            extra = run_path.read_bytes()
        # What the file says, not the defaults the run-file schema fills in: a new optional run field must not
        # change the content of every observation already locked.
        digest = canonical_sha256(obs.model_dump(mode="json", exclude_unset=True))
        if extra:
            # A run file can change under an observation that names it: its bytes are part of the content.
            digest = hashlib.sha256(f"{digest}\0".encode() + extra).hexdigest()
        out.append(Loaded(obs, path, line_at(data, ("observations", i)), digest, run))
    return out


def observation_files(paths: list[Path]) -> list[Path]:
    """Files given, folders expanded to their *.yaml files in name order."""
    out = []
    for p in paths:
        if p.is_dir():
            found = sorted(q for q in p.glob("*.yaml") if q.is_file())
            if not found:
                raise InputError(f"{p}: a folder with no observation files (*.yaml) in it")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise InputError(f"{p}: no such file or folder")
    return out


def load_observations(paths: list[Path]) -> list[Loaded]:
    """Observations of the given files and folders; ids must be unique across them."""
    out: list[Loaded] = []
    seen: dict[str, Loaded] = {}
    for path in observation_files(paths):
        for item in load_file(path):
            first = seen.get(item.obs.id)
            if first is not None:
                raise InputError(f"{item.where}: observation id `{item.obs.id}` is also used at {first.where}")
            seen[item.obs.id] = item
            out.append(item)
    supersession_problems(out, raise_first=True)
    return out


def supersession_problems(items: list[Loaded], raise_first: bool = False) -> list[str]:
    """What is wrong with the `supersedes` links among these observations, one line each naming the file
    and line of the successor: an id that is not among them, an id superseded twice, a successor of the
    other split, an observation superseding itself or a cycle (which would leave none of them in force)."""
    by_id = {i.obs.id: i for i in items}
    problems: list[str] = []
    successor: dict[str, Loaded] = {}
    for item in items:
        old = item.obs.supersedes
        if old is None:
            continue
        if old == item.obs.id:
            problems.append(f"{item.where}: supersedes: observation `{old}` cannot supersede itself")
        elif old not in by_id:
            problems.append(f"{item.where}: supersedes: no observation `{old}` among those loaded (an observation "
                            "supersedes one that exists; keep the successor in its predecessor's file)")
        elif old in successor:
            problems.append(f"{item.where}: supersedes: observation `{old}` is already superseded by "
                            f"`{successor[old].obs.id}` at {successor[old].where} (one successor per id)")
        elif by_id[old].obs.split != item.obs.split:
            problems.append(f"{item.where}: supersedes: `{old}` is {by_id[old].obs.split} data and "
                            f"`{item.obs.id}` {item.obs.split} data; a successor keeps its predecessor's split")
        else:
            successor[old] = item
    for item in items:
        # Follow the links back from each successor: returning to it is a cycle.
        seen, cur = {item.obs.id}, item.obs.supersedes
        while cur is not None and cur in by_id and cur != item.obs.id:
            if cur in seen:
                break
            seen.add(cur)
            cur = by_id[cur].obs.supersedes
        if cur == item.obs.id and item.obs.supersedes not in (None, item.obs.id):
            problems.append(f"{item.where}: supersedes: `{item.obs.id}` is superseded, through "
                            f"`{item.obs.supersedes}`, by itself (a cycle leaves none of them in force)")
    if problems and raise_first:
        raise InputError(problems[0], f"{len(problems)} supersession problem(s)" if len(problems) > 1 else
                         "`supersedes` names the id of an earlier observation, at most one successor each")
    return problems


def superseded_by(items: list[Loaded]) -> dict[str, str]:
    """id of each superseded observation -> id of the one that supersedes it."""
    return {i.obs.supersedes: i.obs.id for i in items if i.obs.supersedes is not None}


def in_force(items: list[Loaded]) -> tuple[list[Loaded], list[Loaded]]:
    """The observations still in force, and those a later one supersedes (skipped by every consumer)."""
    gone = superseded_by(items)
    return [i for i in items if i.obs.id not in gone], [i for i in items if i.obs.id in gone]


def admissible(items: list[Loaded]) -> tuple[list[Loaded], list[Loaded]]:
    """The observations that pass their admissibility check, and those recorded as inadmissible (never
    fitted to or scored; a consumer says how many it set aside)."""
    return [i for i in items if i.obs.inadmissible is None], [i for i in items if i.obs.inadmissible is not None]


def require_split(items: list[Loaded], split: str, command: str) -> None:
    """Refuse observations of the other split, naming them: data fitted into the model cannot grade it,
    and graded data may not be fitted to."""
    wrong = [i for i in items if i.obs.split != split]
    if wrong:
        shown = ", ".join(f"{i.obs.id} ({i.where})" for i in wrong[:5]) + (" ..." if len(wrong) > 5 else "")
        raise InputError(f"{command} takes {split} observations only; {len(wrong)} given are "
                         f"{wrong[0].obs.split} data: {shown}",
                         "calibration and evaluation data never overlap (docs/evaluation.md)")


# ---- the lock --------------------------------------------------------------------------------------

def read_lock(path: Path) -> dict[str, str]:
    """id -> SHA-256 of the observation's content when it was added."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != LOCK_FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        return {str(k): str(v) for k, v in data["observations"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: unreadable lock file ({exc})", "restore it from version control") from None


def lock_problems(items: list[Loaded], lock: dict[str, str]) -> list[str]:
    """Observations whose content no longer matches the lock, and locked ids no longer present."""
    present = {i.obs.id: i for i in items}
    problems = [f"{i.where}: observation `{i.obs.id}` changed since it was locked; observations are "
                "immutable: give the changed one a new id" for i in items if i.obs.id in lock and lock[i.obs.id] != i.sha256]
    problems += [f"observation `{k}` is in the lock but in no observation file (observations are never "
                 "removed)" for k in sorted(lock) if k not in present]
    return problems


def update_lock(path: Path, items: list[Loaded]) -> list[str]:
    """Add the ids not locked yet; refuse (InputError) if a locked observation changed or disappeared.
    Returns the ids added."""
    from gpustack_compiler.base.atomic import write_text

    lock = read_lock(path)
    problems = lock_problems(items, lock)
    if problems:
        raise InputError(problems[0], f"{len(problems)} problem(s); a locked observation is never edited")
    added = sorted(i.obs.id for i in items if i.obs.id not in lock)
    if added:
        lock.update({i.obs.id: i.sha256 for i in items})
        text = json.dumps({"format": LOCK_FORMAT, "observations": dict(sorted(lock.items()))}, indent=2) + "\n"
        write_text(path, text)
    return added


def _register_schema() -> None:
    # The compiler owns `gpustack schema` but may not import the engine: the engine registers its file.
    from gpustack_compiler.build.schema import SCHEMA_FILES

    SCHEMA_FILES.setdefault("observations.schema.json", ObservationFile)


_register_schema()
