"""Problems with verifiable answers: built-in generators, reasoning-gym, GSM8K-style JSONL.

A :class:`ProblemSource` maps a seed to a :class:`Problem`, deterministically, so that
``env.reset(seed=s)`` fixes the prompt (a GRPO group shares it). Sources:

* ``chainsum`` and ``arithmetic``: built-in procedural generators (no extra dependency),
  with the intermediate steps kept so that worked solutions of any style can be written
  for the supervised warm start (:mod:`constrained_grpo.envs.math.solutions`).
* ``rg:<dataset>``: a `reasoning-gym <https://pypi.org/project/reasoning-gym/>`_ dataset
  (extra ``[math]``), e.g. ``rg:basic_arithmetic``, ``rg:chain_sum``,
  ``rg:fraction_simplification``, ``rg:gsm_symbolic``; offline and procedural. Item ``i``
  of a dataset built with ``seed=base_seed`` is problem ``seed % size``.
* ``jsonl``: a user file of GSM8K-style lines ``{"question": ..., "answer": "... #### 42"}``
  (:func:`load_jsonl`); without a path, a built-in sample of word problems written for
  this package.

Difficulty is an integer level 1-3 (:data:`DIFFICULTIES`): it selects term counts and
digit ranges of the generators (and of the reasoning-gym configs).

Prompts are normalised to printable ASCII (:func:`to_ascii`): the env's observation is a
``gymnasium.spaces.Text`` over that charset, and the small character-level policy reads
exactly those characters. A character with no ASCII form becomes ``?``.
"""

from __future__ import annotations

import json
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from constrained_grpo.envs.math.extract import format_answer, parse_number

__all__ = [
    "CHARSET",
    "DIFFICULTIES",
    "BUILTIN_SOURCES",
    "ListSource",
    "Problem",
    "ProblemFormatError",
    "ProblemSource",
    "ProceduralSource",
    "ReasoningGymSource",
    "SAMPLE_WORD_PROBLEMS",
    "Step",
    "is_charset_text",
    "load_jsonl",
    "make_source",
    "parse_jsonl_lines",
    "to_ascii",
]

#: The characters of prompts and completions: printable ASCII, newline and tab.
CHARSET: str = "".join(chr(c) for c in range(32, 127)) + "\n\t"
_CHARSET_SET = frozenset(CHARSET)
#: Difficulty levels understood by every source.
DIFFICULTIES: tuple[int, ...] = (1, 2, 3)
#: The built-in generators.
BUILTIN_SOURCES: tuple[str, ...] = ("chainsum", "arithmetic")

_ASCII_MAP = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
    "\u2212": "-", "\u00d7": "*", "\u22c5": "*", "\u00b7": "*", "\u00f7": "/", "\u2022": "*",
    "\u2026": "...", "\u00a0": " ", "\u20ac": "EUR", "\u00a3": "GBP", "\u00b0": " deg",
    "\r": "",
})


class ProblemFormatError(ValueError):
    """A problem file or record is malformed; the message names the place and the fix."""


def to_ascii(text: str) -> str:
    """``text`` in :data:`CHARSET`: NFKC, common symbols spelled out, anything else ``?``.

    >>> to_ascii("3 \\u00d7 4 \\u2212 1 \\u2192 11")
    '3 * 4 - 1 ? 11'
    """
    s = unicodedata.normalize("NFKC", text).translate(_ASCII_MAP)
    if all(ch in _CHARSET_SET for ch in s):
        return s
    return "".join(ch if ch in _CHARSET_SET else "?" for ch in s)


@dataclass(frozen=True)
class Step:
    """One worked step ``lhs op rhs = result`` (the built-in generators record them)."""

    lhs: int
    op: str
    rhs: int
    result: int

    def __str__(self) -> str:
        return f"{self.lhs} {self.op} {self.rhs} = {self.result}"


@dataclass(frozen=True)
class Problem:
    """A prompt with a verifiable numeric answer.

    Attributes:
        prompt: what the policy sees (ASCII, see :func:`to_ascii`); never empty.
        answer: the exact answer.
        uid: a stable identifier (``source:index``).
        source: the source name.
        expression: the arithmetic expression, ASCII, when the source has one.
        steps: the intermediate steps, in order (built-in generators only).
        solution: a reference worked solution ending in ``#### <answer>``, when known.
        reduced: the answer must be *written* in lowest terms (fraction simplification).
    """

    prompt: str
    answer: Fraction
    uid: str
    source: str
    expression: str = ""
    steps: tuple[Step, ...] = ()
    solution: str | None = None
    reduced: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ProblemFormatError(f"problem {self.uid!r} has an empty prompt; every problem needs a question")


class ProblemSource(Protocol):
    """Seeds to problems, deterministically."""

    name: str
    size: int | None  # number of distinct problems; None for an unbounded generator

    def problem(self, seed: int) -> Problem:
        """The problem of ``seed`` (same seed, same problem)."""


# --- built-in generators ---------------------------------------------------------------
# (terms, digits, operators) by difficulty. Level 1 is what the small policy learns in a
# minute of supervised training; level 3 needs carries over three digits.
_CHAIN_LEVELS: dict[int, tuple[tuple[int, int], tuple[int, int], str]] = {
    1: ((2, 3), (1, 1), "+"),
    2: ((2, 4), (1, 2), "+-"),
    3: ((3, 5), (1, 3), "+-"),
}
_ARITH_LEVELS: dict[int, tuple[int, str]] = {1: (9, "+-"), 2: (12, "+-*"), 3: (20, "+-*")}


def _number(rng: np.random.Generator, digits: tuple[int, int]) -> int:
    d = int(rng.integers(digits[0], digits[1] + 1))
    low = 0 if d == 1 else 10 ** (d - 1)
    return int(rng.integers(low, 10**d))


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def chain_sum_problem(seed: int, difficulty: int = 1) -> Problem:
    """``What is 5 + 3 + 2?``: a left-to-right chain of sums and differences."""
    (tmin, tmax), digits, ops = _CHAIN_LEVELS[difficulty]
    rng = np.random.default_rng([seed, 0xC5])
    n = int(rng.integers(tmin, tmax + 1))
    terms = [_number(rng, digits) for _ in range(n)]
    chosen = [ops[int(rng.integers(0, len(ops)))] for _ in range(n - 1)]
    steps: list[Step] = []
    total = terms[0]
    for op, t in zip(chosen, terms[1:]):
        new = _apply(total, op, t)
        steps.append(Step(total, op, t, new))
        total = new
    expr = " ".join([str(terms[0]), *[f"{op} {t}" for op, t in zip(chosen, terms[1:])]])
    return Problem(f"What is {expr}?", Fraction(total), f"chainsum{difficulty}:{seed}", "chainsum", expr, tuple(steps))


def arithmetic_problem(seed: int, difficulty: int = 2) -> Problem:
    """``Compute (4 * 3) - 7.``: two operations with precedence made explicit."""
    high, ops = _ARITH_LEVELS[difficulty]
    rng = np.random.default_rng([seed, 0xA7])
    a, b, c = (int(v) for v in rng.integers(0, high + 1, size=3))
    op1, op2 = (ops[int(i)] for i in rng.integers(0, len(ops), size=2))
    if difficulty == 1:
        r = _apply(a, op1, b)
        return Problem(f"Compute {a} {op1} {b}.", Fraction(r), f"arith1:{seed}", "arithmetic", f"{a} {op1} {b}", (Step(a, op1, b, r),))
    if rng.integers(0, 2) == 0:
        inner = _apply(a, op1, b)
        r = _apply(inner, op2, c)
        expr, steps = f"({a} {op1} {b}) {op2} {c}", (Step(a, op1, b, inner), Step(inner, op2, c, r))
    else:
        inner = _apply(b, op2, c)
        r = _apply(a, op1, inner)
        expr, steps = f"{a} {op1} ({b} {op2} {c})", (Step(b, op2, c, inner), Step(a, op1, inner, r))
    return Problem(f"Compute {expr}.", Fraction(r), f"arith{difficulty}:{seed}", "arithmetic", expr, steps)


_GENERATORS: dict[str, Callable[[int, int], Problem]] = {"chainsum": chain_sum_problem, "arithmetic": arithmetic_problem}


class ProceduralSource:
    """A built-in generator (``chainsum`` or ``arithmetic``) at a difficulty level."""

    size: int | None = None

    def __init__(self, name: str, difficulty: int = 1):
        if name not in _GENERATORS:
            raise ValueError(f"unknown built-in source {name!r}; choose one of {list(_GENERATORS)}")
        self.name = name
        self.difficulty = _check_difficulty(difficulty)
        self._make = _GENERATORS[name]

    def problem(self, seed: int) -> Problem:
        return self._make(int(seed), self.difficulty)


# --- reasoning-gym ---------------------------------------------------------------------
# Config overrides per difficulty. Level 3 is the dataset's own default.
_RG_LEVELS: dict[str, dict[int, dict[str, Any]]] = {
    "basic_arithmetic": {
        1: {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ("+", "-"), "allow_parentheses": False, "allow_negation": False},
        2: {"min_terms": 2, "max_terms": 4, "min_digits": 1, "max_digits": 2, "operators": ("+", "-", "*")},
        3: {},
    },
    "chain_sum": {
        1: {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1},
        2: {"min_terms": 2, "max_terms": 4, "min_digits": 1, "max_digits": 2},
        3: {"allow_negation": True},
    },
    "fraction_simplification": {
        1: {"max_value": 50, "max_factor": 10, "styles": ("plain",)},
        2: {"max_value": 200, "max_factor": 20},
        3: {},
    },
    "gsm_symbolic": {1: {}, 2: {}, 3: {}},  # the package supports difficulty 1.0 only
}
# gsm_symbolic's item generation slows down with the index, so it gets a small pool.
_RG_SIZES: dict[str, int] = {"gsm_symbolic": 1000}
_RG_DEFAULT_SIZE = 1_000_000
_RG_INSTALL_HINT = "pip install 'constrained-grpo[math]' (the reasoning-gym package)"


class ReasoningGymSource:
    """Problems of a reasoning-gym dataset; only numeric-answer datasets are accepted.

    Answers are parsed with this package's extractor, never with the dataset's own
    ``score_answer`` (some of those parse text with sympy); fraction simplification
    keeps its requirement that the answer be written in lowest terms.
    """

    def __init__(self, dataset: str, difficulty: int = 1, base_seed: int = 0, size: int | None = None):
        try:
            import reasoning_gym
        except ImportError:
            raise ImportError(f"source 'rg:{dataset}' needs reasoning-gym; {_RG_INSTALL_HINT}") from None
        self.dataset = dataset
        self.name = f"rg:{dataset}"
        self.difficulty = _check_difficulty(difficulty)
        overrides = dict(_RG_LEVELS.get(dataset, {}).get(self.difficulty, {}))
        self.size = int(size or _RG_SIZES.get(dataset, _RG_DEFAULT_SIZE))
        try:
            self._ds = reasoning_gym.create_dataset(dataset, seed=int(base_seed), size=self.size, **overrides)
        except Exception as err:  # unknown name or config: say which and what exists
            names = sorted(getattr(getattr(reasoning_gym, "factory", None), "DATASETS", {}))
            raise ValueError(f"reasoning-gym dataset {dataset!r} could not be built ({err}); available: {names}") from err

    def problem(self, seed: int) -> Problem:
        index = int(seed) % self.size
        item = self._ds[index]
        meta = item.get("metadata", {})
        answer = parse_number(str(item["answer"]), allow_words=False)
        if answer is None:
            raise ProblemFormatError(
                f"reasoning-gym {self.dataset}[{index}] has a non-numeric answer {item['answer']!r}; "
                "only datasets with numeric answers can be scored by this task family"
            )
        solution = None
        cot = meta.get("answer_cot")
        if isinstance(cot, str) and "####" in cot:
            solution = to_ascii(cot).strip()
        expression = to_ascii(str(meta.get("expression", "")))
        return Problem(
            prompt=to_ascii(str(item["question"])).strip(),
            answer=answer,
            uid=f"{self.name}:{index}",
            source=self.name,
            expression=expression,
            solution=solution,
            reduced=self.dataset == "fraction_simplification",
        )


# --- JSONL -----------------------------------------------------------------------------
def _answer_of(raw: Any) -> tuple[Fraction | None, str | None]:
    """``(answer, worked solution)`` of a GSM8K answer field (``"... #### 42"``), or a number."""
    if isinstance(raw, bool):
        return None, None
    if isinstance(raw, (int, float)):
        return (Fraction(raw) if np.isfinite(raw) else None), None
    if not isinstance(raw, str):
        return None, None
    if "####" in raw:
        head, _, tail = raw.rpartition("####")
        value = parse_number(tail.strip(), allow_words=False)
        if value is None:
            return None, None
        # GSM8K's calculator annotations <<48/2=24>> are noise for a policy: drop them.
        work = _strip_calculator(head).strip()
        return value, (f"{work}\n#### {format_answer(value)}" if work else f"#### {format_answer(value)}")
    return parse_number(raw, allow_words=False), None


def _strip_calculator(text: str) -> str:
    out, i = [], 0
    while True:
        j = text.find("<<", i)
        k = text.find(">>", j + 2) if j >= 0 else -1
        if j < 0 or k < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        i = k + 2


def parse_jsonl_lines(
    lines: Iterable[str],
    name: str = "<lines>",
    question_key: str = "question",
    answer_key: str = "answer",
    on_missing_answer: str = "error",
) -> tuple[list[Problem], int]:
    """Parse GSM8K-style JSON lines; ``(problems, skipped)``.

    Blank lines are ignored. Errors name ``name:line`` and what to fix: invalid JSON, a
    non-object line, an empty or missing question (always an error: a prompt is
    required), and an answer without a number: an error with
    ``on_missing_answer="error"`` (the default), skipped and counted with ``"skip"``.
    """
    if on_missing_answer not in ("error", "skip"):
        raise ValueError(f"on_missing_answer={on_missing_answer!r}; choose 'error' or 'skip'")
    problems: list[Problem] = []
    skipped = 0
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ProblemFormatError(f"{where}: not valid JSON ({err.msg}); each line must be one JSON object") from None
        if not isinstance(record, dict):
            raise ProblemFormatError(f"{where}: a line must be a JSON object with {question_key!r} and {answer_key!r}, got {type(record).__name__}")
        question = record.get(question_key)
        if not isinstance(question, str) or not question.strip():
            raise ProblemFormatError(
                f"{where}: empty or missing {question_key!r}; every line needs a non-empty question string"
            )
        answer, solution = _answer_of(record.get(answer_key))
        if answer is None:
            if on_missing_answer == "skip":
                skipped += 1
                continue
            raise ProblemFormatError(
                f"{where}: {answer_key!r} has no numeric final answer (got {str(record.get(answer_key))[:60]!r}); "
                "write it GSM8K-style as '... #### 42' or as a number, or load with on_missing_answer='skip'"
            )
        problems.append(Problem(
            prompt=to_ascii(question).strip(),
            answer=answer,
            uid=f"{Path(name).name}:{lineno}",
            source="jsonl",
            solution=None if solution is None else to_ascii(solution),
        ))
    return problems, skipped


def load_jsonl(
    path: str | Path,
    question_key: str = "question",
    answer_key: str = "answer",
    on_missing_answer: str = "error",
) -> list[Problem]:
    """Problems of a GSM8K-style JSONL file (see :func:`parse_jsonl_lines`).

    With ``on_missing_answer="skip"`` the number of skipped lines is reported in a
    ``UserWarning``. An empty file is an error.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"problem file {str(p)!r} does not exist; pass path= to a GSM8K-style .jsonl file")
    with p.open(encoding="utf-8") as fh:
        problems, skipped = parse_jsonl_lines(fh, str(p), question_key, answer_key, on_missing_answer)
    if skipped:
        warnings.warn(f"{p}: skipped {skipped} line(s) without a numeric answer ({len(problems)} kept)", stacklevel=2)
    if not problems:
        raise ProblemFormatError(f"{p}: no problems with an answer; the file needs at least one line")
    return problems


#: A built-in sample of GSM8K-style word problems, written for this package (so that the
#: ``jsonl`` source works without a file and its tests need no download).
SAMPLE_WORD_PROBLEMS: tuple[str, ...] = (
    '{"question": "Mia has 12 pencils. She gives 5 to her brother and buys 8 more. How many pencils does she have now?", "answer": "Mia has 12 - 5 = 7 pencils after giving some away.\\nThen she has 7 + 8 = 15 pencils.\\n#### 15"}',
    '{"question": "A box holds 6 eggs. How many eggs are in 7 boxes?", "answer": "7 boxes hold 7 * 6 = 42 eggs.\\n#### 42"}',
    '{"question": "Tom reads 15 pages a day. How many pages does he read in 4 days?", "answer": "He reads 15 * 4 = 60 pages.\\n#### 60"}',
    '{"question": "A shop sold 23 apples in the morning and 19 in the afternoon. How many apples did it sell?", "answer": "It sold 23 + 19 = 42 apples.\\n#### 42"}',
    '{"question": "Sara has 30 dollars. A book costs 8 dollars. How much money is left after she buys 3 books?", "answer": "Three books cost 3 * 8 = 24 dollars.\\nShe has 30 - 24 = 6 dollars left.\\n#### 6"}',
    '{"question": "A pizza is cut into 8 slices. Ben eats 3 slices. What fraction of the pizza is left?", "answer": "8 - 3 = 5 slices are left, so 5/8 of the pizza.\\n#### 5/8"}',
    '{"question": "There are 5 rows of chairs with 9 chairs in each row. 7 chairs are taken. How many chairs are free?", "answer": "There are 5 * 9 = 45 chairs.\\n45 - 7 = 38 are free.\\n#### 38"}',
    '{"question": "A train travels 60 km each hour. How far does it go in 2.5 hours?", "answer": "It goes 60 * 2.5 = 150 km.\\n#### 150"}',
    '{"question": "Lena saves 4 dollars every week. How many weeks does she need to save 52 dollars?", "answer": "She needs 52 / 4 = 13 weeks.\\n#### 13"}',
    '{"question": "The temperature was 3 degrees and fell by 10 degrees. What is the temperature now?", "answer": "3 - 10 = -7 degrees.\\n#### -7"}',
    '{"question": "A farmer has 14 cows and twice as many sheep. How many animals does he have?", "answer": "He has 14 * 2 = 28 sheep.\\n14 + 28 = 42 animals.\\n#### 42"}',
    '{"question": "Four friends share 2,000 stickers equally. How many stickers does each get?", "answer": "Each gets 2000 / 4 = 500 stickers.\\n#### 500"}',
)


class ListSource:
    """A finite list of problems (a JSONL file); seed ``s`` gives problem ``s % len``."""

    def __init__(self, problems: Sequence[Problem], name: str = "jsonl"):
        if not problems:
            raise ProblemFormatError("a problem list needs at least one problem")
        self.problems = tuple(problems)
        self.name = name
        self.size = len(self.problems)

    def problem(self, seed: int) -> Problem:
        return self.problems[int(seed) % self.size]


def _check_difficulty(difficulty: Any) -> int:
    if isinstance(difficulty, bool) or not isinstance(difficulty, (int, np.integer)) or int(difficulty) not in DIFFICULTIES:
        raise ValueError(f"difficulty={difficulty!r}; choose one of {list(DIFFICULTIES)}")
    return int(difficulty)


def make_source(
    source: str,
    difficulty: int = 1,
    path: str | Path | None = None,
    base_seed: int = 0,
    on_missing_answer: str = "error",
) -> ProblemSource:
    """The problem source named ``source`` (``chainsum``, ``arithmetic``, ``rg:<dataset>``, ``jsonl``)."""
    if source in _GENERATORS:
        return ProceduralSource(source, difficulty)
    if source.startswith("rg:"):
        return ReasoningGymSource(source[3:], difficulty, base_seed)
    if source == "jsonl":
        if path is None:
            problems, _ = parse_jsonl_lines(SAMPLE_WORD_PROBLEMS, "sample.jsonl")
            return ListSource(problems, "jsonl:sample")
        return ListSource(load_jsonl(path, on_missing_answer=on_missing_answer), f"jsonl:{Path(path).name}")
    raise ValueError(
        f"unknown problem source {source!r}; choose one of {list(_GENERATORS)}, 'jsonl' (with path=) "
        "or 'rg:<reasoning-gym dataset>' such as 'rg:chain_sum'"
    )


def is_charset_text(text: str) -> bool:
    """Whether every character of ``text`` is in :data:`CHARSET`."""
    return all(ch in _CHARSET_SET for ch in text)

