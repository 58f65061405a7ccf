"""A small decoder-only transformer language model in JAX (Radford et al. 2019's pre-norm GPT-2 block):
byte embeddings and learned positions, causal multi-head attention and a GELU MLP per block, a final layer
norm and an output head tied to the embedding. Loss is the mean next-token cross-entropy in nats."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .config import ModelSpec
from .corpus import VOCAB

EMBEDDING_KEYS = ("embed", "pos")


def init_params(spec: ModelSpec, key) -> dict:
    d, ff = spec.d_model, spec.d_ff
    keys = jax.random.split(key, 2 + 4 * spec.layers)
    std, out_std = 0.02, 0.02 / (2 * spec.layers) ** 0.5  # GPT-2's scaled init of residual projections

    def normal(k, shape, s):
        return s * jax.random.normal(k, shape, jnp.float32)

    blocks = []
    for i in range(spec.layers):
        k = keys[2 + 4 * i: 6 + 4 * i]
        blocks.append({"ln1": jnp.ones(d), "ln1_b": jnp.zeros(d), "qkv": normal(k[0], (d, 3 * d), std),
                       "proj": normal(k[1], (d, d), out_std), "ln2": jnp.ones(d), "ln2_b": jnp.zeros(d),
                       "fc": normal(k[2], (d, ff), std), "fc_b": jnp.zeros(ff),
                       "out": normal(k[3], (ff, d), out_std), "out_b": jnp.zeros(d)})
    return {"embed": normal(keys[0], (VOCAB, d), std), "pos": normal(keys[1], (spec.context, d), std),
            "blocks": blocks, "lnf": jnp.ones(d), "lnf_b": jnp.zeros(d)}


def count_non_embedding(params: dict) -> int:
    """Kaplan et al. 2020's N: every parameter but the token and position embeddings (the head is tied)."""
    return int(sum(x.size for k, v in params.items() if k not in EMBEDDING_KEYS for x in jax.tree.leaves(v)))


def flops_per_token(spec: ModelSpec, n_non_embedding: int) -> float:
    """Training FLOPs per token, Kaplan et al. 2020 Table 1 times three for the backward pass:
    6 N + 6 n_layer n_ctx d_model, plus the tied output head (6 d_model V), which at this size is not small."""
    return 6.0 * n_non_embedding + 6.0 * spec.layers * spec.context * spec.d_model + 6.0 * spec.d_model * VOCAB


def _norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b


def _attention(x, blk, heads):
    B, T, d = x.shape
    q, k, v = jnp.split(x @ blk["qkv"], 3, axis=-1)
    q, k, v = (t.reshape(B, T, heads, d // heads).transpose(0, 2, 1, 3) for t in (q, k, v))
    att = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(d // heads)
    att = jnp.where(jnp.tril(jnp.ones((T, T), bool)), att, -1e9)
    y = jax.nn.softmax(att, axis=-1) @ v
    return y.transpose(0, 2, 1, 3).reshape(B, T, d) @ blk["proj"]


def loss_fn(params: dict, x, y, heads: int, act_corrupt, act_where, magnitude: float):
    """Mean cross-entropy of batch (x, y). `act_corrupt` (0 or 1) adds `magnitude` to the residual stream
    element `act_where` = (sequence, position, channel) after the first block: a silent activation fault."""
    h = params["embed"][x] + params["pos"][: x.shape[1]]
    for i, blk in enumerate(params["blocks"]):
        h = h + _attention(_norm(h, blk["ln1"], blk["ln1_b"]), blk, heads)
        z = jax.nn.gelu(_norm(h, blk["ln2"], blk["ln2_b"]) @ blk["fc"] + blk["fc_b"])
        h = h + z @ blk["out"] + blk["out_b"]
        if i == 0:
            h = h.at[act_where[0], act_where[1], act_where[2]].add(act_corrupt * magnitude)
    logits = _norm(h, params["lnf"], params["lnf_b"]) @ params["embed"].T
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, y[..., None], axis=-1).mean()
