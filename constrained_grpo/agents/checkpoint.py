"""A saved GRPO agent's files, shared by the control and text agents.

A saved agent is a directory::

    model.safetensors   policy (``policy.*``), reference (``reference.*``), Adam moments (``optim.*``),
                        the optimistic step's last update (``optimism.*``, with ``policy_optimism``)
    config.json         what rebuilds the agent
    state.json          iteration, env steps, wall time, multiplier state
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from constrained_grpo.options import CheckpointError, read_saved_json, reading_checkpoint

__all__ = ["CONFIG_FILE", "STATE_FILE", "WEIGHTS_FILE", "load_trained_state"]

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
STATE_FILE = "state.json"


def load_trained_state(src: Path, policy: torch.nn.Module, trainer: Any, weights: str, what: str) -> None:
    """Load a saved agent's weights (policy, reference policy, optimiser) and trainer state
    (multipliers, counters) from directory ``src`` into ``policy`` and ``trainer`` (a
    ``GRPOTrainer``); a missing or damaged file is a ``CheckpointError`` naming it."""
    if not (src / WEIGHTS_FILE).is_file():
        raise CheckpointError(f"{src / WEIGHTS_FILE} is missing: {src} is not a complete saved agent; save it again")
    with reading_checkpoint(src / WEIGHTS_FILE, weights):
        tensors = load_file(str(src / WEIGHTS_FILE))
        policy.load_state_dict({k[len("policy."):]: v for k, v in tensors.items() if k.startswith("policy.")})
        ref = {k[len("reference."):]: v for k, v in tensors.items() if k.startswith("reference.")}
        if ref and trainer.reference is not None:
            trainer.reference.load_state_dict(ref)
        trainer.load_optimizer_tensors(tensors)
    state = read_saved_json(src / STATE_FILE, (), what)
    with reading_checkpoint(src / STATE_FILE, "trainer state (multipliers, counters)"):
        trainer.load_state(state)
