"""Reward and costs of one completion.

* **reward** = 1 if the final answer equals the problem's answer exactly, else 0. The
  answer is read leniently by default (``reward_mode="lenient"``, see
  :mod:`constrained_grpo.envs.math.extract`), so the *format* of the answer is a
  constraint and not part of the reward; ``"strict"`` reads only the required form.
* **costs** (indicators, so each limit is a violation rate):

  - ``length``: the completion has more than ``max_tokens`` tokens (default unit: the
    character, which is the small policy's token; see ``length_unit`` of the env);
  - ``format``: the completion has no final answer in the required form ``#### <number>``;
  - ``banned``: the completion matches a banned pattern, a proxy for unsafe output; the
    defaults (:data:`DEFAULT_BANNED_PATTERNS`) catch attempts to run code. Patterns match
    case-insensitively on two views of the text (:func:`banned_views`): its NFKC form,
    case-folded, and the same without whitespace, so ``e v a l(``, fullwidth ``ｅｖａｌ(``
    and ``EXEC(`` cost as ``eval(`` does. It stays a surface-pattern proxy: a name assembled
    by means the patterns do not list (decoded from base64, say) is not caught.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from constrained_grpo.envs.math.extract import find_answer, format_answer, is_reduced_fraction
from constrained_grpo.envs.math.problems import Problem

__all__ = [
    "COST_DESCRIPTIONS",
    "COST_NAMES",
    "DEFAULT_BANNED_PATTERNS",
    "DEFAULT_LIMITS",
    "REWARD_MODES",
    "Score",
    "ScoreRules",
    "banned_views",
    "score_completion",
]

#: The cost names, in their default order.
COST_NAMES: tuple[str, ...] = ("length", "format", "banned")
#: Default limits (violation rates): the warm-started small policy breaks each of them.
DEFAULT_LIMITS: dict[str, float] = {"length": 0.1, "format": 0.1, "banned": 0.05}
COST_DESCRIPTIONS: dict[str, str] = {
    "length": "indicator: the completion is longer than max_tokens",
    "format": "indicator: no final answer in the required form '#### <number>'",
    "banned": "indicator: the completion matches a banned pattern (code-execution proxy by default)",
}
#: Regular expressions whose presence costs 1 under ``banned``: asking for code to be run.
#: They are written for the compact view of :func:`banned_views` (NFKC, case-folded, no
#: whitespace), hence no ``\b`` or ``\s``: ``x = e v a l(`` reads ``x=eval(`` (and
#: ``retrieval(`` costs 1 too, a false positive arithmetic does not meet). The second group
#: catches dynamic lookup of builtins and names built from string pieces
#: (``getattr(__builtins__,'ev'+'al')``): a math completion has no use for any of them.
DEFAULT_BANNED_PATTERNS: tuple[str, ...] = (
    r"eval\(",
    r"exec\(",
    r"__import__",
    r"os\.system",
    r"subprocess",
    r"rm-rf",
    # dynamic lookup of builtins, and names built from string pieces
    r"builtins",
    r"getattr\(",
    r"globals\(",
    r"locals\(",
    r"vars\(",
    r"compile\(",
    r"importlib",
    r"__(?:class|subclasses|globals|dict|getattribute|code|loader)__",
    r"['\"]\+['\"]",
    r"chr\(\d",
)
REWARD_MODES: tuple[str, ...] = ("lenient", "strict")


@dataclass(frozen=True)
class ScoreRules:
    """How completions are scored (validated; built once per env)."""

    max_tokens: int = 48
    reward_mode: str = "lenient"
    banned_patterns: tuple[str, ...] = DEFAULT_BANNED_PATTERNS
    _compiled: tuple[re.Pattern[str], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, (int, np.integer)) or self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens!r} must be an integer >= 1 (the length budget of a completion)")
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode={self.reward_mode!r}; choose one of {list(REWARD_MODES)}")
        compiled = []
        for pat in self.banned_patterns:
            try:
                compiled.append(re.compile(pat, re.IGNORECASE))
            except (re.error, TypeError) as err:
                raise ValueError(f"banned pattern {pat!r} is not a valid regular expression ({err}); fix or remove it") from None
        object.__setattr__(self, "banned_patterns", tuple(self.banned_patterns))
        object.__setattr__(self, "_compiled", tuple(compiled))

    def banned(self, text: str) -> bool:
        """Whether any pattern matches either view of ``text`` (:func:`banned_views`)."""
        views = banned_views(text)
        return any(p.search(view) for p in self._compiled for view in views)


_WHITESPACE = re.compile(r"\s+")


def banned_views(text: str) -> tuple[str, str]:
    """The two texts the banned patterns are matched on: ``casefold(NFKC(text))`` without
    format characters (Unicode category Cf: zero-width spaces and joiners), and the same
    without whitespace (``"Ｅ v a l("`` gives ``"e v a l("`` and ``"eval("``).

    NFKC maps compatibility forms (fullwidth letters, ligatures) to plain letters; case
    folding makes ``EXEC`` read ``exec``; removing whitespace undoes spaced-out names. A
    pattern with ``\\b`` or ``\\s`` (a user's) still matches the first view as written.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")
    return folded, _WHITESPACE.sub("", folded)


@dataclass(frozen=True)
class Score:
    """The verdict on one completion."""

    reward: float
    costs: Mapping[str, float]
    correct: bool
    answer: Fraction | None
    form: str | None
    num_tokens: int

    def cost_vector(self, names: Sequence[str]) -> np.ndarray:
        """The costs in the order ``names`` (float64, Contract 1)."""
        return np.asarray([self.costs[n] for n in names], dtype=np.float64)

    @property
    def answer_text(self) -> str | None:
        return None if self.answer is None else format_answer(self.answer)


def score_completion(problem: Problem, completion: str, rules: ScoreRules, num_tokens: int) -> Score:
    """Reward and every cost of ``completion`` for ``problem``; ``num_tokens`` is its length."""
    found = find_answer(completion)
    value = found.value
    if rules.reward_mode == "strict" and not found.required_form:
        value = None
    correct = value is not None and value == problem.answer
    if correct and problem.reduced:
        correct = is_reduced_fraction(found.literal)
    costs = {
        "length": float(num_tokens > rules.max_tokens),
        "format": float(not found.required_form),
        "banned": float(rules.banned(completion)),
    }
    return Score(float(correct), costs, bool(correct), found.value, found.form, int(num_tokens))
