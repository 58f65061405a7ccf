"""The learning config (`gpustack learn CONFIG.yaml`, schemas/learn.schema.json): the corpus, the model, the
training recipe, the seeds and admissibility rules, and the conditions to measure. A bad config is one line
naming the file, line and field (InputError), before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpustack_compiler.base.errors import InputError

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
Rate = Annotated[float, Field(ge=0, le=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class ModelSpec(_Strict):
    """A decoder-only transformer over bytes (vocabulary 256): pre-norm blocks, learned positions, tied
    embedding and output head."""

    layers: Annotated[int, Field(ge=1, le=12)]
    d_model: Annotated[int, Field(ge=8, le=512)]
    heads: Annotated[int, Field(ge=1, le=16)]
    d_ff: Annotated[int, Field(ge=8, le=2048)]
    context: Annotated[int, Field(ge=8, le=512, description="Tokens (bytes) per training sequence.")]

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelSpec:
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of heads {self.heads}")
        return self


class TrainSpec(_Strict):
    optimizer: Annotated[Literal["adamw"], Field(description="Inner optimizer (optax.adamw).")] = "adamw"
    batch: Annotated[int, Field(ge=1, le=256, description="Sequences per replica per step.")]
    steps: Annotated[int, Field(ge=1, description=(
        "Steps per replica of a fault-free run: the token budget is steps x replicas x batch x context, "
        "and a run stops when its replicas have processed that many tokens, wasted work included."))]
    lr: Annotated[float, Field(gt=0, le=1, description="Peak inner learning rate.")]
    warmup: Annotated[int, Field(ge=0, description="Linear warm-up steps, then cosine decay to 10% of the peak.")]
    weight_decay: Annotated[float, Field(ge=0, le=1)] = 0.1
    clip_norm: Annotated[float, Field(gt=0, description="Global gradient-norm clip of each replica.")] = 1.0
    eval_every: Annotated[int, Field(ge=1, description="Evaluate every this many steps' worth of tokens.")]
    eval_batches: Annotated[int, Field(ge=1, le=64, description="Held-out batches per evaluation.")] = 4
    checkpoint_every: Annotated[int, Field(ge=1, description="Steps between checkpoints (rollback target).")]


class Outer(_Strict):
    """How replicas are combined. `data_parallel`: gradients averaged every step (local_steps must be 1);
    `local_sgd`: parameters averaged every local_steps steps; `diloco`: the averaged parameter change is the
    outer gradient of an SGD optimizer with Nesterov momentum (Douillard et al. 2023)."""

    method: Literal["data_parallel", "local_sgd", "diloco"]
    lr: Annotated[float, Field(gt=0, le=2, description="Outer learning rate (1 for averaging).")] = 1.0
    momentum: Annotated[float, Field(ge=0, lt=1, description="Outer Nesterov momentum (0 for averaging).")] = 0.0

    @model_validator(mode="after")
    def _averaging_is_plain(self) -> Outer:
        if self.method != "diloco" and (self.lr != 1.0 or self.momentum != 0.0):
            raise ValueError(f"{self.method} averages: lr 1 and momentum 0 (an outer optimizer is `diloco`)")
        return self


class Faults(_Strict):
    rollback_rate: Annotated[Rate, Field(description="Chance per step of a failure that rolls back to the last checkpoint.")] = 0.0
    replay_rate: Annotated[Rate, Field(description="Chance per step that its batch is applied a second time.")] = 0.0
    staleness: Annotated[int, Field(ge=0, le=64, description="Steps of delay of every gradient (0: none).")] = 0
    corruption_rate: Annotated[Rate, Field(description="Chance per replica step of a silent corruption.")] = 0.0
    corruption_target: Annotated[Literal["gradient", "activation"], Field(description=(
        "gradient: one element of the replica's gradient; activation: one element of the residual stream "
        "after the first block, in the forward pass."))] = "gradient"
    corruption_magnitude: Annotated[float, Field(gt=0, description="Value added to the corrupted element.")] = 1.0e4
    straggler_rate: Annotated[Rate, Field(description=(
        "Chance per replica step (data_parallel) or outer round (local_sgd, diloco) that a replica's "
        "contribution is late and dropped from the average."))] = 0.0

    def kinds(self) -> list[str]:
        """The fault kinds this condition injects."""
        return [k for k, on in (("rollback", self.rollback_rate > 0), ("replay", self.replay_rate > 0),
                                ("staleness", self.staleness > 0), ("corruption", self.corruption_rate > 0),
                                ("straggler", self.straggler_rate > 0)) if on]


class Condition(_Strict):
    id: Annotated[str, Field(pattern=ID_PATTERN, description="Permanent id of the condition.")]
    replicas: Annotated[int, Field(ge=1, le=16)]
    local_steps: Annotated[int, Field(ge=1, description="H: inner steps between outer synchronisations.")]
    outer: Outer
    faults: Faults = Field(default_factory=Faults)

    @model_validator(mode="after")
    def _data_parallel_every_step(self) -> Condition:
        if self.outer.method == "data_parallel" and self.local_steps != 1:
            raise ValueError("data_parallel averages gradients every step: local_steps must be 1")
        return self


class Admissibility(_Strict):
    """What a measurement needs before it may be fitted or scored; one that fails is recorded as
    inadmissible with its reason."""

    min_seeds: Annotated[int, Field(ge=1, description="Seeds a condition needs.")] = 3
    min_points: Annotated[int, Field(ge=2, description="Evaluations a curve needs (the sampling cadence).")] = 8


class LearnConfig(_Strict):
    panel: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", description=(
        "Panel of the observations; they go to OUT/observations/PANEL.yaml."))] = "local_learning"
    corpus: Annotated[str, Field(min_length=1, description="Text file, relative to this config's folder.")]
    holdout_fraction: Annotated[float, Field(gt=0, lt=0.5, description=(
        "Last share of the corpus kept for evaluation, never trained on."))] = 0.1
    model: ModelSpec
    train: TrainSpec
    seeds: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    admissibility: Admissibility = Field(default_factory=Admissibility)
    hold_out: Annotated[list[str], Field(description=(
        "Condition ids held out whole as evaluation data, chosen before any fit (besides the id-hash rule)."))] = []
    conditions: Annotated[list[Condition], Field(min_length=1)]

    @model_validator(mode="after")
    def _consistent(self) -> LearnConfig:
        ids = [c.id for c in self.conditions]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"condition id `{dup[0]}` given twice")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError("a seed is given twice")
        unknown = [h for h in self.hold_out if h not in ids]
        if unknown:
            raise ValueError(f"hold_out names `{unknown[0]}`, which is no condition")
        return self


def load_config(path: Path) -> tuple[LearnConfig, Path]:
    """The config and its corpus path; any problem is one InputError line naming file, line and field."""
    from gpustack_compiler.base.documents import read_mapping, validate
    from gpustack_compiler.base.yaml_lines import line_at

    if not path.is_file():
        raise InputError(f"{path}: no such learning config")
    data = read_mapping(path, "learning config")
    cfg = validate(LearnConfig, data, str(path))
    corpus = path.parent / cfg.corpus
    if not corpus.is_file():
        raise InputError(f"{path}:{line_at(data, ('corpus',))}: corpus: no such file {corpus}")
    return cfg, corpus


def _register_schema() -> None:
    # The compiler owns `gpustack schema` but may not import the engine: the engine registers its file.
    from gpustack_compiler.build.schema import SCHEMA_FILES

    SCHEMA_FILES.setdefault("learn.schema.json", LearnConfig)


_register_schema()
