"""One condition at one seed: K simulated replicas of the model, each with its own AdamW state, trained on
this machine's CPUs until they have processed the token budget (wasted work included), with the faults
the condition injects. Everything but the wallclock is a function of (config, condition, seed): the data
position fixes each batch, one seeded stream draws every fault, and JAX on CPU computes the same bits.

Replicas are combined as the condition's outer method says: `data_parallel` averages gradients every step
(one model, K shards of the batch); `local_sgd` averages parameters every H steps (Stich 2019); `diloco`
takes the averaged parameter change as the gradient of an outer SGD with Nesterov momentum (Douillard et
al. 2023, Algorithm 1)."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from .config import Condition, LearnConfig, ModelSpec, TrainSpec
from .corpus import Corpus, heldout_batches, train_batch
from .model import count_non_embedding, flops_per_token, init_params, loss_fn

FAULT_STREAM = 0x5EED  # the fault draws' stream, apart from the data's


@dataclass
class SeedRun:
    """What one seed of one condition measured. `points` are exact functions of the inputs; `seconds`
    (wallclock at each point) is measured, and so kept apart from anything hashed."""

    condition: str
    seed: int
    params_non_embedding: int
    flops_per_token: float
    token_budget: int
    points: list[dict] = field(default_factory=list)  # tokens, useful_tokens, flops, loss
    seconds: list[float] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)
    diverged: str | None = None

    @property
    def initial_loss(self) -> float:
        return self.points[0]["loss"]

    @property
    def final_loss(self) -> float:
        return self.points[-1]["loss"]


def _inner_optimizer(train: TrainSpec):
    schedule = optax.warmup_cosine_decay_schedule(0.0, train.lr, max(train.warmup, 1), max(train.steps, 2),
                                                  end_value=0.1 * train.lr)
    return optax.chain(optax.clip_by_global_norm(train.clip_norm),
                       optax.adamw(schedule, weight_decay=train.weight_decay))


@lru_cache(maxsize=8)
def _functions(spec: ModelSpec, train: TrainSpec):
    """The jitted pieces, shared by every condition with this model and recipe (JAX retraces per K)."""
    opt = _inner_optimizer(train)

    def grad_one(params, x, y, act_flag, act_where, magnitude):
        return jax.value_and_grad(loss_fn)(params, x, y, spec.heads, act_flag, act_where, magnitude)

    grads = jax.jit(jax.vmap(grad_one, in_axes=(0, 0, 0, 0, 0, None)))

    def corrupt(g, flag, index, magnitude):
        flat, unravel = ravel_pytree(g)
        return unravel(flat.at[index].add(flag * magnitude))

    def weighted_mean(tree, w):
        return jax.tree.map(lambda a: jnp.tensordot(w, a, axes=1), tree)

    def broadcast(tree, k):
        return jax.tree.map(lambda a: jnp.broadcast_to(a, (k,) + a.shape), tree)

    @jax.jit
    def apply_inner(params_k, opt_k, g_k, flags, index, magnitude, keep, average):
        """One inner step of every replica; with `average` (data parallel) the kept replicas' gradients are
        averaged first, so every replica takes the same step."""
        g_k = jax.vmap(corrupt, in_axes=(0, 0, 0, None))(g_k, flags, index, magnitude)
        k = keep.shape[0]
        mean = broadcast(weighted_mean(g_k, keep / jnp.maximum(keep.sum(), 1.0)), k)
        g_k = jax.tree.map(lambda m, g: jnp.where(average, m, g), mean, g_k)
        updates, opt_k = jax.vmap(opt.update)(g_k, opt_k, params_k)
        return optax.apply_updates(params_k, updates), opt_k

    @jax.jit
    def outer_step(global_p, momentum_buf, params_k, keep, lr, momentum):
        """optax.sgd(lr, momentum, nesterov=True) on the outer gradient global - mean(kept replicas);
        lr 1 and momentum 0 is plain averaging."""
        delta = jax.tree.map(lambda g, m: g - m, global_p, weighted_mean(params_k, keep / keep.sum()))
        buf = jax.tree.map(lambda b, d: momentum * b + d, momentum_buf, delta)
        step = jax.tree.map(lambda d, b: d + momentum * b, delta, buf)
        new = jax.tree.map(lambda p, s: p - lr * s, global_p, step)
        return new, buf, broadcast(new, keep.shape[0])

    @jax.jit
    def evaluate(params_k, xs, ys):
        p = weighted_mean(params_k, jnp.full(jax.tree.leaves(params_k)[0].shape[0], 1.0)
                          / jax.tree.leaves(params_k)[0].shape[0])
        where = jnp.zeros(3, jnp.int32)
        return jnp.mean(jax.vmap(lambda x, y: loss_fn(p, x, y, spec.heads, 0.0, where, 0.0))(xs, ys))

    return opt, grads, apply_inner, outer_step, evaluate, broadcast


def run_seed(cfg: LearnConfig, corpus: Corpus, cond: Condition, seed: int) -> SeedRun:
    spec, train, f = cfg.model, cfg.train, cond.faults
    opt, grads, apply_inner, outer_step, evaluate, broadcast = _functions(spec, train)
    K, B, T = cond.replicas, train.batch, spec.context
    local = cond.outer.method != "data_parallel"
    params = init_params(spec, jax.random.PRNGKey(seed))
    n_flat = int(ravel_pytree(params)[0].size)
    n = count_non_embedding(params)
    run = SeedRun(cond.id, seed, n, flops_per_token(spec, n), train.steps * K * B * T)
    run.events = {"steps": 0, "rollbacks": 0, "lost_steps": 0, "replays": 0, "corruptions": 0, "stragglers": 0,
                  "outer_rounds": 0}
    xs, ys = (jnp.asarray(a) for a in heldout_batches(corpus, train.eval_batches, B, T))
    magnitude = jnp.float32(f.corruption_magnitude)
    act = f.corruption_target == "activation"

    params_k = broadcast(params, K)
    state = {"params": params_k, "opt": jax.vmap(opt.init)(params_k), "global": params,
             "buf": jax.tree.map(jnp.zeros_like, params), "pos": 0, "round": 0, "useful": 0}
    history: deque = deque([params_k], maxlen=f.staleness + 1)
    ckpt, since_ckpt = dict(state), 0
    rng = np.random.default_rng([seed, FAULT_STREAM])
    zero_k, ones_k = jnp.zeros(K, jnp.float32), jnp.ones(K, jnp.float32)
    step_tokens, tokens = K * B * T, 0
    eval_tokens = train.eval_every * step_tokens

    def inner(x, y, act_flags, grad_flags, index, where, keep):
        loss, g = grads(history[0], jnp.asarray(x), jnp.asarray(y), act_flags, where, magnitude)
        state["params"], state["opt"] = apply_inner(state["params"], state["opt"], g, grad_flags, index,
                                                    magnitude, keep, not local)
        history.append(state["params"])
        return loss

    def spend(start):
        """One step's worth of tokens processed (kept or wasted); evaluate at every multiple of the cadence."""
        nonlocal tokens
        tokens += step_tokens
        if tokens % eval_tokens == 0 and tokens < run.token_budget:
            record(start)

    def record(start):
        loss = float(evaluate(state["params"], xs, ys))
        run.points.append({"tokens": tokens, "useful_tokens": state["useful"],
                           "flops": tokens * run.flops_per_token, "loss": loss})
        run.seconds.append(time.perf_counter() - start)
        if not math.isfinite(loss):
            run.diverged = f"loss not finite ({loss}) at {tokens} tokens"

    # Compile before the clock starts: the wallclock measures training, not XLA.
    jax.block_until_ready(grads(history[0], xs[:1].repeat(K, 0), ys[:1].repeat(K, 0), zero_k,
                                jnp.zeros((K, 3), jnp.int32), magnitude))
    jax.block_until_ready(evaluate(state["params"], xs, ys))
    jax.block_until_ready(apply_inner(params_k, state["opt"], params_k, zero_k, jnp.zeros(K, jnp.int32), magnitude,
                                      ones_k, not local))
    if local:
        jax.block_until_ready(outer_step(params, state["buf"], params_k, ones_k, jnp.float32(cond.outer.lr),
                                         jnp.float32(cond.outer.momentum)))
    start = time.perf_counter()
    record(start)
    while tokens < run.token_budget and run.diverged is None:
        rollback, replay = rng.random(2)
        fault = rng.random(K) < f.corruption_rate
        late = rng.random(K) < f.straggler_rate
        index = jnp.asarray(rng.integers(0, n_flat, K), jnp.int32)
        where = jnp.asarray(np.stack([rng.integers(0, m, K) for m in (B, T, spec.d_model)], 1), jnp.int32)
        if rollback < f.rollback_rate:
            # The failure loses this step and every step since the checkpoint; their tokens stay spent.
            run.events["rollbacks"] += 1
            run.events["lost_steps"] += since_ckpt + 1
            state.update(ckpt)
            history.clear()
            history.append(state["params"])
            since_ckpt = 0
            spend(start)
        else:
            run.events["corruptions"] += int(fault.sum())
            flags = jnp.asarray(fault, jnp.float32)
            keep = ones_k if local else jnp.asarray(~late, jnp.float32)
            if not local:
                run.events["stragglers"] += int(late.sum())
            x, y = train_batch(corpus, seed, state["pos"], K, B, T)
            if float(keep.sum()) > 0:
                inner(x, y, flags if act else zero_k, zero_k if act else flags, index, where, keep)
                state["useful"] += step_tokens
            state["pos"] += 1
            run.events["steps"] += 1
            spend(start)
            if replay < f.replay_rate and tokens < run.token_budget:
                # The same batch once more, a whole step of budget spent on data just seen.
                run.events["replays"] += 1
                inner(x, y, zero_k, zero_k, index, where, ones_k)
                spend(start)
            state["round"] += 1
            if local and (state["round"] == cond.local_steps or tokens >= run.token_budget):
                _sync(state, outer_step, late, cond, run)
            since_ckpt += 1
            # Local methods checkpoint at a synchronisation, when the replicas hold the global model.
            if since_ckpt >= train.checkpoint_every and (not local or state["round"] == 0):
                ckpt, since_ckpt = dict(state), 0
    if run.diverged is None:
        record(start)
    return run


def _sync(state: dict, outer_step, late: np.ndarray, cond: Condition, run: SeedRun) -> None:
    """An outer round: the replicas that are not late are averaged (and, for DiLoCo, stepped with Nesterov
    momentum); a late replica's round of work is dropped and it restarts from the new global model."""
    keep = ~late
    run.events["stragglers"] += int(late.sum())
    run.events["outer_rounds"] += 1
    state["round"] = 0
    if not keep.any():
        state["params"] = jax.tree.map(lambda g, p: jnp.broadcast_to(g, p.shape), state["global"], state["params"])
        return
    state["global"], state["buf"], state["params"] = outer_step(
        state["global"], state["buf"], state["params"], jnp.asarray(keep, jnp.float32),
        jnp.float32(cond.outer.lr), jnp.float32(cond.outer.momentum))
