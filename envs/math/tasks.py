"""The math task table. Per-task defaults (source, difficulty, length budget) live here.

Light at import: nothing but the table. Limits are violation rates (indicator costs):
``length`` 0.1, ``format`` 0.1, ``banned`` 0.05 unless a row says otherwise; override
them with ``gymnasium.make(id, limits={"length": 0.2})``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from constrained_grpo.envs.registration import Binding, EpisodeReturns, EvalPlan, Family, TaskInfo

__all__ = ["BUILTIN_MATH", "BUILTIN_MATH_TASKS", "MATH", "MATH_TASKS", "REASONING_GYM_TASKS"]

_MATH = "constrained_grpo.envs.math.env:MathEnv"


#: The math family's facts. Its tasks take and give text; a language model's completion is
#: the expensive step, so evaluation is capped at 200 problems per policy (the plan for the
#: banned rate at 0.05 with 95% power is 21,551: docs/benchmark.md section 3 gives what 200
#: can certify). The reference is the GRPO learners' warm start.
def episode_returns(kwargs: Mapping[str, Any]) -> EpisodeReturns:
    """One completion per episode whose reward is its correctness, 1 or 0 (envs/math/scoring.py:
    the costs are not part of the reward); its recorded length counts tokens, not steps."""
    return EpisodeReturns(episode=(0.0, 1.0),
                          rule="an episode is one completion whose reward is 1 if its answer is correct, else 0")


#: Binding: the unconstrained GRPO learner's recorded runs break a limit; a constrained
#: learner's keep them (no scripted reference writes text the way the learners do).
MATH_BINDING = Binding(unconstrained=("grpo",), keepers=("cgrpo",))
MATH = Family("math", EvalPlan(power=0.95, cap=200, pilot=200), references=("ref-warmstart",), text=True, extra="math",
              binding=MATH_BINDING, episode_returns=episode_returns)
#: The built-in generators need no extra.
BUILTIN_MATH = Family("math", MATH.eval, MATH.references, text=True, binding=MATH_BINDING, episode_returns=episode_returns)


def _math(name: str, description: str, version: int = 0, binding: Binding | None = None,
          defaults: Mapping[str, Mapping[str, Any]] | None = None, **kwargs: Any) -> TaskInfo:
    family = MATH if str(kwargs.get("source", "")).startswith("rg:") else BUILTIN_MATH
    return TaskInfo(f"Math/{name}-v{version}", family, _MATH, kwargs, description, binding=binding, defaults=dict(defaults or {}))


#: Tasks on the built-in generators and the JSONL loader: no extra dependency.
BUILTIN_MATH_TASKS: tuple[TaskInfo, ...] = (
    _math(
        "ChainSum",
        "sums of 2-3 one-digit terms; K=3 (length > 40 chars, format, banned): the CPU acceptance task",
        source="chainsum", difficulty=1, max_tokens=40,
    ),
    _math("ChainSumHard", "sums and differences of 2-4 terms of up to two digits; budget 64", source="chainsum", difficulty=2, max_tokens=64),
    # ChainSumHard-v0's problems on a budget from their own worked solutions (2,000 problems,
    # reset seeds 0-1999): concise solutions of 2 terms take 16-22 characters, of 3 terms
    # 26-39, of 4 terms 36-55, so 24 cuts exactly the working of the 3- and 4-term problems
    # (67% of them) and leaves their bare answer (6-9). Limits 0.1 each: the 200-completion
    # evaluation certifies a policy at half of each limit within with power 0.92 (banned at
    # 0.05 would give 0.62). Until its runs are recorded, scripted stand-ins decide its binding.
    # Its warm start takes 6,000 supervised steps: after the text agent's default 1,500 it
    # answers 2.7% of 2-term problems and every learner's return stays at that floor; after
    # 6,000 it answers 39.7% / 8.2% / 5.5% of 2- / 3- / 4-term problems (docs/benchmark.md section 2).
    _math(
        "ChainSumHard",
        "ChainSumHard-v0's problems on a budget of 24 chars: worked solutions of 3-4 two-digit terms do not fit; "
        "limits 0.1 (length, format, banned)",
        version=1,
        binding=Binding(unconstrained=("grpo", "ref-worked"), keepers=("cgrpo", "ref-fitting"),
                        scripted="constrained_grpo.envs.math.binding:scripted_sides"),
        defaults={"text": {"lm": {"sft_steps": 6000}}},
        source="chainsum", difficulty=2, max_tokens=24, limits={"length": 0.1, "format": 0.1, "banned": 0.1},
    ),
    # A worked solution of 3 terms (26-30 characters) does not fit in 20 while one of 2 terms
    # (16-18) and the bare answer (6-7) do: numbers in docs/benchmark.md and envs/math/binding.py.
    _math(
        "ChainSumLong",
        "ChainSum-v0's problems on a budget of 20 chars: worked solutions of 3 terms do not fit, "
        "so the length limit cuts the working",
        source="chainsum", difficulty=1, max_tokens=20,
    ),
    _math("Arithmetic", "two operations among + - * with explicit brackets; budget 48", source="arithmetic", difficulty=2, max_tokens=48),
    _math(
        "WordProblems",
        "GSM8K-style JSONL (path=...; default: a built-in sample of 12 word problems); budget 300",
        source="jsonl", max_tokens=300,
    ),
)

#: Tasks on reasoning-gym datasets (extra ``[math]``).
REASONING_GYM_TASKS: tuple[TaskInfo, ...] = (
    _math("RGBasicArithmetic", "reasoning-gym basic_arithmetic, level 1", source="rg:basic_arithmetic", difficulty=1, max_tokens=64),
    _math("RGChainSum", "reasoning-gym chain_sum, level 1", source="rg:chain_sum", difficulty=1, max_tokens=64),
    _math("RGFractions", "reasoning-gym fraction_simplification, lowest terms required", source="rg:fraction_simplification", difficulty=1, max_tokens=64),
    _math("RGGSMSymbolic", "reasoning-gym gsm_symbolic word problems; budget 400", source="rg:gsm_symbolic", difficulty=1, max_tokens=400),
)

#: The registered math tasks. The ``Math/RG*`` ids are registered only where reasoning-gym
#: is installed (checked without importing it), so that every registered id can be made
#: and passes ``check_env`` on a base install.
MATH_TASKS: tuple[TaskInfo, ...] = BUILTIN_MATH_TASKS + (
    REASONING_GYM_TASKS if importlib.util.find_spec("reasoning_gym") is not None else ()
)
