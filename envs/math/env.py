"""The single-step math env: a prompt in, a completion out, a reward and K costs back.

One episode is one problem: ``reset(seed=s)`` picks the problem of ``s`` (the same ``s``
always gives the same prompt, so a GRPO group of G completions shares it), ``step(text)``
scores the completion and terminates. ``info`` of the step (Contract 1)::

    {"costs": float64 (K,), "cost": float, "correct": bool, "answer": str | None,
     "target": str, "form": str | None, "num_tokens": int, "cut": bool, "uid": str}

Spaces: observation ``Text(charset=CHARSET, min_length=1, max_length=max_prompt_chars)``
(the prompt), action ``Text(charset=CHARSET, max_length=max_completion_chars)``.

Handling of bad input (documented so that a sweep never crashes on a model's output):

* any ``str`` is accepted as an action, also characters outside the charset; a non-string
  action is a ``TypeError`` naming the fix;
* a completion longer than ``max_completion_chars`` (longer than any model's context) is
  cut to its first ``max_completion_chars`` characters before scoring, and ``info["cut"]``
  is True; its length cost is 1 (the budget is smaller) and, its end being lost, it
  usually has no answer in the required form;
* a prompt longer than ``max_prompt_chars`` is a ``ValueError`` at ``reset`` naming the
  problem and the option to raise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from constrained_grpo.constraints import Constraint
from constrained_grpo.envs.math.extract import MAX_EXPONENT, format_answer, parse_number
from constrained_grpo.envs.math.problems import CHARSET, Problem, ProblemSource, make_source
from constrained_grpo.envs.math.scoring import (
    COST_DESCRIPTIONS,
    COST_NAMES,
    DEFAULT_BANNED_PATTERNS,
    DEFAULT_LIMITS,
    Score,
    ScoreRules,
    score_completion,
)
from constrained_grpo.envs.math.solutions import sample_styles, worked_solution

__all__ = ["MathEnv"]


class MathEnv(gym.Env[str, str]):
    """Answer one math problem per episode; reward = correct, costs = length/format/banned.

    Args:
        source: ``chainsum``, ``arithmetic``, ``jsonl`` or ``rg:<dataset>``
            (:func:`~constrained_grpo.envs.math.problems.make_source`).
        difficulty: level 1-3 of the generator.
        path: the JSONL file of source ``jsonl`` (None: the built-in sample).
        constraints: which costs the task reports, in order (subset of ``length``,
            ``format``, ``banned``).
        limits: ``{name: limit}`` overriding :data:`DEFAULT_LIMITS` (violation rates).
        max_tokens: the length budget of a completion, in ``length_unit``.
        reward_mode: ``lenient`` (any readable final answer) or ``strict`` (required form only).
        banned_patterns: regular expressions of the ``banned`` cost (None: the defaults).
        length_unit: ``char`` (a character is a token of the small policy) or
            ``hf:<local model dir>`` (tokens of that Hugging Face tokenizer; needs ``[llm]``).
        base_seed: seed of a reasoning-gym dataset.
        on_missing_answer: JSONL lines without an answer: ``error`` or ``skip``.
        max_prompt_chars: bound of the observation space.
        max_completion_chars: bound of the action space; longer completions are cut.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        source: str = "chainsum",
        difficulty: int = 1,
        path: str | None = None,
        constraints: Sequence[str] = COST_NAMES,
        limits: Mapping[str, float] | None = None,
        max_tokens: int = 48,
        reward_mode: str = "lenient",
        banned_patterns: Sequence[str] | None = None,
        length_unit: str = "char",
        base_seed: int = 0,
        on_missing_answer: str = "error",
        max_prompt_chars: int = 4096,
        max_completion_chars: int = 2048,
        render_mode: str | None = None,
    ):
        names = tuple(constraints)
        unknown = [n for n in names if n not in COST_NAMES]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(f"constraints={names!r}; choose distinct names among {list(COST_NAMES)}")
        limits = dict(limits or {})
        bad = sorted(set(limits) - set(names))
        if bad:
            raise ValueError(f"limits given for {bad}, which this task does not report; its constraints are {list(names)}")
        self.constraints: tuple[Constraint, ...] = tuple(
            Constraint(n, limits.get(n, DEFAULT_LIMITS[n]), COST_DESCRIPTIONS[n], indicator=True) for n in names
        )
        self.cost_names = names
        self.rules = ScoreRules(
            max_tokens=max_tokens,
            reward_mode=reward_mode,
            banned_patterns=tuple(DEFAULT_BANNED_PATTERNS if banned_patterns is None else banned_patterns),
        )
        if max_prompt_chars < 1 or max_completion_chars < 1:
            raise ValueError("max_prompt_chars and max_completion_chars must be >= 1")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}; the math env supports None or 'ansi'")
        self.render_mode = render_mode
        self.source: ProblemSource = make_source(source, difficulty, path, base_seed, on_missing_answer)
        self.length_unit = length_unit
        self._count = _token_counter(length_unit)
        self.max_prompt_chars = int(max_prompt_chars)
        self.max_completion_chars = int(max_completion_chars)
        self.observation_space = spaces.Text(max_length=self.max_prompt_chars, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(max_length=self.max_completion_chars, min_length=0, charset=CHARSET)
        self._problem: Problem | None = None
        self._done = True
        self._last_completion = ""

    # --- problems ---------------------------------------------------------------------
    def problem_for_seed(self, seed: int) -> Problem:
        """The problem that ``reset(seed=seed)`` poses."""
        return self.source.problem(int(seed))

    @property
    def problem(self) -> Problem | None:
        """The current problem (None before the first reset)."""
        return self._problem

    # --- a dataset's rows, for trainers that keep problems in a table (the TRL path) ----
    def problem_row(self, seed: int) -> dict[str, Any]:
        """The problem of ``reset(seed=seed)`` as plain columns: ``prompt``, ``answer`` (exact,
        as text), ``reduced`` (whether the answer must be in lowest terms) and ``uid``."""
        p = self.problem_for_seed(int(seed))
        return {"prompt": p.prompt, "answer": format_answer(p.answer), "reduced": bool(p.reduced), "uid": p.uid}

    def score_row(self, prompt: str, answer: str, reduced: bool, uid: str, completion: str, num_tokens: int) -> Score:
        """Score ``completion`` for the problem a :meth:`problem_row` describes, exactly as
        :meth:`step` scores it (the completion cut at ``max_completion_chars``)."""
        # The answer column is data: read as a bounded literal, never Fraction() of any string
        # ("1e1000000000" would take minutes).
        value = parse_number(str(answer), allow_words=False)
        if value is None:
            raise ValueError(f"answer {str(answer)[:40]!r} is not a number literal (|exponent| <= {MAX_EXPONENT}); "
                             "give the exact answer as an integer, decimal or fraction a/b")
        problem = Problem(prompt, value, uid, "row", reduced=bool(reduced))
        return score_completion(problem, completion[: self.max_completion_chars], self.rules, int(num_tokens))

    def demonstrations(
        self, n: int, seed: int = 0, mixture: Mapping[str, float] | None = None
    ) -> list[tuple[str, str]]:
        """``n`` ``(prompt, completion)`` pairs of worked solutions for a supervised warm start.

        Problems come from reset seeds drawn from ``seed``; each solution's style is drawn
        from ``mixture`` (:data:`~constrained_grpo.envs.math.solutions.DEFAULT_MIXTURE`).
        """
        rng = np.random.default_rng([int(seed), 0xD3])
        seeds = rng.integers(0, 2**31 - 1, size=int(n))
        styles = sample_styles(int(n), rng, mixture)
        pairs = []
        for s, style in zip(seeds, styles):
            p = self.problem_for_seed(int(s))
            pairs.append((p.prompt, worked_solution(p, style, rng)))
        return pairs

    # --- gymnasium --------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        problem_seed = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        problem = self.problem_for_seed(problem_seed)
        if len(problem.prompt) > self.max_prompt_chars:
            raise ValueError(
                f"problem {problem.uid} has a prompt of {len(problem.prompt)} characters, more than "
                f"max_prompt_chars={self.max_prompt_chars}; raise max_prompt_chars or shorten the question"
            )
        self._problem = problem
        self._done = False
        self._last_completion = ""
        return problem.prompt, {"uid": problem.uid, "problem_seed": problem_seed}

    def score(self, completion: str, num_tokens: int | None = None) -> Score:
        """Score ``completion`` for the current problem without ending the episode."""
        if self._problem is None:
            raise gym.error.ResetNeeded("call reset() before scoring a completion")
        text = completion[: self.max_completion_chars]
        n = self._count(text) if num_tokens is None else int(num_tokens)
        return score_completion(self._problem, text, self.rules, n)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._problem is None or self._done:
            raise gym.error.ResetNeeded("the episode has ended (one step per problem); call reset() first")
        if not isinstance(action, str):
            raise TypeError(f"the action is the completion text, a str; got {type(action).__name__}: decode tokens first")
        cut = len(action) > self.max_completion_chars
        s = self.score(action)
        costs = s.cost_vector(self.cost_names)
        self._done = True
        self._last_completion = action[: self.max_completion_chars]
        info = {
            "costs": costs,
            "cost": float(costs.sum()),
            "correct": s.correct,
            "answer": s.answer_text,
            "target": format_answer(self._problem.answer),
            "form": s.form,
            "num_tokens": s.num_tokens,
            "cut": cut,
            "uid": self._problem.uid,
        }
        return self._problem.prompt, s.reward, True, False, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._problem is None:
            return None
        return f"Q: {self._problem.prompt}\nA: {self._last_completion}"


def _token_counter(length_unit: str) -> Any:
    """The function counting a completion's tokens in ``length_unit``."""
    if length_unit == "char":
        return len
    if isinstance(length_unit, str) and length_unit.startswith("hf:"):
        directory = length_unit[3:]
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ImportError(
                f"length_unit={length_unit!r} needs transformers; pip install 'constrained-grpo[llm]'"
            ) from None
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
    raise ValueError(f"length_unit={length_unit!r}; choose 'char' or 'hf:<local model directory>'")
