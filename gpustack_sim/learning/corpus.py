"""The training text as bytes: a byte-level tokenisation (vocabulary 256), a training part and a held-out
tail that is never trained on, and the batches each replica draws, fixed by (seed, data position, replica)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpustack_compiler.base.errors import InputError

VOCAB = 256


@dataclass(frozen=True)
class Corpus:
    train: np.ndarray  # uint8 tokens
    heldout: np.ndarray
    sha256: str
    name: str


def load_corpus(path: Path, holdout_fraction: float, context: int) -> Corpus:
    data = path.read_bytes()
    tokens = np.frombuffer(data, dtype=np.uint8)
    cut = int(len(tokens) * (1 - holdout_fraction))
    train, heldout = tokens[:cut], tokens[cut:]
    if min(len(train), len(heldout)) < 2 * (context + 1):
        raise InputError(f"{path}: corpus of {len(tokens)} bytes is too short for context {context}")
    return Corpus(train, heldout, hashlib.sha256(data).hexdigest(), path.name)


def windows(tokens: np.ndarray, starts: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and next-token targets of the sequences starting at `starts` (any shape)."""
    idx = starts[..., None] + np.arange(context + 1)
    seq = tokens[idx].astype(np.int32)
    return seq[..., :-1], seq[..., 1:]


def train_batch(corpus: Corpus, seed: int, position: int, replicas: int, batch: int, context: int):
    """The batch of every replica at one data position: the same position gives the same data, which is what
    a rollback recomputes and a replay applies again."""
    rng = np.random.default_rng([seed, position])
    starts = rng.integers(0, len(corpus.train) - context - 1, size=(replicas, batch))
    return windows(corpus.train, starts, context)


def heldout_batches(corpus: Corpus, batches: int, batch: int, context: int):
    """Evenly spaced held-out sequences, the same for every condition and seed."""
    n = batches * batch
    starts = np.linspace(0, len(corpus.heldout) - context - 1, n).astype(np.int64).reshape(batches, batch)
    return windows(corpus.heldout, starts, context)
