"""Non-finite values stop training: the errors every algorithm raises and the checks at the source.

A NaN or infinite observation, reward, cost, loss or parameter stops a run with one of these
``FloatingPointError`` subclasses naming the value, after every earlier iteration was logged
(Contract 2). They live in the core so that the GRPO agents and the baselines share them
without importing each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "NonFiniteError",
    "NonFiniteObservationError",
    "NonFiniteRolloutError",
    "NonFiniteUpdateError",
    "check_finite_observations",
    "check_finite_parameters",
    "logged_note",
]


class NonFiniteError(FloatingPointError):
    """A NaN or infinite value reached training: the run stops instead of going on corrupted."""


class NonFiniteRolloutError(NonFiniteError):
    """A reward or cost of a rollout is NaN or infinite."""


class NonFiniteObservationError(NonFiniteRolloutError):
    """An observation the task returned is NaN or infinite."""


class NonFiniteUpdateError(NonFiniteError):
    """A loss, gradient or parameter of the policy update is NaN or infinite."""


def logged_note(logged: int | None) -> str:
    """What a stopped run kept, for its error message: ``logged`` iterations were logged
    before the failure (None: the caller says it)."""
    if logged is None:
        return ""
    if logged <= 0:
        return " (no iteration had been logged)"
    return f" (the {logged} iteration{'s' if logged > 1 else ''} before it {'were' if logged > 1 else 'was'} logged)"


def check_finite_observations(obs: np.ndarray, where: str, logged: int | None = None) -> None:
    """Raise :class:`NonFiniteObservationError` if ``obs`` (a batch, one row per env) holds a NaN/inf.

    A NaN observation makes NaN logits, whose argmax is always action 0, and NaN gradients
    that turn every weight NaN while reward and cost stay finite: caught here, at the source.
    """
    finite = np.isfinite(obs)
    if finite.all():
        return
    rows = np.flatnonzero(~finite.reshape(len(obs), -1).all(axis=1))
    raise NonFiniteObservationError(
        f"{where}: non-finite observation from env(s) {rows[:8].tolist()} "
        f"({int((~finite).sum())} NaN/inf value(s)); training stopped"
        f"{logged_note(logged)}. Check the task's observation for NaN or inf."
    )


def check_finite_parameters(module: Any, where: str, logged: int | None = None) -> None:
    """Raise :class:`NonFiniteUpdateError` naming the first parameter of ``module`` holding a NaN/inf."""
    import torch

    for name, param in module.named_parameters():
        data = param.detach()
        finite = np.isfinite(data.numpy()).all() if data.device.type == "cpu" else torch.isfinite(data).all()
        if not bool(finite):
            raise NonFiniteUpdateError(
                f"{where}: parameter {name!r} became NaN or infinite; training stopped"
                f"{logged_note(logged)}. Lower the learning rate or check the task's values."
            )
