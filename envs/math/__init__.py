"""The math-reasoning task family: one problem per episode, a completion as the action.

Reward = correctness of the final answer; costs = ``length`` (over the token budget),
``format`` (no final ``#### <number>``) and ``banned`` (a banned pattern). Modules:
``extract`` (the answer extractor, which never evaluates text), ``problems`` (sources),
``solutions`` (worked solutions for the warm start), ``scoring``, ``env`` and ``binding``
(whether a task's length limit binds at the reward maximiser).
"""

from constrained_grpo.envs.math.env import MathEnv
from constrained_grpo.envs.math.extract import Answer, extract_answer, find_answer, has_required_form, parse_number
from constrained_grpo.envs.math.problems import CHARSET, Problem, ProblemFormatError, load_jsonl, make_source
from constrained_grpo.envs.math.scoring import COST_NAMES, DEFAULT_LIMITS

__all__ = [
    "Answer",
    "CHARSET",
    "COST_NAMES",
    "DEFAULT_LIMITS",
    "MathEnv",
    "Problem",
    "ProblemFormatError",
    "extract_answer",
    "find_answer",
    "has_required_form",
    "load_jsonl",
    "make_source",
    "parse_number",
]
