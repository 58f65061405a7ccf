"""A training run described in YAML (or flags): model shape, parallel layout, precision, hardware,
budget. The catalog's run-field bindings (catalog/bindings/run_fields.yaml, read in `bindings.py`) map it
onto variables and variant modes, so every figure an estimate shows is a catalog resolution with a trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.yaml_lines import YamlError, load

# Counts stay exact as floats (the engine computes in floats): a 400-digit `hidden` would overflow them.
MAX_COUNT = 2**53


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False):
        """A copy validated as the file it stands for would be: pydantic's own copy skips validation, so a
        512-GPU layout copied into a 1,024-GPU run (or a negative count) went through unchecked."""
        copied = super().model_copy(update=update, deep=deep)
        # The fields given, as given: the ones left unset stay unset (and take the same defaults).
        return type(self).model_validate({k: getattr(copied, k) for k in copied.model_fields_set}) if update else copied


class MoESpec(_Strict):
    experts: Annotated[int, Field(ge=1, le=MAX_COUNT, description="Routed experts per MoE layer.")]
    top_k: Annotated[int, Field(ge=1, le=MAX_COUNT, description="Experts each token is routed to.")]
    shared_experts: Annotated[int, Field(ge=0, le=MAX_COUNT)] = 0
    expert_ffn_hidden: Annotated[int | None, Field(ge=1, le=MAX_COUNT)] = None
    dense_layers: Annotated[int, Field(ge=0, le=MAX_COUNT, description="Leading layers with a dense FFN.")] = 0
    capacity_factor: Annotated[float | None, Field(ge=1, description=(
        "Expert capacity over an even share of the routed tokens, padded when fewer arrive; unset: the "
        "framework preset's (dropless, 1, in Megatron Core)."))] = None
    max_routed_nodes: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Node-limited routing: the most nodes (scale-up domains) one token's experts may lie in (4 in "
        "DeepSeek-V3); unset: no limit."))] = None


class MLASpec(_Strict):
    """Multi-head latent attention (DeepSeek-V2 arXiv:2405.04434 Section 2.1), by the released configurations' names."""

    kv_lora_rank: Annotated[int, Field(ge=1, le=MAX_COUNT, description=(
        "KV compression dimension d_c (512 in DeepSeek-V2/V3)."))]
    q_lora_rank: Annotated[int, Field(ge=1, le=MAX_COUNT, description=(
        "Query compression dimension d_c' (1536 in DeepSeek-V2/V3)."))]
    qk_rope_head_dim: Annotated[int, Field(ge=1, le=MAX_COUNT, description=(
        "Decoupled RoPE dimension d_h^R per head (64)."))]
    qk_nope_head_dim: Annotated[int, Field(ge=1, le=MAX_COUNT, description=(
        "Query/key head dimension from the latent (128)."))]
    v_head_dim: Annotated[int, Field(ge=1, le=MAX_COUNT, description=(
        "Value head dimension (128); the model's head_dim."))]


class ModelSpec(_Strict):
    layers: Annotated[int, Field(ge=1, le=MAX_COUNT)]
    hidden: Annotated[int, Field(ge=1, le=MAX_COUNT)]
    ffn_hidden: Annotated[int, Field(ge=1, le=MAX_COUNT)]
    heads: Annotated[int, Field(ge=1, le=MAX_COUNT)]
    kv_heads: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description="Defaults to heads (multi-head attention).")] = None
    head_dim: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description="Defaults to hidden / heads.")] = None
    vocab: Annotated[int, Field(ge=1, le=MAX_COUNT)]
    seq_len: Annotated[int, Field(ge=1, le=MAX_COUNT, description="Tokens per sequence.")]
    ffn_matrices: Annotated[Literal[2, 3], Field(description="2 for a plain MLP, 3 for gated (SwiGLU).")] = 2
    norm_vectors: Annotated[Literal[1, 2], Field(description="Vectors per norm: 2 LayerNorm, 1 RMSNorm.")] = 2
    tied_embeddings: bool = False
    learned_positions: Annotated[bool, Field(description="Learned absolute position embeddings (GPT-3).")] = False
    attention_context_fraction: Annotated[float, Field(gt=0, le=1, description=(
        "Share of the s x s score matrix credited as model FLOPs (the counting convention): 1 in the "
        "Megatron/PaLM convention, 0.5 to credit a causal mask's half. What the kernel executes follows "
        "from `causal` and the kernel."))] = 1.0
    causal: Annotated[bool, Field(description=(
        "Causal (decoder) attention mask, as every decoder LLM trains; false for bidirectional attention. "
        "A fused kernel with the mask skips the score blocks above the diagonal, about half the time."))] = True
    dropout: Annotated[bool, Field(description="Dropout layers active (GPT-3 era), off in most current runs.")] = False
    mtp_depth: Annotated[int, Field(ge=0, le=MAX_COUNT, description=(
        "Multi-token-prediction modules (1 in DeepSeek-V3): each one more transformer block and pass of the "
        "output head on the last pipeline stage."))] = 0
    moe: MoESpec | None = None
    mla: Annotated[MLASpec | None, Field(description="Multi-head latent attention instead of grouped-query.")] = None

    @model_validator(mode="after")
    def _value_heads(self) -> ModelSpec:
        if self.mla is not None and self.head_dim is not None and self.head_dim != self.mla.v_head_dim:
            raise ValueError(f"head_dim = {self.head_dim} but mla.v_head_dim = {self.mla.v_head_dim}: with "
                             "multi-head latent attention the head dimension is the value head dimension; drop one")
        return self


class RecomputeModulesSpec(_Strict):
    mla_up_proj: Annotated[bool, Field(description=(
        "Recompute the MLA up-projections in the backward pass instead of keeping the per-head queries, keys "
        "and values (Megatron-Core recompute_modules mla_up_proj; DeepSeek-V3 Section 3.2.3). Needs model.mla."))] = False
    mlp: Annotated[bool, Field(description=(
        "Keep only each dense MLP's input and rerun it in the backward pass (Megatron-Core recompute_modules "
        "mlp: the dense layers' MLPs, not the experts)."))] = False

    @property
    def any(self) -> bool:
        return self.mla_up_proj or self.mlp


class LayoutSpec(_Strict):
    tp: Annotated[int, Field(ge=1, le=MAX_COUNT)] = 1
    pp: Annotated[int, Field(ge=1, le=MAX_COUNT)] = 1
    dp: Annotated[int, Field(ge=1, le=MAX_COUNT)] = 1
    cp: Annotated[int, Field(ge=1, le=MAX_COUNT)] = 1
    ep: Annotated[int, Field(ge=1, le=MAX_COUNT)] = 1
    etp: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Expert tensor-parallel size: GPUs that split each routed expert's matrices (Megatron-Core "
        "expert_tensor_parallel_size); unset, the tensor-parallel size. The etp x ep expert grid folds over "
        "the tp x dp x cp ranks of a pipeline stage."))] = None
    micro_batch: Annotated[int, Field(ge=1, le=MAX_COUNT)] = 1
    global_batch: Annotated[int, Field(ge=1, le=MAX_COUNT, description="Sequences per optimizer step.")]
    interleave: Annotated[int, Field(ge=1, le=MAX_COUNT, description=(
        "Virtual pipeline stages per GPU (1: plain 1F1B). When a run file leaves it out, `gpustack estimate` "
        "takes the valid value with the highest throughput and says so; an observation's run keeps 1."))] = 1
    first_stage_layers: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Layers of the first pipeline stage when it holds fewer than the others (with last_stage_layers)."))] = None
    last_stage_layers: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Layers of the last pipeline stage when it holds fewer than the others (with first_stage_layers)."))] = None
    recompute: Literal["none", "selective", "full"] = "none"
    recompute_modules: Annotated[RecomputeModulesSpec, Field(description=(
        "Modules recomputed besides what `recompute` says (Megatron-Core recompute_modules other than "
        "core_attn, which is `recompute: selective`); not with full recomputation, which reruns them already."))
    ] = RecomputeModulesSpec()
    sequence_parallel: bool = False
    zero_stage: Literal[0, 1, 2, 3] = 0
    pipeline_schedules: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Pipeline schedules per optimizer step when the framework runs one per local batch and accumulates "
        "gradients across them (NeMo AutoModel under torch pipelining: GA schedules of LBS / MBS "
        "micro-batches), each filling and draining the pipeline; unset, one schedule over all of the step's "
        "micro-batches (Megatron-Core)."))] = None
    pipeline_schedule: Annotated[Literal["1f1b", "zb_h1", "zb_h2", "gpipe", "dualpipe"], Field(description=(
        "1F1B (interleaved when interleave > 1), zero-bubble ZB-H1 or ZB-H2, GPipe, or DeepSeek-V3's "
        "bidirectional DualPipe (two parameter copies)."))] = "1f1b"
    tp_overlap: Annotated[Literal["none", "comm_gemm"], Field(description=(
        "Tensor-parallel collectives in series with the GEMMs, or decomposed and overlapped with them "
        "(Transformer Engine userbuffers, Megatron tp_comm_overlap)."))] = "none"
    ep_dispatch: Annotated[Literal["direct", "per_domain"], Field(description=(
        "How the expert all-to-all moves a token's k routed copies: each straight to its expert's GPU (an NCCL "
        "all-to-all, Megatron-Core's alltoall dispatcher), or once to each scale-up domain its experts lie in "
        "and forwarded inside it (DeepEP, DeepSeek-V3)."))] = "direct"
    ep_overlap: Annotated[Literal["none", "dualpipe", "a2a_1f1b"], Field(description=(
        "Expert-parallel all-to-alls in series with the expert computation, or hidden behind another "
        "micro-batch's computation: pooled over the layer (DeepSeek-V3 DualPipe), or window by window "
        "(Megatron-Core's fine-grained 1F1B, overlap_moe_expert_parallel_comm)."))] = "none"
    dp_overlap: Annotated[Literal["bucketed", "layer_chunks", "none"], Field(description=(
        "Gradient reduction overlapped with the backward pass in buckets (PyTorch DDP), chunk by layer after "
        "the last micro-batch (Megatron overlap_grad_reduce), or after the pipeline flush."))] = "bucketed"
    cp_comm: Annotated[Literal["ring", "all_gather"], Field(description=(
        "Context-parallel keys and values passed around a ring under the attention blocks (Ring Attention), "
        "or all-gathered before attention (Llama 3)."))] = "ring"

    @model_validator(mode="after")
    def _modules(self) -> LayoutSpec:
        if self.recompute == "full" and self.recompute_modules.any:
            raise ValueError("recompute_modules apply with recompute none or selective: full recomputation "
                             "reruns every module already")
        return self

    @model_validator(mode="after")
    def _stages(self) -> LayoutSpec:
        if (self.first_stage_layers is None) != (self.last_stage_layers is None):
            raise ValueError("first_stage_layers and last_stage_layers go together: give both or neither")
        if self.first_stage_layers is not None and self.pp < 2:
            raise ValueError("first_stage_layers and last_stage_layers need pipeline parallelism (pp >= 2)")
        return self

    @model_validator(mode="after")
    def _schedules(self) -> LayoutSpec:
        if self.pipeline_schedules is None or self.pipeline_schedules == 1:
            return self
        if self.pp < 2:
            raise ValueError("pipeline_schedules needs pipeline parallelism (pp >= 2)")
        micro_batches = self.global_batch // (self.dp * self.micro_batch)
        if micro_batches % self.pipeline_schedules:
            raise ValueError(f"pipeline_schedules {self.pipeline_schedules} does not split the step's "
                             f"{micro_batches} micro-batches evenly")
        return self

    @field_validator("global_batch")
    @classmethod
    def _whole_micro_batches(cls, global_batch: int, info: ValidationInfo) -> int:
        # Each data-parallel rank runs global_batch / (dp x micro_batch) micro-batches per step: a whole number.
        dp, micro = info.data.get("dp"), info.data.get("micro_batch")
        if dp is None or micro is None:
            return global_batch
        if micro > global_batch:
            raise ValueError(f"{global_batch} is below micro_batch {micro}")
        if global_batch % (dp * micro):
            raise ValueError(f"{global_batch} is not divisible by dp x micro_batch = {dp} x {micro}")
        return global_batch


class KernelSpec(_Strict):
    flash_attention: Annotated[bool, Field(description="Fused IO-aware attention (FlashAttention).")] = True
    attention: Annotated[Literal["flash_attention_2", "flash_attention_3", "cudnn_fused_attention"], Field(
        description=("Which fused attention kernel runs when flash_attention is on: FlashAttention-2, "
                     "FlashAttention-3 (Hopper GPUs) or cuDNN's fused attention (what Transformer Engine selects "
                     "on Hopper and later); each has its own calibrated efficiency and per-block overhead."))] = (
        "flash_attention_2")
    fp32_logits: Annotated[bool, Field(description="Logits cast to FP32 for the loss (Megatron-LM).")] = True


class _Extendable(_Strict):
    """What every run file shares after its own sections: further presets (each kind of run says which),
    modes, variants, assignments."""

    modes: Annotated[list[str], Field(default_factory=list, description="Extra variant modes.")]
    variants: dict[str, str] = Field(default_factory=dict)
    assign: Annotated[dict[str, str | float], Field(
        default_factory=dict, description="Extra assignments: NAME -> '500 W' or a number in declared units.")]

    def with_extras(self, presets: Sequence[str] = (), assign: Mapping[str, str | float] | None = None,
                    variants: Mapping[str, str] | None = None, modes: Sequence[str] = ()):
        """The run with additions applied after the run file's own (presets, assignments, variants, modes)."""
        return self.model_copy(update={
            "presets": [*self.presets, *presets], "modes": [*self.modes, *modes],
            "assign": {**self.assign, **(assign or {})}, "variants": {**self.variants, **(variants or {})}})


class RunSpec(_Extendable):
    """The run file (schemas/run.schema.json)."""

    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    model: ModelSpec
    layout: LayoutSpec
    kernels: KernelSpec = KernelSpec()
    gpus: Annotated[int, Field(ge=1, le=MAX_COUNT)]
    tokens: Annotated[str, Field(description="Token budget with its unit, e.g. '15e12 token' or '15 Ttoken'.")]
    precision: Annotated[str, Field(description="Precision preset, e.g. precision_bf16_mixed.")] = "precision_bf16_mixed"
    hardware: Annotated[list[str], Field(min_length=1, description="Hardware presets (GPU, node, fabric).")]
    presets: Annotated[list[str], Field(default_factory=list, description=(
        "Further presets applied after hardware and precision: calibration, facility, tariff, capex."))]
    optimizer: Literal["adamw", "lion", "muon"] = "adamw"

    @model_validator(mode="after")
    def _layout_fits(self) -> RunSpec:
        lay = self.layout
        used = lay.tp * lay.pp * lay.dp * lay.cp
        if used != self.gpus:
            raise ValueError(f"layout tp*pp*dp*cp = {used} but gpus = {self.gpus}")
        if lay.recompute_modules.mla_up_proj and self.model.mla is None:
            raise ValueError("layout.recompute_modules.mla_up_proj needs multi-head latent attention (model.mla)")
        return self

    def presets_in_order(self) -> list[str]:
        return [*self.hardware, self.precision, *self.presets]


def apply_overrides(data: dict, overrides: list[str]) -> None:
    """`--set layout.tp=4`: a dotted path into the run file and a YAML scalar (read safely)."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise InputError(f"--set {item!r}: expected FIELD=VALUE, e.g. layout.tp=4")
        try:
            value = load(raw)[0]
        except YamlError as exc:
            raise InputError(f"--set {item!r}: cannot read the value ({exc.message})") from None
        try:
            set_field(data, path, value)
        except ValueError as exc:
            raise InputError(f"--set {item!r}: {exc}") from None


def set_field(data: dict, path: str, value) -> None:
    """Set a dotted field (`layout.tp`) in run-file data; ValueError when a part of the path is not a section."""
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ValueError(f"`{key}` is not a section")
    node[keys[-1]] = value


def _register_schema() -> None:
    # The compiler owns `gpustack schema` but may not import the engine: the engine registers its file.
    from gpustack_compiler.build.schema import SCHEMA_FILES

    SCHEMA_FILES.setdefault("run.schema.json", RunSpec)


_register_schema()
