"""What every language-model policy offers the text rollout adapter, and shared helpers.

A text policy (:class:`TextPolicy`) is an ``nn.Module`` that

* encodes prompts to token ids and decodes completions (``encode_prompts``, ``decode``),
* samples completions for a batch of prompts with their per-token log-probabilities
  (``generate`` -> :class:`Generation`), and
* re-evaluates the log-probabilities and entropies of given completions with gradients
  (``completion_logprobs``), for the clipped surrogate.

The policy *is* the temperature-scaled distribution ``softmax(logits / temperature)``:
sampling and re-evaluation both use ``temperature``, so the ratio of the first update
epoch is exactly 1 (up to float rounding) whatever the temperature.

Layout of a batch: prompts are **left**-padded to a common length ``Lp`` (``prompt_mask``
False on the padding), completions are right-aligned after them, ``T`` steps long;
``mask[b, t]`` is True on the sampled tokens up to and including the end-of-sequence
token. Tokens after the end are padding and never enter a loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

__all__ = ["Generation", "TextPolicy", "left_pad", "row_temperatures", "sample_from_logits", "token_logprobs_entropy"]


@dataclass
class Generation:
    """A batch of sampled completions.

    Attributes:
        prompt_ids: ``[B, Lp]`` int64, left-padded prompts.
        prompt_mask: ``[B, Lp]`` bool, True on real prompt tokens.
        tokens: ``[B, T]`` int64, the sampled tokens (padding after the end).
        logp: ``[B, T]`` float32, log-probability of each sampled token when it was sampled.
        mask: ``[B, T]`` bool, True on the completion's tokens (including its end token).
        finished: ``[B]`` bool, whether the completion ended with the end token (False: it
            hit ``max_new_tokens`` or the context).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    tokens: torch.Tensor
    logp: torch.Tensor
    mask: torch.Tensor
    finished: torch.Tensor

    @property
    def lengths(self) -> torch.Tensor:
        """Completion length in tokens, ``[B]`` (the end token counts)."""
        return self.mask.sum(dim=1)

    def completion_ids(self, b: int) -> list[int]:
        """The tokens of completion ``b`` without the end token."""
        n = int(self.mask[b].sum()) - int(self.finished[b])
        return self.tokens[b, :n].tolist()


@runtime_checkable
class TextPolicy(Protocol):
    """A language-model policy usable by :class:`~constrained_grpo.agents.text_adapter.TextRolloutAdapter`."""

    temperature: float

    @property
    def max_context(self) -> int:
        """Tokens the model can attend to (prompt + completion)."""

    def encode_prompts(self, prompts: Sequence[str]) -> list[list[int]]:
        """Token ids of each prompt, including any start/separator tokens."""

    def decode(self, ids: Sequence[int]) -> str:
        """The text of completion tokens (without the end token)."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        sample_temperatures: Sequence[float] | None = None,
    ) -> Generation:
        """Sample (or greedily decode) one completion per prompt; with ``sample_temperatures``
        (one per prompt) each is drawn at its own temperature (:func:`sample_from_logits`)."""

    def completion_logprobs(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logp, entropy)``, each ``[B, T]``, of ``tokens`` after the prompts (with grad)."""


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [B, Lp], mask [B, Lp])`` with every prompt right-aligned."""
    if not prompts:
        raise ValueError("no prompts to pad")
    width = max(len(p) for p in prompts)
    if width == 0:
        raise ValueError("every prompt is empty; a prompt needs at least one token")
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool)
    for b, p in enumerate(prompts):
        if len(p):
            ids[b, width - len(p):] = torch.as_tensor(list(p), dtype=torch.int64)
            mask[b, width - len(p):] = True
    return ids, mask


def row_temperatures(sample_temperatures: Sequence[float] | None, rows: int) -> torch.Tensor | None:
    """``[rows]`` sampling temperatures (None stays None); a wrong count or a value that is not
    finite and > 0 is an error naming it."""
    if sample_temperatures is None:
        return None
    temps = torch.as_tensor([float(t) for t in sample_temperatures], dtype=torch.float32)
    if temps.numel() != rows:
        raise ValueError(f"{temps.numel()} sampling temperatures for {rows} prompts; pass one per prompt")
    if not bool(torch.isfinite(temps).all() and (temps > 0).all()):
        raise ValueError(f"sampling temperatures {list(sample_temperatures)} must be finite and > 0")
    return temps


def sample_from_logits(
    logits: torch.Tensor,
    temperature: float,
    greedy: bool,
    generator: torch.Generator | None,
    sample_temperatures: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token [B], logp [B])`` from last-position ``logits [B, V]``.

    The log-probability is that of the temperature-scaled distribution (the policy's),
    also for a greedy pick. With ``sample_temperatures`` ``[B]`` row b is drawn from
    ``softmax(logits / T_b)`` instead (MDP-GRPO's multi-temperature sampling, arXiv
    2606.06058) and its log-probability is still the policy's, as in the release, whose
    trainer recomputes the old log-probabilities with the model at its one temperature: the
    samples are off-policy, without an importance correction.
    """
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    if greedy:
        token = logp_all.argmax(dim=-1)
    else:
        draw = logp_all
        if sample_temperatures is not None:
            draw = torch.log_softmax(logits.float() / sample_temperatures.float()[:, None], dim=-1)
        # Gumbel-max: one draw per row from `generator`, no normalisation pass.
        u = torch.rand(logp_all.shape, generator=generator).clamp_(1e-20, 1.0)
        token = (draw - torch.log(-torch.log(u))).argmax(dim=-1)
    return token, logp_all.gather(-1, token.unsqueeze(-1)).squeeze(-1)


def token_logprobs_entropy(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``(log pi(token), H[pi])`` of ``logits [B, T, V]`` at ``temperature``."""
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(dim=-1)
    return logp, entropy
