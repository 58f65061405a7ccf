"""A serving run described in YAML: the model, its served precision, hardware, serving layout, request
lengths, load and latency objectives (schemas/serve_run.schema.json). The catalog's serving field
bindings (catalog/bindings/serve_fields.yaml) map it onto the `serve.` variables and their neighbours,
so every figure of a serving estimate is a catalog resolution with a trace.

A serving run file says `kind: serving`; run files without it are training runs (run.py).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from .run import KernelSpec, ModelSpec, _Extendable, _Strict


class ServeLayout(_Strict):
    tp: Annotated[int, Field(ge=1, description="Tensor-parallel GPUs per replica.")] = 1
    pp: Annotated[int, Field(ge=1, description="Pipeline stages per replica.")] = 1
    ep: Annotated[int, Field(ge=1, description="Expert-parallel degree inside a replica (MoE).")] = 1
    etp: Annotated[int | None, Field(ge=1, description=(
        "GPUs that split each routed expert's matrices; unset, the tensor-parallel size (1 when the "
        "engine places whole experts on GPUs, as vLLM's expert parallelism does)."))] = None
    replicas: Annotated[int, Field(ge=1, description="Model replicas sharing the request stream.")] = 1
    cp: Annotated[Literal[1], Field(description="Context parallelism: not modelled for serving, always 1.")] = 1


class ServeEngine(_Strict):
    """Settings of the serving engine (vLLM's names in brackets)."""

    block_tokens: Annotated[int, Field(ge=1, description="Tokens per KV cache block [block_size].")] = 16
    memory_utilization: Annotated[float, Field(gt=0, le=1, description=(
        "Share of HBM the engine may use [gpu_memory_utilization].")) ] = 0.9
    max_sequences: Annotated[int, Field(ge=1, description=(
        "Most sequences per iteration [max_num_seqs]; vLLM's default 256.")) ] = 256
    chunk_tokens: Annotated[int, Field(ge=1, description=(
        "Prompt tokens per iteration under chunked prefill [max_num_batched_tokens].")) ]


class Lengths(_Strict):
    """A request-length distribution: its mean enters the model, its maximum must fit the context."""

    mean: Annotated[float, Field(gt=0, description="Mean tokens per request.")]
    max: Annotated[int | None, Field(ge=1, description="Longest request (at most the model's context).")] = None

    @model_validator(mode="after")
    def _mean_within_max(self) -> Lengths:
        if self.max is not None and self.mean > self.max:
            raise ValueError(f"mean {self.mean:g} exceeds max {self.max}")
        return self


class Workload(_Strict):
    input_tokens: Lengths
    output_tokens: Lengths
    request_rate: Annotated[float, Field(gt=0, description="Peak requests per second at the whole fleet (Poisson).")]
    mean_to_peak: Annotated[float | None, Field(gt=0, le=1, description=(
        "Mean over peak load of the daily curve; derived from `load_curve` when that is given."))] = None
    load_curve: Annotated[list[float] | None, Field(min_length=1, description=(
        "Relative load over the day (e.g. 24 hourly values); its mean over its maximum is mean_to_peak."))] = None

    @model_validator(mode="after")
    def _one_load_shape(self) -> Workload:
        if self.load_curve is None:
            if self.mean_to_peak is None:
                raise ValueError("give `mean_to_peak` or `load_curve`")
            return self
        if min(self.load_curve) < 0 or max(self.load_curve) <= 0:
            raise ValueError("`load_curve` values are non-negative with a positive peak")
        ratio = sum(self.load_curve) / len(self.load_curve) / max(self.load_curve)
        if self.mean_to_peak is not None and not math.isclose(self.mean_to_peak, ratio, rel_tol=1e-12):
            raise ValueError(f"mean_to_peak = {self.mean_to_peak:g} but the load curve's mean over its peak is "
                             f"{ratio:.6g}; give one of them")
        # The curve's ratio is what the catalog reads (serve.load.mean_to_peak); a dump keeps both, consistent.
        object.__setattr__(self, "mean_to_peak", ratio)
        return self


class Objectives(_Strict):
    ttft_p99_ms: Annotated[float, Field(gt=0, description="99th percentile time to first token, ms.")]
    tpot_p99_ms: Annotated[float, Field(gt=0, description="99th percentile time per output token, ms.")]


class Speculative(_Strict):
    draft_tokens: Annotated[int, Field(ge=1, description="Tokens drafted per target step (gamma).")]
    acceptance: Annotated[float, Field(gt=0, lt=1, description="Acceptance rate of a drafted token (alpha).")]
    draft_cost: Annotated[float, Field(ge=0, description="Draft step time over target step time (c).")]


class ServeRunSpec(_Extendable):
    """The serving run file (schemas/serve_run.schema.json)."""

    kind: Literal["serving"]
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    model: ModelSpec
    kernels: KernelSpec = KernelSpec()
    precision: Annotated[list[str], Field(min_length=1, description=(
        "Serving precision presets: weight format and KV cache format (e.g. serve_weights_fp8, serve_kv_fp8)."))]
    hardware: Annotated[list[str], Field(min_length=1, description="Hardware presets (GPU, node, fabric).")]
    presets: Annotated[list[str], Field(default_factory=list, description=(
        "Further presets applied after hardware and precision: calibration, facility, prices."))]
    layout: ServeLayout = ServeLayout()
    engine: ServeEngine
    workload: Workload
    objectives: Objectives
    speculative: Speculative | None = None

    @model_validator(mode="after")
    def _fits(self) -> ServeRunSpec:
        m, w = self.model, self.workload
        for what, lengths in (("input_tokens", w.input_tokens), ("output_tokens", w.output_tokens)):
            if lengths.max is not None and lengths.max > m.seq_len:
                raise ValueError(f"workload.{what}.max = {lengths.max} exceeds the model's context seq_len = {m.seq_len}")
        if self.layout.ep > 1 and m.moe is None:
            raise ValueError("layout.ep > 1 needs a model with `moe`")
        return self

    def presets_in_order(self) -> list[str]:
        return [*self.hardware, *self.precision, *self.presets]


def _register_schema() -> None:
    # The compiler owns `gpustack schema` but may not import the engine: the engine registers its file.
    from gpustack_compiler.build.schema import SCHEMA_FILES

    SCHEMA_FILES.setdefault("serve_run.schema.json", ServeRunSpec)


_register_schema()
