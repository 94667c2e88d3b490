"""Constrained GRPO for TRL users (extra ``[trl]``; docs/trl.md).

- :class:`ConstrainedGRPOTrainer`: TRL's ``GRPOTrainer`` with cost functions, limits and
  Lagrange multipliers; the advantages come from :mod:`constrained_grpo.agents.advantages`.
- :func:`math_task`: the math family's problems as a ``datasets.Dataset`` and its reward
  (correct) and costs (length, format, banned) as TRL reward functions.
- :func:`char_tokenizer`, :func:`tiny_llama`: a tokenizer and a Llama built locally.
- :class:`TRLAgent` and the algorithm entry points ``constrained_grpo.trl:cgrpo``,
  ``:grpo_screw``, ``:cgrpo_gdpo``, ``:grpo`` for ``cgrpo train`` / ``cgrpo bench``.

Importing this package imports neither TRL nor transformers: each name loads its module
on first use, so that the leaderboard can check the algorithm names without the extra.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ConstrainedGRPOTrainer",
    "MathTRLTask",
    "TRLAgent",
    "TRLAgentConfig",
    "advantage_spec",
    "cgrpo",
    "cgrpo_gdpo",
    "char_tokenizer",
    "grpo",
    "grpo_screw",
    "math_task",
    "tiny_llama",
]

_MODULES: dict[str, str] = {
    "ConstrainedGRPOTrainer": "trainer",
    "advantage_spec": "trainer",
    "MathTRLTask": "rewards",
    "math_task": "rewards",
    "char_tokenizer": "models",
    "tiny_llama": "models",
    "TRLAgent": "agent",
    "TRLAgentConfig": "agent",
    "cgrpo": "agent",
    "cgrpo_gdpo": "agent",
    "grpo": "agent",
    "grpo_screw": "agent",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'constrained_grpo.trl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"constrained_grpo.trl.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
