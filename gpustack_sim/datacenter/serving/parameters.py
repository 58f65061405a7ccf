"""What the serving replay knows about one replica, in the catalog's base units (s, bit, token, FLOP, W,
USD). Which catalog variable supplies each field is catalog/bindings/serve_replay.yaml's business: nothing
here holds a physical number."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from gpustack_compiler.base.errors import InputError


@dataclass(frozen=True)
class ReplicaParameters:
    t_weights_s: float
    kv_bits_per_token: float
    decode_bandwidth_bit_s: float
    t_compute_per_sequence_s: float
    comm_fixed_s: float
    comm_per_sequence_s: float
    prefill_flops_per_token: float
    flops_achieved: float
    gpus_per_replica: int
    replicas: int
    kv_capacity_tokens: float
    block_tokens: int
    max_sequences: int
    chunk_tokens: int
    spec_tokens_per_step: float
    spec_cost_factor: float
    request_rate: float
    input_tokens: float
    output_tokens: float
    ttft_objective_s: float
    tpot_objective_s: float
    gpu_hour_cost: float  # USD per GPU-second (the catalog's base unit of USD/hour)
    gpu_power_limit_w: float
    node_power_w: float
    gpus_per_node: int
    pue: float
    gpu_memory_bound_w: float | None = None
    gpu_light_w: float | None = None
    fabric_bit_s: float | None = None

    @property
    def t_kv_per_token_s(self) -> float:
        """Decode time per iteration of reading one cached token (on each GPU, in parallel)."""
        return self.kv_bits_per_token / self.decode_bandwidth_bit_s

    @property
    def t_prefill_per_token_s(self) -> float:
        """Replica time one prompt token adds to the iteration that carries it (its FLOPs over the replica)."""
        return self.prefill_flops_per_token / (self.gpus_per_replica * self.flops_achieved)

    @property
    def node_rest_w(self) -> float:
        """Node power per GPU outside the GPU: the measured node's IT power with its GPUs at their limit."""
        return max(0.0, self.node_power_w / self.gpus_per_node - self.gpu_power_limit_w)

    def kv_bits_per_token_replica(self) -> float:
        """Bits of one cached token over the whole replica (what a migration moves)."""
        return self.kv_bits_per_token * self.gpus_per_replica

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_values(cls, values: Mapping[str, float | None]) -> ReplicaParameters:
        """From resolved values in base units, keyed by field (the binding's `field`)."""
        got = {}
        for f in fields(cls):
            v = values.get(f.name)
            if v is None:
                if f.name not in OPTIONAL:
                    raise InputError(f"serving replay: {f.name} is not resolved",
                                     "assign it in the run file or a preset")
                got[f.name] = None
                continue
            if not math.isfinite(v) or v < 0:
                raise InputError(f"serving replay: {f.name} = {v!r} is not a finite non-negative number")
            got[f.name] = round(v) if f.name in COUNTS else float(v)
        for name in ("decode_bandwidth_bit_s", "flops_achieved", "kv_capacity_tokens", "ttft_objective_s",
                     "tpot_objective_s", "spec_tokens_per_step", "gpus_per_replica", "max_sequences",
                     "chunk_tokens", "block_tokens", "replicas"):
            if not got[name] > 0:
                raise InputError(f"serving replay: {name} = {got[name]!r} is not positive")
        return cls(**got)


OPTIONAL = frozenset({"gpu_memory_bound_w", "gpu_light_w", "fabric_bit_s"})
COUNTS = frozenset({"gpus_per_replica", "replicas", "block_tokens", "max_sequences", "chunk_tokens", "gpus_per_node"})
