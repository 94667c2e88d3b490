"""The math family as TRL reward and cost functions over a ``datasets.Dataset``.

:func:`math_task` wraps a registered math task (``Math/ChainSum-v0``, ``Math/WordProblems-v0``
with ``path=`` for a JSONL file, ``Math/RG*`` for reasoning-gym, ...). Its
:meth:`MathTRLTask.dataset` turns reset seeds into rows

    {"prompt": str, "answer": "7" | "-7/3", "reduced": bool, "uid": str, "problem_seed": int}

and its reward / cost functions score a completion exactly as the task's env does
(the env's ``score_row``, which scores as its ``step`` does): reward = correct (0/1),
costs = ``length`` (more than ``max_tokens``), ``format`` (no final ``#### <number>``) and
``banned`` (a banned pattern), each an indicator whose batch mean is a violation rate to
hold under the task's limit. The functions follow TRL's reward-function signature
``f(prompts, completions, completion_ids, **columns) -> list[float]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


__all__ = ["LENGTH_UNITS", "MathTRLTask", "RewardFunc", "completion_text", "math_task"]

#: How the ``length`` cost counts a completion: characters (the env's default unit) or the
#: policy's own tokens (``completion_ids``, as TRL generated them).
LENGTH_UNITS: tuple[str, ...] = ("char", "token")

RewardFunc = Callable[..., list[float]]

#: Seed stream of the training problems (the text agent draws from the same one).
_TRAIN_STREAM = 0x7E


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or the last message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], Mapping):
        content = completion[-1].get("content", "")
        if isinstance(content, str):
            return content
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    raise TypeError(f"a completion must be a str or a list of chat messages, got {type(completion).__name__}")


@dataclass
class MathTRLTask:
    """A math task's problems, reward function and cost functions for TRL.

    Attributes:
        task: the task id.
        env: the unwrapped env of a text task (the math family's ``MathEnv``): its
            ``problem_row`` and ``score_row`` give the dataset and score completions.
        length_unit: ``char`` or ``token`` (:data:`LENGTH_UNITS`).
    """

    task: str
    env: Any
    length_unit: str = "char"

    def __post_init__(self) -> None:
        if self.length_unit not in LENGTH_UNITS:
            raise ValueError(f"length_unit={self.length_unit!r}; choose one of {list(LENGTH_UNITS)}")

    # --- constraints --------------------------------------------------------------------
    @property
    def constraint_names(self) -> tuple[str, ...]:
        return tuple(self.env.cost_names)

    @property
    def limits(self) -> list[float]:
        """The limit ``d_k`` of each cost, in :attr:`constraint_names` order."""
        return [float(c.limit) for c in self.env.constraints]

    # --- problems -----------------------------------------------------------------------
    def problem(self, seed: int) -> Any:
        """The problem ``reset(seed=seed)`` poses (the env's own object)."""
        return self.env.problem_for_seed(int(seed))

    def rows(self, seeds: Sequence[int]) -> dict[str, list[Any]]:
        """The dataset columns (module docstring) of the problems of reset ``seeds`` (``problem_row``)."""
        cols: dict[str, list[Any]] = {"prompt": [], "answer": [], "reduced": [], "uid": [], "problem_seed": []}
        for s in seeds:
            for key, value in self.env.problem_row(int(s)).items():
                cols[key].append(value)
            cols["problem_seed"].append(int(s))
        return cols

    @staticmethod
    def train_seeds(n: int, seed: int = 0) -> list[int]:
        """``n`` reset seeds drawn from ``seed`` (the text agent's training stream)."""
        rng = np.random.default_rng([int(seed), _TRAIN_STREAM])
        return [int(s) for s in rng.integers(0, 2**31 - 1, size=int(n))]

    def dataset(self, n: int, seed: int = 0, seeds: Sequence[int] | None = None) -> Any:
        """A ``datasets.Dataset`` of ``n`` problems (reset seeds drawn from ``seed``, or ``seeds``)."""
        try:
            from datasets import Dataset
        except ImportError:
            raise ImportError("the TRL path needs datasets; pip install 'constrained-grpo[trl]'") from None
        if seeds is None:
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(f"n={n!r} must be an integer >= 1 (the number of problems)")
            seeds = self.train_seeds(n, seed)
        return Dataset.from_dict(self.rows(seeds))

    # --- scoring ------------------------------------------------------------------------
    def score(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        answer: Sequence[str],
        reduced: Sequence[bool],
        uid: Sequence[str],
        completion_ids: Sequence[Sequence[int]] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rewards [N], costs [N, K])`` of ``completions``, as ``MathEnv.step`` scores them."""
        n = len(completions)
        if not (len(prompts) == len(answer) == len(reduced) == len(uid) == n):
            raise ValueError(
                f"got {n} completions but {len(prompts)} prompts, {len(answer)} answers, {len(uid)} uids; "
                "pass the dataset's answer, reduced and uid columns"
            )
        if self.length_unit == "token" and completion_ids is None:
            raise ValueError("length_unit='token' needs completion_ids (TRL passes them); or use length_unit='char'")
        rewards = np.zeros(n)
        costs = np.zeros((n, len(self.constraint_names)))
        for i in range(n):
            text = completion_text(completions[i])[: self.env.max_completion_chars]
            tokens = len(text) if self.length_unit == "char" else len(completion_ids[i])  # type: ignore[index]
            prompt = prompts[i] if isinstance(prompts[i], str) else completion_text(prompts[i])
            s = self.env.score_row(prompt, answer[i], reduced[i], uid[i], text, tokens)
            rewards[i] = s.reward
            costs[i] = s.cost_vector(self.constraint_names)
        return rewards, costs

    def _scorer(self, name: str, column: int | None) -> RewardFunc:
        def func(prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str], reduced: Sequence[bool],
                 uid: Sequence[str], completion_ids: Sequence[Sequence[int]] | None = None, **_: Any) -> list[float]:
            rewards, costs = self.score(prompts, completions, answer, reduced, uid, completion_ids)
            values = rewards if column is None else costs[:, column]
            return [float(v) for v in values]

        func.__name__ = name
        func.__qualname__ = name
        func.__doc__ = "correct answer (1/0)" if column is None else f"cost {name}: 1 if violated, else 0"
        return func

    def reward_funcs(self) -> list[RewardFunc]:
        """``[correct]``: 1 if the final answer equals the problem's answer."""
        return [self._scorer("correct", None)]

    def cost_funcs(self) -> list[RewardFunc]:
        """One indicator per constraint, named after it, in :attr:`constraint_names` order."""
        return [self._scorer(name, k) for k, name in enumerate(self.constraint_names)]


def math_task(task: str = "Math/ChainSum-v0", length_unit: str = "char", **env_kwargs: Any) -> MathTRLTask:
    """The math task ``task`` for TRL; ``env_kwargs`` override its registered options
    (``limits={"length": 0.2}``, ``path="problems.jsonl"``, ``max_tokens=200``, ...)."""
    from constrained_grpo.tasks import make_env, task_info

    env = make_env(task, **env_kwargs)
    base = env.unwrapped
    # Reached through the registry: a text task whose env scores rows as it scores steps.
    if not (task_info(task).family.text and callable(getattr(base, "score_row", None))):
        env.close()
        raise ValueError(f"task {task!r} is not a math task; pick a Math/* id (cgrpo tasks lists them)")
    return MathTRLTask(task, base, length_unit)
