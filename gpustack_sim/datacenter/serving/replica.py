"""One serving replica: continuous batching with chunked prefill (Sarathi-Serve), paged KV-cache admission
and preemption by recomputation (vLLM), each iteration priced with the catalog's terms.

The replica advances in stretches: while the batch and the prefill queue keep their composition, the
iterations differ only by the context every decoding sequence adds, so a stretch of n iterations is summed
in closed form instead of one event per token. A stretch ends at a prompt's last chunk, a request's last
token, a full KV cache, or the time the caller asks for."""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from .parameters import ReplicaParameters

PAGED, RESERVE = "paged", "reserve"


class Log:
    """Per-request outcomes, shared by the replicas of a fleet (indexed by request id)."""

    def __init__(self, n: int):
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.replica = np.full(n, -1, dtype=np.int32)
        self.preemptions = np.zeros(n, dtype=np.int32)
        self.migrations = np.zeros(n, dtype=np.int32)
        self.rejected = np.zeros(n, dtype=bool)


class Replica:
    def __init__(self, index: int, p: ReplicaParameters, inp: np.ndarray, out: np.ndarray, log: Log,
                 admission: str = PAGED, site: int = 0):
        self.index, self.p, self.log, self.site = index, p, log, site
        self.inp, self.out = inp, out  # per-request lengths (shared arrays)
        self.admission = admission
        self.t = 0.0
        self.iteration = 0  # decode iterations run so far
        self.waiting: deque[int] = deque()
        self.prefill: deque[list] = deque()  # [rid, prompt tokens left, tokens to prefill]
        self.prefill_left = 0  # prompt tokens left over the whole prefill queue
        self.running: list[tuple[int, int]] = []  # heap of (last iteration, rid)
        self.start_iteration: dict[int, int] = {}  # rid -> iteration it joined decode, context then
        self.start_context: dict[int, int] = {}
        self.finish_at: dict[int, int] = {}  # rid -> its entry in `running` (older entries are stale)
        self.batch = 0
        self.context = 0  # tokens all decoding sequences attend to in the next iteration
        self.kv_used = 0.0  # tokens held in the KV cache (decode contexts, prefilled prompts)
        self.inbound: list[tuple[float, int, int]] = []  # migrated requests: (arrival, rid, context)
        self.busy_s = 0.0
        self.compute_s = 0.0  # time the tensor cores bound the iteration (prefill chunks, compute-bound decode)
        self.memory_s = 0.0  # time HBM bound it (memory-bound decode)
        self.tokens_out = 0
        self.energy_j = 0.0  # facility energy of the replica's GPUs and their share of the node
        self.set_cap(None)
        self.enabled = True  # an autoscaler may drain a replica: it finishes its work and takes no more
        self.cap_kv = p.kv_capacity_tokens
        self.frag = p.block_tokens / 2.0
        t_step = p.spec_cost_factor / p.spec_tokens_per_step
        self.a_mem = (p.t_weights_s) * t_step
        self.b_mem = p.t_kv_per_token_s * t_step
        self.c_comp = p.t_compute_per_sequence_s * t_step
        self.fixed = p.comm_fixed_s * t_step
        self.per_seq = p.comm_per_sequence_s * t_step
        self.t_token = p.t_prefill_per_token_s

    # ---- power -----------------------------------------------------------------------------------------
    def set_cap(self, cap_w: float | None) -> None:
        """Cap each GPU's board power. Dynamic power above the lightest load's scales with the clock, so an
        iteration bound by what the cap throttles stretches by the ratio of dynamic powers; memory-bound
        decode draws under most caps and is slowed only by a cap below its draw (Ma et al. 2026)."""
        p = self.p
        limit = p.gpu_power_limit_w
        light = p.gpu_light_w if p.gpu_light_w is not None else limit
        mem = p.gpu_memory_bound_w if p.gpu_memory_bound_w is not None else limit
        cap = limit if cap_w is None else max(min(cap_w, limit), light + 1.0)
        self.cap_w = cap
        self.p_light, self.p_compute, self.p_memory = light, min(limit, cap), min(mem, cap)
        self.slowdown = (limit - light) / (cap - light) if cap < limit and limit > light else 1.0
        self.slowdown_memory = (mem - light) / (cap - light) if cap < mem and mem > light else 1.0
        self.watt_scale = p.gpus_per_replica * p.pue
        self.rest_w = p.node_rest_w

    def power_w(self, compute_s: float, memory_s: float, busy_s: float, span_s: float) -> float:
        """Mean facility power over `span_s` with the given compute-bound, memory-bound and busy seconds."""
        other = max(0.0, busy_s - compute_s - memory_s)
        idle = max(0.0, span_s - busy_s)
        gpu = self.p_compute * compute_s + self.p_memory * (memory_s + other) + self.p_light * idle
        return self.watt_scale * (gpu / span_s + self.rest_w) if span_s > 0 else 0.0

    # ---- observable state ---------------------------------------------------------------------------
    def load(self) -> int:
        return len(self.waiting) + len(self.prefill) + self.batch + len(self.inbound)

    def kv_share(self) -> float:
        return self.kv_used / self.cap_kv

    # ---- requests in ---------------------------------------------------------------------------------
    def enqueue(self, rid: int) -> None:
        self.waiting.append(rid)
        self.log.replica[rid] = self.index

    def receive(self, arrival_s: float, rid: int, context: int) -> None:
        """A decoding request migrated here: it resumes decode once its KV cache has arrived."""
        heapq.heappush(self.inbound, (arrival_s, rid, context))
        self.log.replica[rid] = self.index

    # ---- requests out (migration) --------------------------------------------------------------------
    def take_waiting(self, n: int) -> list[int]:
        return [self.waiting.pop() for _ in range(min(n, len(self.waiting)))]

    def take_decoding(self, n: int) -> list[tuple[int, int, int]]:
        """Up to n decoding requests with the most tokens still to generate: (rid, context, tokens left)."""
        live = [(f, r) for f, r in self.running if self.finish_at.get(r) == f]
        live.sort(reverse=True)
        taken = []
        for f, rid in live[:n]:
            ctx = self._leave(rid)
            taken.append((rid, ctx, f - self.iteration))
        if taken:
            self.running = [(f, r) for f, r in self.running if self.finish_at.get(r) == f]
            heapq.heapify(self.running)
        return taken

    # ---- the iteration model ---------------------------------------------------------------------------
    def _times(self, n: int, chunk: float) -> tuple[float, float, float]:
        """Total, compute-bound and memory-bound time of the next n iterations, each carrying `chunk` prompt
        tokens, while the batch keeps its size and every sequence adds one token of context per iteration."""
        b, k = self.batch, self.context
        comp = b * self.c_comp * self.slowdown
        over = (self.fixed + b * self.per_seq)
        pre = chunk * self.t_token * self.slowdown
        if b == 0:
            mem_total = n * self.a_mem * self.slowdown_memory
            return mem_total + n * (over + pre), n * pre, mem_total
        a = (self.a_mem + k * self.b_mem) * self.slowdown_memory
        step = b * self.b_mem * self.slowdown_memory
        # memory time of iteration j (0-based) is a + j step; compute-bound while it is below comp
        j0 = 0 if a >= comp else min(n, math.ceil((comp - a) / step)) if step > 0 else n
        mem_part = (n - j0) * a + step * (n * (n - 1) - j0 * (j0 - 1)) / 2.0
        comp_part = j0 * comp
        return mem_part + comp_part + n * (over + pre), comp_part + n * pre, mem_part

    def _stretch(self, dt: float, chunk: float, limit: int) -> tuple[int, tuple[float, float, float]]:
        """Fewest iterations (at most `limit`) whose total time reaches dt, and their times. Once memory
        bounds them the total is quadratic in the count (each iteration reads one more token per sequence),
        so the count is that quadratic's root: exact when memory bounds the first iteration already, else
        checked against the exact total and searched from there."""
        b = self.batch
        sm = self.slowdown_memory
        a = (self.a_mem + self.context * self.b_mem) * sm
        comp = b * self.c_comp * self.slowdown
        per = (a if a >= comp else comp) + self.fixed + b * self.per_seq + chunk * self.t_token * self.slowdown
        if dt <= per or limit <= 1:
            return 1, self._times(1, chunk)
        step = b * self.b_mem * sm
        if step <= 0:
            n = math.ceil(dt / per)
        else:
            lin = per - step / 2.0
            n = math.ceil((-lin + math.sqrt(lin * lin + 2.0 * step * dt)) / step)
        n = max(1, min(limit, n))
        times = self._times(n, chunk)
        if a >= comp and (times[0] >= dt or n == limit):
            return n, times  # the root of the exact total (rounding aside: a stretch may end one early)
        if times[0] < dt:
            if n == limit:
                return n, times
            lo, hi = n + 1, limit
        else:
            prev = self._times(n - 1, chunk)
            if prev[0] < dt:
                return n, times
            lo, hi = 1, n - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._times(mid, chunk)[0] >= dt:
                hi = mid
            else:
                lo = mid + 1
        return lo, self._times(lo, chunk)

    def _run(self, n: int, times: tuple[float, float, float]) -> None:
        total, comp, mem = times
        self.t += total
        self.busy_s += total
        self.compute_s += comp
        self.memory_s += mem
        self.energy_j += self.watt_scale * (self.p_compute * comp + self.p_memory * (total - comp)
                                            + self.rest_w * total)
        self.iteration += n
        self.context += n * self.batch
        if self.admission == PAGED:
            self.kv_used += n * self.batch
        self.tokens_out += n * self.batch

    # ---- admission, completion, preemption ------------------------------------------------------------
    def _admit(self) -> None:
        if not self.waiting and not self.inbound:
            return
        while self.inbound and self.inbound[0][0] <= self.t:
            _, rid, ctx = heapq.heappop(self.inbound)
            self.kv_used += self._held(rid, ctx)
            self._join_decode(rid, ctx, int(self.out[rid]) - (ctx - int(self.inp[rid])))
        seqs = self.batch + len(self.prefill)
        while self.waiting and seqs < self.p.max_sequences:
            rid = self.waiting[0]
            prompt = int(self.inp[rid])
            need = self._held(rid, prompt + 1)  # the prompt and the slot of the token its prefill emits
            if self.kv_used + need > self.cap_kv and seqs > 0:
                break
            self.waiting.popleft()
            self.kv_used += need
            self.prefill.append([rid, prompt, prompt])
            self.prefill_left += prompt
            seqs += 1

    def _held(self, rid: int, context: int) -> float:
        """KV tokens a request holds at `context` tokens: its blocks so far (paged), or its prompt and whole
        output reserved up front (reserve, the catalog's serve.kv.tokens_per_sequence)."""
        if self.admission == PAGED:
            return context + self.frag
        return int(self.inp[rid]) + int(self.out[rid]) + self.frag

    def _leave(self, rid: int) -> int:
        """Take a decoding request out of the batch and give its KV blocks back; its context."""
        ctx = self.start_context.pop(rid) + (self.iteration - self.start_iteration.pop(rid))
        del self.finish_at[rid]
        self.batch -= 1
        self.context -= ctx
        self.kv_used -= self._held(rid, ctx)
        return ctx

    def _join_decode(self, rid: int, context: int, left: int) -> None:
        """The request has its first token (or resumes after migration) and `left` tokens to generate."""
        if left <= 0:
            self._finish(rid)
            self.kv_used -= self._held(rid, context)
            return
        self.start_iteration[rid] = self.iteration
        self.start_context[rid] = context
        self.finish_at[rid] = self.iteration + left
        heapq.heappush(self.running, (self.iteration + left, rid))
        self.batch += 1
        self.context += context

    def _finish(self, rid: int) -> None:
        self.log.finish_s[rid] = self.t

    def _complete(self) -> None:
        while self.running and self.running[0][0] <= self.iteration:
            f, rid = heapq.heappop(self.running)
            if self.finish_at.get(rid) != f:
                continue
            self._leave(rid)
            self._finish(rid)

    def _preempt(self) -> None:
        """Out of KV blocks: the most recently started decoding request gives its blocks back and waits at
        the head of the queue to recompute (vLLM's default for single sequences)."""
        rid = max(self.start_iteration, key=lambda r: (self.start_iteration[r], r))
        ctx = self._leave(rid)
        # Recompute: the prompt plus the tokens generated so far are prefilled again; the output left shrinks.
        generated = ctx - int(self.inp[rid])
        self.inp[rid] = ctx
        self.out[rid] -= generated
        self.waiting.appendleft(rid)
        self.log.preemptions[rid] += 1

    # ---- advancing --------------------------------------------------------------------------------------
    def advance(self, until: float) -> None:
        """Run iterations until the replica's clock reaches `until` (or it idles before)."""
        while True:
            self._admit()
            if self.batch == 0 and not self.prefill:
                if self.inbound and self.inbound[0][0] <= until:
                    gap = max(0.0, self.inbound[0][0] - self.t)
                    self.energy_j += self.watt_scale * (self.p_light + self.rest_w) * gap
                    self.t += gap
                    continue
                if until > self.t:
                    self.energy_j += self.watt_scale * (self.p_light + self.rest_w) * (until - self.t)
                    self.t = until
                return
            if self.t >= until:
                return
            limit = self.running[0][0] - self.iteration if self.running else 1 << 40
            if self.admission == PAGED and self.batch:
                room = self.cap_kv - self.kv_used
                if room < self.batch:
                    self._preempt()
                    continue
                limit = min(limit, int(room // self.batch))
            if self.prefill:
                c = self.p.chunk_tokens
                head_left = self.prefill[0][1]
                full = (head_left - 1) // c  # iterations of full chunks before the head's last one
                if full > 0 and self.prefill_left >= full * c:
                    n, times = self._stretch(until - self.t, c, min(full, limit))
                    self._run(n, times)
                    self.prefill[0][1] -= n * c
                    self.prefill_left -= n * c
                    self._complete()
                    continue
                self._chunk_iteration(c)
                self._complete()
                continue
            n, times = self._stretch(until - self.t, 0.0, limit)
            self._run(n, times)
            self._complete()

    def _chunk_iteration(self, c: int) -> None:
        """One iteration whose chunk finishes the head prompt and starts the next ones (FIFO)."""
        used = min(c, self.prefill_left)
        self._run(1, self._times(1, used))
        self.prefill_left -= used
        budget = used
        while self.prefill and budget > 0:
            head = self.prefill[0]
            take = min(budget, head[1])
            head[1] -= take
            budget -= take
            if head[1] > 0:
                break
            self.prefill.popleft()
            rid, _, prompt = head
            if np.isnan(self.log.first_token_s[rid]):
                self.log.first_token_s[rid] = self.t
            # The prefill's last iteration emits the first token (its KV slot was taken at admission).
            self.tokens_out += 1
            self._join_decode(rid, prompt + 1, int(self.out[rid]) - 1)
