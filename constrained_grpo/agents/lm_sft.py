"""Supervised warm start of a text policy on ``(prompt, completion)`` demonstrations.

Next-token cross-entropy on the completion tokens and the end token only (the prompt is
given, not learned), Adam with a linear warm-up and a cosine decay. Demonstrations come
from the task (``env.unwrapped.demonstrations(n, seed)``, duck-typed like
``optimum``), so this module knows nothing of any task family.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from constrained_grpo.agents.lm_transformer import TinyCausalLM

__all__ = ["SFTResult", "encode_pairs", "supervised_warm_start"]


@dataclass(frozen=True)
class SFTResult:
    """What the warm start did: steps, final loss (mean of the last 10% of steps), time."""

    steps: int
    final_loss: float
    wall_s: float
    skipped: int


def encode_pairs(
    model: TinyCausalLM, pairs: Sequence[tuple[str, str]]
) -> tuple[list[list[int]], list[int], int]:
    """Token ids ``<bos> prompt <sep> completion <eos>`` and the prompt lengths.

    Pairs longer than the model's context are dropped (their count is returned third).
    """
    tok = model.tokenizer
    seqs, prompt_lens, skipped = [], [], 0
    for prompt, completion in pairs:
        p = tok.encode_prompt(prompt)
        seq = p + tok.encode(completion) + [tok.eos_id]
        if len(seq) > model.max_context:
            skipped += 1
            continue
        seqs.append(seq)
        prompt_lens.append(len(p))
    return seqs, prompt_lens, skipped


def _batch(seqs: list[list[int]], prompt_lens: list[int], index: np.ndarray, pad: int) -> tuple[torch.Tensor, ...]:
    width = max(len(seqs[i]) for i in index)
    ids = torch.full((len(index), width), pad, dtype=torch.int64)
    valid = torch.zeros((len(index), width), dtype=torch.bool)
    target_mask = torch.zeros((len(index), width), dtype=torch.bool)
    for row, i in enumerate(index):
        s = seqs[i]
        ids[row, : len(s)] = torch.as_tensor(s)
        valid[row, : len(s)] = True
        # Position t predicts token t + 1: learn the completion and <eos>, not the prompt.
        target_mask[row, prompt_lens[i] - 1 : len(s) - 1] = True
    return ids, valid, target_mask


def supervised_warm_start(
    model: TinyCausalLM,
    pairs: Sequence[tuple[str, str]],
    steps: int = 1500,
    batch_size: int = 64,
    lr: float = 2e-3,
    warmup: int = 50,
    seed: int = 0,
    log: Callable[[dict[str, Any]], None] | None = None,
    log_every: int = 100,
    bucket_batches: int = 8,
) -> SFTResult:
    """Train ``model`` in place on ``pairs`` for ``steps`` Adam steps of ``batch_size``.

    Batches come from windows of ``bucket_batches * batch_size`` demonstrations of
    similar length (about halves the compute on mixed-length demonstrations).
    """
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps={steps} and batch_size={batch_size} must be >= 1")
    seqs, prompt_lens, skipped = encode_pairs(model, pairs)
    if not seqs:
        raise ValueError(
            f"none of the {len(pairs)} demonstrations fits the model's context of {model.max_context} tokens; "
            "use a longer context or shorter demonstrations"
        )
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:
        if step < warmup:
            return lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    pad = model.tokenizer.pad_id
    # Length bucketing: a batch is drawn from a window of similar lengths in the sorted
    # order, so padding (which costs as much compute as real tokens) stays small; the
    # window spans several batches so that a batch still mixes styles of similar length.
    order = np.argsort([len(s) for s in seqs], kind="stable")
    # The loss is a token *sum* divided by a constant (batch size x mean completion length
    # of the whole set), not by the batch's own token count: with bucketing, a per-batch
    # mean would weight each example by 1 / (length of its bucket) and under-learn the long
    # styles (measured: verbose openers at a fifth of their share in the data).
    mean_targets = float(np.mean([len(s) - p for s, p in zip(seqs, prompt_lens)]))
    window = min(len(seqs), bucket_batches * batch_size)
    for step in range(steps):
        start_at = int(rng.integers(0, len(seqs) - window + 1))
        index = order[start_at + rng.choice(window, size=min(batch_size, window), replace=False)]
        ids, valid, target_mask = _batch(seqs, prompt_lens, index, pad)
        logits = model(ids, valid)[:, :-1]
        targets = ids[:, 1:]
        m = target_mask[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits[m], targets[m], reduction="sum") / (len(index) * mean_targets)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if log is not None and (step + 1) % log_every == 0:
            log({"sft_step": step + 1, "sft_loss": float(np.mean(losses[-log_every:])), "wall_s": time.perf_counter() - start})
    model.eval()
    tail = losses[-max(1, steps // 10):]
    return SFTResult(steps=steps, final_loss=float(np.mean(tail)), wall_s=time.perf_counter() - start, skipped=skipped)
