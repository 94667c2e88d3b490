"""The Contract-2 Constrained GRPO agent for text tasks (a language-model policy).

``TextGRPOAgent(env_id, seed, preset="standard", algo="cgrpo", lm={...}, **options)``:

* ``options`` are :class:`~constrained_grpo.agents.config.GRPOConfig` fields, applied on
  top of the GRPO preset and the text preset's overrides (:data:`TEXT_PRESETS`);
* ``lm`` holds :class:`LMConfig` fields: the policy (a fresh small transformer, a saved
  one, or a Hugging Face model from a local directory), its sampling and its supervised
  warm start.

The policy, the :class:`~constrained_grpo.agents.text_adapter.TextRolloutAdapter` and the
shared :class:`~constrained_grpo.agents.trainer.GRPOTrainer` are built here; the trainer
holds no text-specific code. Every variant of
:data:`~constrained_grpo.agents.variants.VARIANTS` (``cgrpo``, ``grpo-screw``, ...) runs on a
text task through :func:`make_text_grpo_agent` with the variant's options.

Saved runs (a directory, as the control agent's)::

    model.safetensors   policy.*, reference.*, optim.*
    config.json         {"kind": "text", "algo", "env_id", "seed", "config": {...}, "lm": {...}}
    state.json          iteration, env steps, wall time, multiplier state
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from constrained_grpo.agents.checkpoint import CONFIG_FILE, STATE_FILE, WEIGHTS_FILE, load_trained_state
from constrained_grpo.agents.config import GRPOConfig, make_config
from constrained_grpo.agents.lm_sft import SFTResult, cached_warm_start, warmstart_cache_dir
from constrained_grpo.agents.lm_tokenizer import CharTokenizer
from constrained_grpo.agents.lm_transformer import TinyCausalLM, TinyLMConfig
from constrained_grpo.agents.text_adapter import TextRolloutAdapter
from constrained_grpo.agents.trainer import GRPOTrainer
from constrained_grpo.files import atomic_write_text
from constrained_grpo.options import (
    CheckpointError,
    coerce_fields,
    merge_options,
    option_names,
    read_saved_json,
    reading_checkpoint,
    with_options,
)
from constrained_grpo.registry import EvalResult

__all__ = [
    "LMConfig",
    "TEXT_PRESETS",
    "TextGRPOAgent",
    "build_text_policy",
    "load_text_agent",
    "make_text_grpo_agent",
]



@dataclass(frozen=True)
class LMConfig:
    """The language-model policy of a text agent: which model, how it samples, its warm start."""

    # --- which model ----------------------------------------------------------------
    init_from: str | None = None
    """None: a fresh small transformer, warm-started below. A directory: a saved
    :class:`~constrained_grpo.agents.lm_transformer.TinyCausalLM`. ``hf:<directory>``: a
    Hugging Face causal LM loaded from a local directory only (extra ``[llm]``)."""
    gguf_file: str | None = None
    """With ``hf:<directory>``: a GGUF file in that directory to load (``gguf`` package)."""
    n_layers: int = 2
    """Transformer blocks of a fresh small model."""
    d_model: int = 128
    """Width of a fresh small model."""
    n_heads: int = 4
    """Attention heads of a fresh small model."""
    d_ff: int = 512
    """MLP width of a fresh small model."""
    context: int = 160
    """Context (prompt + completion tokens) of a fresh small model."""

    # --- sampling -------------------------------------------------------------------
    temperature: float = 1.0
    """The policy is ``softmax(logits / temperature)``, for sampling and for the ratio alike."""
    max_new_tokens: int = 128
    """Cap on a completion's tokens; a longer one is cut (unfinished) and usually costs."""
    sample_temperatures: tuple[float, ...] | None = None
    """MDP-GRPO's multi-temperature sampling (arXiv 2606.06058): sample i of a group is drawn at
    temperature ``T[i mod len(T)]`` (the release: 0.1, 0.4, 0.7, 1.0 for groups of 4) while the
    ratio keeps the policy's ``temperature``. None: every sample at ``temperature``."""

    # --- supervised warm start ------------------------------------------------------
    sft_steps: int = 1500
    """Adam steps of next-token training on the task's demonstrations; 0 skips it."""
    sft_batch_size: int = 32
    """Demonstrations per step."""
    sft_lr: float = 2e-3
    """Peak learning rate (linear warm-up, cosine decay to 10%)."""
    sft_examples: int = 20000
    """Demonstrations drawn from the task (``env.unwrapped.demonstrations``)."""
    sft_mixture: Mapping[str, float] | None = None
    """Solution styles of the demonstrations (None: the task's default mixture)."""

    def __post_init__(self) -> None:
        coerce_fields(self)
        for name in ("n_layers", "d_model", "n_heads", "d_ff", "context", "max_new_tokens", "sft_batch_size", "sft_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"lm.{name}={value!r} must be an integer >= 1")
        if not isinstance(self.sft_steps, int) or self.sft_steps < 0:
            raise ValueError(f"lm.sft_steps={self.sft_steps!r} must be an integer >= 0")
        if self.sample_temperatures is not None and (
            not self.sample_temperatures
            or not all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in self.sample_temperatures)
        ):
            raise ValueError(f"lm.sample_temperatures={self.sample_temperatures!r} must be finite values > 0 (or null)")
        for name in ("temperature", "sft_lr"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"lm.{name}={value!r} must be finite and > 0")

    @classmethod
    def valid_options(cls) -> list[str]:
        return option_names(cls)

    def updated(self, overrides: Mapping[str, Any]) -> "LMConfig":
        """A copy with ``overrides``; an unknown name is an error listing the valid ones."""
        return with_options(self, overrides, "lm")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TextPreset:
    """A text preset: GRPO overrides (on the GRPO preset of the same name) and the LM config."""

    grpo: Mapping[str, Any] = field(default_factory=dict)
    lm: LMConfig = field(default_factory=LMConfig)


# The GRPO knobs that differ for a transformer on text: a smaller learning rate (the
# control presets' 3e-3 destroys a warm-started LM in a few steps), one pass per batch,
# and faster multipliers: indicator costs move by tenths, so dual ascent at 0.05 would
# take hundreds of iterations to matter.
_TEXT_GRPO: dict[str, Any] = {"lr": 2e-4, "epochs": 1, "minibatches": 2, "max_grad_norm": 1.0,
                              "multiplier": {"rule": "dual_ascent", "lr": 1.0}}

#: Named presets for text tasks (``preset=`` of :class:`TextGRPOAgent`).
TEXT_PRESETS: dict[str, TextPreset] = {
    # Seconds: unit tests and smoke runs (an untrained-ish model).
    "quick": TextPreset(
        {**_TEXT_GRPO, "num_groups": 4, "group_size": 4, "minibatches": 1},
        LMConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, context=96, max_new_tokens=48,
                 sft_steps=20, sft_batch_size=16, sft_examples=200),
    ),
    # The math task's runs of `cgrpo bench --preset standard` (its math scope).
    "standard": TextPreset({**_TEXT_GRPO, "num_groups": 8, "group_size": 8}),
    "paper": TextPreset({**_TEXT_GRPO, "num_groups": 16, "group_size": 16, "minibatches": 4}),
}


def build_text_policy(lm: LMConfig, env: Any = None, seed: int = 0, log: Callable[[dict[str, Any]], None] | None = None) -> tuple[nn.Module, SFTResult | None]:
    """The policy ``lm`` describes, warm-started on ``env``'s demonstrations if it is fresh."""
    if lm.init_from is not None and lm.init_from.startswith("hf:"):
        from constrained_grpo.agents.lm_hf import load_hf_policy

        return load_hf_policy(lm.init_from[3:], gguf_file=lm.gguf_file, temperature=lm.temperature), None
    if lm.init_from is not None:
        return TinyCausalLM.from_pretrained(lm.init_from, temperature=lm.temperature), None
    tokenizer = CharTokenizer()
    config = TinyLMConfig(
        vocab_size=tokenizer.vocab_size, context=lm.context, d_model=lm.d_model,
        n_layers=lm.n_layers, n_heads=lm.n_heads, d_ff=lm.d_ff,
    )
    torch.manual_seed(seed)
    policy = TinyCausalLM(config, tokenizer, lm.temperature)
    if lm.sft_steps == 0:
        return policy, None
    demos = getattr(getattr(env, "unwrapped", env), "demonstrations", None)
    if demos is None:
        raise ValueError(
            "this task offers no demonstrations for the warm start (env.unwrapped.demonstrations); "
            "pass lm={'init_from': <checkpoint>} or lm={'sft_steps': 0}"
        )
    pairs = demos(lm.sft_examples, seed=seed, mixture=lm.sft_mixture)
    # Cached per (architecture, seed, SFT settings, demonstrations) when the harness names a
    # cache directory: every algorithm of a task and seed then shares one warm start.
    model_key = {"seed": int(seed), "architecture": asdict(config), "temperature": lm.temperature}
    result = cached_warm_start(policy, pairs, lm.sft_steps, lm.sft_batch_size, lm.sft_lr, seed=seed,
                               model_key=model_key, cache_dir=warmstart_cache_dir(), log=log)
    return policy, result


class TextGRPOAgent:
    """Constrained GRPO (and its variants) on a single-step text task.

    Args:
        env_id: a registered text task (e.g. ``Math/ChainSum-v0``).
        seed: fixes the policy init, the warm start, the prompts and the sampling.
        preset: ``quick``, ``standard`` or ``paper`` (:data:`TEXT_PRESETS`).
        algo: the registry name, recorded in ``config.json``.
        lm: :class:`LMConfig` fields (or an ``LMConfig``).
        **options: :class:`~constrained_grpo.agents.config.GRPOConfig` fields.
    """

    def __init__(
        self,
        env_id: str,
        seed: int = 0,
        preset: str = "standard",
        algo: str = "cgrpo",
        lm: Mapping[str, Any] | LMConfig | None = None,
        *,
        config: GRPOConfig | None = None,
        **options: Any,
    ):
        self.env_id = env_id
        self.seed = int(seed)
        self.algo = algo
        self.preset = preset
        if config is not None:
            if options or not isinstance(lm, LMConfig):
                raise ValueError("a resolved config comes with its LMConfig and no further options")
            self.config, self.lm = config, lm
        else:
            self.config, self.lm = text_config(preset, lm, **options)
        cfg = self.config
        if cfg.deploy != "last":
            raise ValueError(
                f"deploy={cfg.deploy!r}: the text agent deploys its last iterate only; "
                "use deploy='last' (the remedies keep snapshots of control policies)"
            )
        if cfg.num_threads > 0:
            # The small model is fastest single-threaded at these sizes, and the machine is shared.
            torch.set_num_threads(cfg.num_threads)
        torch.manual_seed(self.seed)
        self.adapter = TextRolloutAdapter(
            env_id, cfg.env_kwargs, cfg.limits, seed=self.seed, max_new_tokens=self.lm.max_new_tokens,
            sample_temperatures=self.lm.sample_temperatures,
        )
        self.constraints = self.adapter.constraints
        self.policy, self.sft_result = build_text_policy(self.lm, self.adapter.env, self.seed)
        self.trainer = GRPOTrainer(cfg, self.adapter, self.policy, torch.Generator().manual_seed(self.seed + 1))
        self.last_eval: dict[str, float] = {}

    # --- Contract 2 -------------------------------------------------------------------
    @property
    def multipliers(self) -> np.ndarray:
        """Current multipliers ``(K,)``; empty for an unconstrained agent."""
        if self.trainer.multiplier is None:
            return np.zeros(0)
        return self.trainer.multiplier.values.copy()

    @property
    def lambda_max(self) -> float | None:
        """The bound of the multipliers' projection [0, lambda_max] (None when unconstrained)."""
        return None if self.trainer.multiplier is None else float(self.trainer.multiplier.config.lambda_max)

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> "TextGRPOAgent":
        """Train on ``total_env_steps`` completions, calling ``log(record)`` every iteration."""
        self.policy.train()
        self.trainer.train(total_env_steps, log)
        self.policy.eval()
        return self

    def act(self, prompt: str, deterministic: bool = True) -> str:
        """The completion for one prompt (greedy when ``deterministic``)."""
        ids = self.policy.encode_prompts([prompt])
        gen = self.policy.generate(ids, self.lm.max_new_tokens, greedy=deterministic, generator=self.adapter.generator)
        return self.policy.decode(gen.completion_ids(0))

    def evaluate(self, n_episodes: int = 10, deterministic: bool = True, seed: int | None = None) -> EvalResult:
        """``n_episodes`` problems from reset seeds ``seed + i`` (default ``eval_seed``), sampling
        with a generator seeded by ``seed``; summary in ``last_eval``."""
        seed = self.config.eval_seed if seed is None else int(seed)
        generator = torch.Generator().manual_seed(seed)
        result, summary = self.adapter.evaluate(self.policy, n_episodes, seed, deterministic, generator)
        self.last_eval = summary
        return result

    def save(self, path: str | Path) -> Path:
        """Write weights (safetensors), ``config.json`` and ``state.json`` into directory ``path``."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {f"policy.{k}": v.detach().contiguous() for k, v in self.policy.state_dict().items()}
        if self.trainer.reference is not None:
            tensors.update({f"reference.{k}": v.detach().contiguous() for k, v in self.trainer.reference.state_dict().items()})
        tensors.update(self.trainer.optimizer_tensors())
        tmp = out / (WEIGHTS_FILE + ".tmp")
        save_file(tensors, str(tmp))
        os.replace(tmp, out / WEIGHTS_FILE)
        meta = {
            "kind": "text", "algo": self.algo, "env_id": self.env_id, "seed": self.seed, "preset": self.preset,
            "config": self.config.to_dict(), "lm": self.lm.to_dict(),
        }
        atomic_write_text(out / CONFIG_FILE, json.dumps(meta, indent=2, sort_keys=True))
        atomic_write_text(out / STATE_FILE, json.dumps(self.trainer.state(), indent=2))
        return out

    def load(self, path: str | Path) -> "TextGRPOAgent":
        """Restore weights, optimiser and multipliers saved by :meth:`save` into this agent."""
        src = Path(path)
        meta = read_saved_json(src / CONFIG_FILE, ("kind", "algo", "env_id", "config"), "saved text agent")
        with reading_checkpoint(src / CONFIG_FILE, "agent config"):
            saved = GRPOConfig.from_dict(meta["config"])
        if meta.get("kind") != "text" or meta["env_id"] != self.env_id or saved != self.config:
            raise ValueError(
                f"{src} holds a {meta.get('algo')!r} run on {meta.get('env_id')!r} with another config; "
                "use constrained_grpo.agents.text_agent.load_text_agent(path) to rebuild that agent"
            )
        load_trained_state(src, self.policy, self.trainer, "language-model weights and optimiser state", "saved text agent")
        return self


def text_config(preset: str = "standard", lm: Mapping[str, Any] | LMConfig | None = None, **options: Any) -> tuple[GRPOConfig, LMConfig]:
    """The whole configuration of a text agent: the text preset's GRPO options, then
    ``options`` (a ``multiplier`` dict merges key by key); its language model from the
    preset's, updated by ``lm``."""
    if preset not in TEXT_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(TEXT_PRESETS)}")
    text = TEXT_PRESETS[preset]
    overrides = merge_options(text.grpo, options)
    return make_config(preset, **overrides), (lm if isinstance(lm, LMConfig) else text.lm.updated(dict(lm or {})))


def _text_options(config: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The variant's options under the user's (``algo`` picks the variant)."""
    from constrained_grpo.agents.variants import VARIANTS

    config = dict(config)
    algo = config.pop("algo", "cgrpo")
    if algo not in VARIANTS:
        raise ValueError(f"unknown GRPO variant {algo!r}; choose one of {sorted(VARIANTS)}")
    return algo, merge_options(VARIANTS[algo].options, config)


def resolve_text_config(env_id: str, **config: Any) -> dict[str, Any]:
    """What ``make_text_grpo_agent(env_id, **config)`` configures, as JSON values, without
    building the model: ``{"kind": "text", "algo", "preset", "config", "lm"}``. The task's
    ``text`` option rows (``TaskInfo.algo_defaults("text")``, e.g. a longer warm start) sit
    over the variant's options and under the user's; an ``lm`` dict merges key by key."""
    from constrained_grpo.tasks import task_info

    rows = task_info(env_id).algo_defaults("text")
    config = merge_options(*[{k: v for k, v in row.items() if k != "lm"} for row in rows], config)
    task_lm = {k: v for row in rows for k, v in dict(row.get("lm") or {}).items()}
    if task_lm and not isinstance(config.get("lm"), LMConfig):  # a whole LMConfig given is taken as it is
        config["lm"] = {**task_lm, **dict(config.get("lm") or {})}
    algo, options = _text_options(config)
    preset = options.pop("preset", "standard")
    lm = options.pop("lm", None)
    cfg, lm_cfg = text_config(preset, lm, **options)
    return {"kind": "text", "algo": algo, "preset": preset, "config": cfg.to_dict(), "lm": lm_cfg.to_dict()}


def make_text_grpo_agent(env_id: str, seed: int = 0, **config: Any) -> TextGRPOAgent:
    """Entry point for a GRPO variant on a text task (same options as ``make_grpo_agent``):
    the agent of :func:`resolve_text_config`, built by :func:`text_from_resolved`.

    ``algo`` selects the row of :data:`~constrained_grpo.agents.variants.VARIANTS` whose
    options apply (``cgrpo`` by default); explicit options override them, and a
    ``multiplier={...}`` dict is merged into the variant's multiplier options.
    """
    return text_from_resolved(env_id, seed, resolve_text_config(env_id, **config))


def text_from_resolved(env_id: str, seed: int, resolved: Mapping[str, Any]) -> TextGRPOAgent:
    """The text agent of a configuration :func:`resolve_text_config` gave (or ``config.json`` recorded)."""
    return TextGRPOAgent(env_id, seed=seed, preset=resolved["preset"], algo=resolved["algo"],
                         lm=LMConfig().updated(resolved["lm"]), config=GRPOConfig.from_dict(resolved["config"]))


def load_text_agent(path: str | Path) -> TextGRPOAgent:
    """Rebuild the text agent saved in directory ``path`` (no warm start: weights are loaded)."""
    file = Path(path) / CONFIG_FILE
    meta = read_saved_json(file, ("kind", "env_id", "seed", "algo", "config", "lm"), "saved text agent")
    if not isinstance(meta["lm"], dict) or not isinstance(meta["config"], dict):
        raise CheckpointError(f"{file}: 'lm' and 'config' must be JSON objects; the file was edited or damaged")
    with reading_checkpoint(file, "text agent recorded in it"):
        lm = LMConfig().updated({**meta["lm"], "sft_steps": 0}) if meta["lm"].get("init_from") is None else LMConfig().updated(meta["lm"])
        agent = TextGRPOAgent(meta["env_id"], seed=meta["seed"], preset=meta.get("preset", "standard"), algo=meta["algo"], lm=lm, **meta["config"])
    return agent.load(path)
