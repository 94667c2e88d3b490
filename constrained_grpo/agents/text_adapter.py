"""The text rollout adapter: P prompts x G sampled completions for the GRPO trainer.

It works with any single-step text task (observation: the prompt, a ``str``; action: the
completion, a ``str``; Contract 1 costs) and any :class:`~constrained_grpo.agents.lm_base.TextPolicy`;
it knows nothing of math. One :meth:`TextRolloutAdapter.collect`:

1. draw P reset seeds; ``env.reset(seed=s)`` gives each group's prompt;
2. repeat every prompt G times and sample all ``P x G`` completions in one batch, with
   per-token log-probabilities (the trainer's ``logp_old``);
3. score each completion with ``env.reset(seed=s); env.step(text)`` and stack
   ``[reward, costs...]`` into ``components [P, G, 1+K]``.

``env_steps`` of a batch is the number of completions (each is one env step of the
single-step task); the generated tokens are in ``info["tokens"]``.

Prompts that do not fit the policy's context with room for ``min_new_tokens`` are
skipped and replaced by the next seed (counted in ``info["skipped_prompts"]``), so a
sweep never stops on one long question; if none of ``max_redraws`` prompts fits, a
``ValueError`` says which limit to raise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from constrained_grpo.agents.lm_base import Generation, TextPolicy
from constrained_grpo.agents.trainer import RolloutBatch
from constrained_grpo.constraints import Constraint, costs_from_info, get_constraints, override_limits
from constrained_grpo.registry import EvalResult
from constrained_grpo.tasks import make_env

__all__ = ["TextData", "TextRolloutAdapter", "is_text_env"]


def is_text_env(env: gym.Env) -> bool:
    """Whether ``env`` takes and gives text (``gymnasium.spaces.Text`` observation and action)."""
    return isinstance(env.observation_space, gym.spaces.Text) and isinstance(env.action_space, gym.spaces.Text)


@dataclass
class TextData:
    """The text payload of a :class:`RolloutBatch`: the generation and the group seeds."""

    generation: Generation
    seeds: np.ndarray
    texts: list[str]


class TextRolloutAdapter:
    """Group sampling of completions on a single-step text task.

    Args:
        env_id: a registered text task.
        env_kwargs: keywords for ``gymnasium.make``.
        limits: override of the task's limits (``{name: limit}`` or one per constraint).
        seed: seeds the prompt draws and the token sampling.
        max_new_tokens: cap on a completion's tokens (also bounded by the context).
        min_new_tokens: a prompt must leave at least this many tokens of context.
        max_redraws: prompts tried per group before giving up on a too-long task.
        sample_temperatures: MDP-GRPO's multi-temperature sampling (arXiv 2606.06058): sample
            i of each group is drawn at temperature ``T[i mod len(T)]``; its log-probability
            is the policy's. None: every sample at the policy's temperature.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any] | None = None,
        limits: Sequence[float] | Mapping[str, float] | None = None,
        seed: int = 0,
        max_new_tokens: int = 96,
        min_new_tokens: int = 8,
        max_redraws: int = 100,
        sample_temperatures: Sequence[float] | None = None,
    ):
        self.sample_temperatures = None if sample_temperatures is None else tuple(float(t) for t in sample_temperatures)
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.env = make_env(env_id, **self.env_kwargs)
        if not is_text_env(self.env):
            raise TypeError(
                f"{env_id} is not a text task (observation {self.env.observation_space}, action "
                f"{self.env.action_space}); the text adapter needs gymnasium.spaces.Text for both"
            )
        self.constraints: tuple[Constraint, ...] = override_limits(get_constraints(self.env), limits)
        self.constraint_names = tuple(c.name for c in self.constraints)
        self.limits = np.array([c.limit for c in self.constraints], dtype=np.float64)
        if max_new_tokens < 1 or min_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} and min_new_tokens={min_new_tokens} must be >= 1")
        self.max_new_tokens = int(max_new_tokens)
        self.min_new_tokens = int(min_new_tokens)
        self.max_redraws = int(max_redraws)
        self.rng = np.random.default_rng([int(seed), 0x7E])
        self.generator = torch.Generator().manual_seed(int(seed))
        self.skipped_prompts = 0

    # --- prompts ----------------------------------------------------------------------
    def prompts_for_seeds(self, seeds: Sequence[int]) -> list[str]:
        """The prompt of each reset seed."""
        return [self.env.reset(seed=int(s))[0] for s in seeds]

    def _draw(self, policy: TextPolicy, num_groups: int) -> tuple[np.ndarray, list[str], list[list[int]], int]:
        room = policy.max_context - self.min_new_tokens
        seeds: list[int] = []
        prompts: list[str] = []
        ids: list[list[int]] = []
        skipped = 0
        while len(seeds) < num_groups:
            s = int(self.rng.integers(0, 2**31 - 1))
            prompt = self.env.reset(seed=s)[0]
            enc = policy.encode_prompts([prompt])[0]
            if len(enc) > room:
                skipped += 1
                if skipped > self.max_redraws * num_groups:
                    raise ValueError(
                        f"{skipped} prompts of {self.env_id} in a row need more than {room} tokens of the "
                        f"policy's {policy.max_context}-token context (with {self.min_new_tokens} left for the answer); "
                        "use a model with a longer context or a task with shorter questions"
                    )
                continue
            seeds.append(s)
            prompts.append(prompt)
            ids.append(enc)
        return np.asarray(seeds, dtype=np.int64), prompts, ids, skipped

    # --- scoring ----------------------------------------------------------------------
    def score(self, seeds: Sequence[int], texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """``(rewards [N], costs [N, K], infos)`` of completion ``texts[n]`` for seed ``seeds[n]``."""
        k = len(self.constraints)
        rewards = np.zeros(len(texts))
        costs = np.zeros((len(texts), k))
        infos = []
        for n, (s, text) in enumerate(zip(seeds, texts)):
            self.env.reset(seed=int(s))
            _, reward, _, _, info = self.env.step(text)
            rewards[n] = float(reward)
            costs[n] = costs_from_info(info, k)
            infos.append(info)
        return rewards, costs, infos

    # --- RolloutAdapter -----------------------------------------------------------------
    def collect(self, policy: nn.Module, num_groups: int, group_size: int) -> RolloutBatch:
        """``num_groups`` prompts x ``group_size`` sampled completions each."""
        seeds, _, ids, skipped = self._draw(policy, num_groups)
        self.skipped_prompts += skipped
        repeated = [p for p in ids for _ in range(group_size)]
        if self.sample_temperatures is None:
            gen = policy.generate(repeated, self.max_new_tokens, generator=self.generator)
        else:
            temps = [self.sample_temperatures[i % len(self.sample_temperatures)] for i in range(group_size)] * num_groups
            gen = policy.generate(repeated, self.max_new_tokens, generator=self.generator, sample_temperatures=temps)
        texts = [policy.decode(gen.completion_ids(b)) for b in range(len(repeated))]
        sample_seeds = np.repeat(seeds, group_size)
        rewards, costs, infos = self.score(sample_seeds, texts)
        components = np.concatenate([rewards[:, None], costs], axis=1).reshape(num_groups, group_size, -1)
        lengths = gen.lengths.numpy().astype(np.int64)
        correct = [bool(i.get("correct", r > 0)) for i, r in zip(infos, rewards)]
        return RolloutBatch(
            components=components,
            logp_old=gen.logp,
            mask=gen.mask,
            env_steps=len(texts),
            lengths=lengths,
            data=TextData(gen, seeds, texts),
            info={
                "tokens": float(lengths.sum()),
                "unfinished_frac": float((~gen.finished).float().mean()),
                "accuracy": float(np.mean(correct)),
                "skipped_prompts": float(skipped),
            },
        )

    def log_probs(self, policy: nn.Module, batch: RolloutBatch, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logp, entropy)`` ``[n, T]`` of samples ``index`` under ``policy`` (with grad).

        Only the columns a minibatch needs are computed (its longest completion, its
        longest prompt); the rest of the ``T`` columns are zero and masked anyway.
        """
        gen: Generation = batch.data.generation
        mask = gen.mask[index]
        t_used = max(1, int(mask.sum(dim=1).max()))
        pmask = gen.prompt_mask[index]
        lp_used = int(pmask.sum(dim=1).max())
        # Prompts are left-padded: their real tokens are the last columns.
        logp, entropy = policy.completion_logprobs(
            gen.prompt_ids[index][:, -lp_used:], pmask[:, -lp_used:], gen.tokens[index][:, :t_used], mask[:, :t_used]
        )
        width = gen.tokens.shape[1]
        if t_used < width:
            pad = torch.zeros(logp.shape[0], width - t_used, dtype=logp.dtype)
            logp, entropy = torch.cat([logp, pad], dim=1), torch.cat([entropy, pad], dim=1)
        return logp, entropy

    # --- evaluation -------------------------------------------------------------------
    def evaluate(
        self,
        policy: TextPolicy,
        n_episodes: int,
        first_seed: int,
        deterministic: bool = True,
        generator: torch.Generator | None = None,
        batch_size: int = 128,
    ) -> tuple[EvalResult, dict[str, float]]:
        """``n_episodes`` problems from reset seeds ``first_seed + i``, one completion each.

        Greedy decoding when ``deterministic``, sampling otherwise. Returns the per-episode
        result (lengths in tokens) and summary rates (``accuracy``, ``unfinished_frac``).
        Prompts that do not fit the context score as an empty completion.
        """
        if n_episodes < 1:
            raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
        seeds = np.arange(first_seed, first_seed + n_episodes)
        prompts = self.prompts_for_seeds(seeds)
        ids = policy.encode_prompts(prompts)
        room = policy.max_context - self.min_new_tokens
        texts = [""] * n_episodes
        lengths = np.zeros(n_episodes, dtype=np.int64)
        unfinished = 0
        fits = [i for i in range(n_episodes) if len(ids[i]) <= room]
        policy.eval()
        for start in range(0, len(fits), batch_size):
            chunk = fits[start:start + batch_size]
            gen = policy.generate([ids[i] for i in chunk], self.max_new_tokens, greedy=deterministic, generator=generator)
            for b, i in enumerate(chunk):
                texts[i] = policy.decode(gen.completion_ids(b))
                lengths[i] = int(gen.mask[b].sum())
            unfinished += int((~gen.finished).sum())
        rewards, costs, infos = self.score(seeds, texts)
        summary = {
            "accuracy": float(np.mean([bool(i.get("correct", r > 0)) for i, r in zip(infos, rewards)])),
            "unfinished_frac": unfinished / n_episodes,
            "skipped_prompts": float(n_episodes - len(fits)),
        }
        return EvalResult(returns=rewards, costs=costs, lengths=lengths), summary

    def close(self) -> None:
        self.env.close()
