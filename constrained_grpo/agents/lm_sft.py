"""Supervised warm start of a text policy on ``(prompt, completion)`` demonstrations.

Next-token cross-entropy on the completion tokens and the end token only (the prompt is
given, not learned), Adam with a linear warm-up and a cosine decay. Demonstrations come
from the task (``env.unwrapped.demonstrations(n, seed)``, duck-typed like
``optimum``), so this module knows nothing of any task family.

A warm start depends only on the model's architecture, its seed, the SFT settings and the
demonstrations, so :func:`cached_warm_start` computes it once per such key in a cache
directory (:func:`warmstart_cache`, or the ``CGRPO_WARMSTART_CACHE`` environment variable)
and loads the same weights, bit for bit, in every later run of any algorithm.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from constrained_grpo.agents.lm_transformer import TinyCausalLM
from constrained_grpo.registry import WARMSTART_CACHE_ENV

__all__ = [
    "WARMSTART_CACHE_ENV",
    "SFTResult",
    "cached_warm_start",
    "encode_pairs",
    "supervised_warm_start",
    "warmstart_cache",
    "warmstart_cache_dir",
    "warmstart_key",
]


@dataclass(frozen=True)
class SFTResult:
    """What the warm start did: steps, final loss (mean of the last 10% of steps), time."""

    steps: int
    final_loss: float
    wall_s: float
    skipped: int
    cached: bool = False
    """True when the weights were loaded from the warm-start cache (``wall_s`` is then the
    original computation's time)."""


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


# --- warm-start cache ---------------------------------------------------------------

# WARMSTART_CACHE_ENV (constrained_grpo.registry) names the cache directory when no
# warmstart_cache context is active; unset or empty: no cache.
_CACHE_FORMAT = 1
_cache_dir: contextvars.ContextVar[Path | None] = contextvars.ContextVar("warmstart_cache", default=None)


@contextlib.contextmanager
def warmstart_cache(directory: str | Path | None) -> Iterator[None]:
    """Within this block, warm starts are cached in ``directory`` (None: not cached)."""
    token = _cache_dir.set(None if directory is None else Path(directory))
    try:
        yield
    finally:
        _cache_dir.reset(token)


def warmstart_cache_dir() -> Path | None:
    """The active cache directory: the :func:`warmstart_cache` context, else
    ``$CGRPO_WARMSTART_CACHE``, else None (no cache, the default for direct API use)."""
    active = _cache_dir.get()
    if active is not None:
        return active
    env = os.environ.get(WARMSTART_CACHE_ENV, "")
    return Path(env) if env else None


def warmstart_key(
    model_key: Mapping[str, Any],
    pairs: Sequence[tuple[str, str]],
    sft: Mapping[str, Any],
) -> tuple[str, dict[str, Any]]:
    """``(sha256 hex, key)``: the key is everything a warm start's weights depend on: the
    model's architecture and init seed (``model_key``), the SFT settings, the torch version
    and thread count, and the sha256 of the demonstrations themselves (so the task, its env kwargs and the
    demonstration mixture all enter through what they produce)."""
    demos = hashlib.sha256(json.dumps([list(p) for p in pairs], ensure_ascii=True).encode()).hexdigest()
    # torch's version and thread count enter because kernels may reduce in another order.
    key = {"format": _CACHE_FORMAT, "torch": torch.__version__, "threads": torch.get_num_threads(), "model": dict(model_key),
           "sft": dict(sft), "demonstrations": demos}
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest(), key


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace`` (a reader sees
    the old file or the whole new one, never a part)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the cache from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load_cached(model: TinyCausalLM, stem: Path, warn: bool) -> tuple[SFTResult, list[dict[str, Any]]] | None:
    """Load the cached warm start ``stem.{json,safetensors}`` into ``model``; None when it
    is missing, or (with a warning when ``warn``) unreadable, corrupt or of another shape.
    ``model`` is changed only when the whole entry checked out."""
    from safetensors.torch import load as load_tensors

    meta_path, weights_path = stem.with_suffix(".json"), stem.with_suffix(".safetensors")
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        data = weights_path.read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["weights_sha256"]:
            raise ValueError("weights checksum mismatch")
        state = load_tensors(data)
        own = model.state_dict()
        if set(state) != set(own) or any(state[k].shape != own[k].shape or state[k].dtype != own[k].dtype for k in own):
            raise ValueError("tensors do not match the model's parameters")
        result = SFTResult(**{**meta["result"], "cached": True})
        log_rows = [dict(row) for row in meta["log"]]
    except Exception as err:  # any unreadable entry is recomputed, never trusted
        if warn:
            warnings.warn(f"warm-start cache entry {stem} is unreadable ({type(err).__name__}: {err}); recomputing it", stacklevel=3)
        return None
    model.load_state_dict(state, strict=True)
    model.eval()
    return result, log_rows


def cached_warm_start(
    model: TinyCausalLM,
    pairs: Sequence[tuple[str, str]],
    steps: int,
    batch_size: int,
    lr: float,
    *,
    seed: int,
    model_key: Mapping[str, Any],
    cache_dir: str | Path | None = None,
    log: Callable[[dict[str, Any]], None] | None = None,
    log_every: int = 100,
) -> SFTResult:
    """:func:`supervised_warm_start` computed once per key (:func:`warmstart_key`) in
    ``cache_dir`` and loaded afterwards, bit for bit, with its log rows replayed to ``log``.

    ``model`` must be freshly initialised from the seed in ``model_key``. Two processes that
    miss the same entry serialise on a file lock: the second waits and loads. None: no cache.
    """
    if cache_dir is None:
        return supervised_warm_start(model, pairs, steps, batch_size, lr, seed=seed, log=log, log_every=log_every)
    digest, key = warmstart_key(
        model_key, pairs, {"steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed, "log_every": log_every}
    )
    directory = Path(cache_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / digest

    def replay(found: tuple[SFTResult, list[dict[str, Any]]]) -> SFTResult:
        if log is not None:
            for row in found[1]:
                log(dict(row))
        return found[0]

    found = _load_cached(model, stem, warn=False)
    if found is not None:
        return replay(found)
    with open(stem.with_suffix(".lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            found = _load_cached(model, stem, warn=True)
            if found is not None:
                return replay(found)
            rows: list[dict[str, Any]] = []

            def record(row: dict[str, Any]) -> None:
                rows.append(dict(row))
                if log is not None:
                    log(row)

            result = supervised_warm_start(model, pairs, steps, batch_size, lr, seed=seed, log=record, log_every=log_every)
            from safetensors.torch import save as save_tensors

            # Clones: tied parameters would otherwise share storage, which safetensors refuses.
            data = save_tensors({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()})
            _atomic_write(stem.with_suffix(".safetensors"), data)
            meta = {"key": key, "weights_sha256": hashlib.sha256(data).hexdigest(),
                    "result": {k: v for k, v in asdict(result).items() if k != "cached"}, "log": rows}
            _atomic_write(stem.with_suffix(".json"), json.dumps(meta, indent=1, sort_keys=True).encode())
            return result
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
