"""The math task family: problems, JSONL loading, scoring, the env and its registration."""

import json
from fractions import Fraction

import gymnasium as gym
import numpy as np
import pytest

import constrained_grpo.envs
from constrained_grpo import check_constrained_env, make_env
from constrained_grpo.envs.math import CHARSET, MathEnv, ProblemFormatError, load_jsonl, make_source
from constrained_grpo.envs.math.problems import (
    SAMPLE_WORD_PROBLEMS,
    arithmetic_problem,
    chain_sum_problem,
    is_charset_text,
    parse_jsonl_lines,
    to_ascii,
)
from constrained_grpo.envs.math.solutions import DEFAULT_MIXTURE, STYLES, sample_styles, worked_solution

MATH_IDS = constrained_grpo.envs.list_tasks("math")
BUILTIN_IDS = [i for i in MATH_IDS if not i.startswith("Math/RG")]
RG_IDS = [i for i in MATH_IDS if i.startswith("Math/RG")]


def _has_reasoning_gym() -> bool:
    import importlib.util

    return importlib.util.find_spec("reasoning_gym") is not None


needs_rg = pytest.mark.skipif(not _has_reasoning_gym(), reason="reasoning-gym not installed (extra [math])")


# --- problems --------------------------------------------------------------------------
def test_builtin_generators_are_seeded_and_correct():
    for level in (1, 2, 3):
        for seed in range(50):
            p = chain_sum_problem(seed, level)
            assert p == chain_sum_problem(seed, level)
            # The recorded steps recompute the answer (left to right).
            total = p.steps[0].lhs
            for s in p.steps:
                assert s.lhs == total
                total = s.lhs + s.rhs if s.op == "+" else s.lhs - s.rhs
                assert s.result == total
            assert Fraction(total) == p.answer and is_charset_text(p.prompt)
            q = arithmetic_problem(seed, level)
            assert q.steps[-1].result == q.answer
    assert chain_sum_problem(1, 1).prompt != chain_sum_problem(2, 1).prompt


def test_difficulty_and_source_errors():
    with pytest.raises(ValueError, match=r"difficulty=4; choose one of \[1, 2, 3\]"):
        make_source("chainsum", difficulty=4)
    with pytest.raises(ValueError, match="unknown problem source 'algebra'"):
        make_source("algebra")


def test_to_ascii():
    assert to_ascii("3 \u00d7 4 \u2212 1 \u2192 \u2019x\u2019") == "3 * 4 - 1 ? 'x'"
    assert is_charset_text(to_ascii("caf\u00e9 \u00bd \U0001F600"))


# --- JSONL -----------------------------------------------------------------------------
def _write(tmp_path, lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_gsm8k_style(tmp_path):
    path = _write(tmp_path, [
        json.dumps({"question": "Natalia sold 48 clips and half as many later. Total?", "answer": "48/2 = <<48/2=24>>24\n48+24 = <<48+24=72>>72\n#### 72"}),
        "",
        json.dumps({"question": "Half of 3?", "answer": 1.5}),
        json.dumps({"question": "Owe 1,000?", "answer": "#### -1,000"}),
    ])
    problems = load_jsonl(path)
    assert [p.answer for p in problems] == [72, Fraction(3, 2), -1000]
    assert problems[0].solution == "48/2 = 24\n48+24 = 72\n#### 72"  # calculator annotations dropped
    assert problems[0].uid == "data.jsonl:1" and problems[1].uid == "data.jsonl:3"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"question": "What is 2+2?", "answer": "four-ish"}', r"data.jsonl:2: 'answer' has no numeric final answer"),
        ('{"question": "What is 2+2?"}', r"data.jsonl:2: 'answer' has no numeric final answer"),
        ('{"question": "What is 2+2?", "answer": "work\\n#### many"}', r"data.jsonl:2: 'answer'"),
        ('{"question": "   ", "answer": "#### 4"}', r"data.jsonl:2: empty or missing 'question'"),
        ('{"answer": "#### 4"}', r"data.jsonl:2: empty or missing 'question'"),
        ('{"question": "x", "answer": "#### 4"', r"data.jsonl:2: not valid JSON"),
        ('[1, 2]', r"data.jsonl:2: a line must be a JSON object"),
    ],
)
def test_jsonl_bad_lines_name_file_and_line(tmp_path, line, message):
    path = _write(tmp_path, ['{"question": "ok?", "answer": "#### 1"}', line])
    with pytest.raises(ProblemFormatError, match=message):
        load_jsonl(path)


def test_jsonl_skip_mode_counts(tmp_path):
    path = _write(tmp_path, ['{"question": "ok?", "answer": "#### 1"}', '{"question": "no?", "answer": "n/a"}', '{"question": "no2?"}'])
    with pytest.warns(UserWarning, match="skipped 2 line"):
        problems = load_jsonl(path, on_missing_answer="skip")
    assert len(problems) == 1
    # An empty prompt is never skipped: it is an error in either mode.
    bad = _write(tmp_path, ['{"question": "", "answer": "#### 1"}'], "bad.jsonl")
    with pytest.raises(ProblemFormatError, match="bad.jsonl:1: empty"):
        load_jsonl(bad, on_missing_answer="skip")


def test_jsonl_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(ProblemFormatError, match="no problems"):
        load_jsonl(_write(tmp_path, [""], "empty.jsonl"))


def test_sample_word_problems_parse():
    problems, skipped = parse_jsonl_lines(SAMPLE_WORD_PROBLEMS)
    assert skipped == 0 and len(problems) == len(SAMPLE_WORD_PROBLEMS)
    assert all(p.solution and p.solution.endswith(f"#### {p.answer.numerator}" if p.answer.denominator == 1 else "") for p in problems)


def test_jsonl_env_with_user_file(tmp_path):
    path = _write(tmp_path, ['{"question": "What is 6 * 7?", "answer": "#### 42"}', '{"question": "Ten minus three?", "answer": "#### 7"}'])
    env = make_env("Math/WordProblems-v0", path=str(path))
    prompts = {env.reset(seed=s)[0] for s in range(4)}
    assert prompts == {"What is 6 * 7?", "Ten minus three?"}
    env.reset(seed=0)
    assert env.step("6*7 = 42\n#### 42")[1] == 1.0


# --- solutions -------------------------------------------------------------------------
def test_worked_solution_styles_break_what_they_should():
    env = MathEnv(max_tokens=40)
    p = chain_sum_problem(7, 1)
    rng = np.random.default_rng(0)
    expected = {"concise": (0, 0, 0), "direct": (0, 0, 0), "verbose": (1, 0, 0), "phrase": (0, 1, 0), "tool": (0, 0, 1)}
    for style in STYLES:
        env.reset(seed=7)
        _, reward, *_, info = env.step(worked_solution(p, style, rng))
        assert reward == 1.0, style  # every style is right under the lenient reading
        assert tuple(info["costs"]) == expected[style], style
    styles = sample_styles(4000, np.random.default_rng(1))
    assert abs(styles.count("verbose") / 4000 - DEFAULT_MIXTURE["verbose"]) < 0.03
    with pytest.raises(ValueError, match="unknown solution style"):
        sample_styles(3, rng, {"haiku": 1.0})


def test_demonstrations_are_seeded_pairs():
    env = MathEnv()
    a, b = env.demonstrations(20, seed=3), env.demonstrations(20, seed=3)
    assert a == b and len(a) == 20 and all(is_charset_text(p + c) for p, c in a)


# --- scoring and the env ---------------------------------------------------------------
def test_step_scores_reward_and_costs():
    env = make_env("Math/ChainSum-v0")
    prompt, info = env.reset(seed=11)
    u = env.unwrapped
    target = u.problem.answer
    assert prompt == u.problem_for_seed(11).prompt and info["uid"] == "chainsum1:11"
    cases = {
        f"#### {target}": (1.0, [0, 0, 0]),
        f"The answer is {target}.": (1.0, [0, 1, 0]),  # lenient reward, format cost
        f"#### {target + 1}": (0.0, [0, 0, 0]),
        "x" * 41 + f"\n#### {target}": (1.0, [1, 0, 0]),
        f"eval(1+1) = {target}\n#### {target}": (1.0, [0, 0, 1]),
        "": (0.0, [0, 1, 0]),
    }
    for text, (reward, costs) in cases.items():
        env.reset(seed=11)
        obs, r, term, trunc, info = env.step(text)
        assert (r, term, trunc) == (reward, True, False), text
        np.testing.assert_array_equal(info["costs"], costs)
        assert info["costs"].dtype == np.float64 and info["cost"] == float(sum(costs))
        assert info["target"] == str(target)


def test_strict_reward_mode_and_limits_override():
    env = make_env("Math/ChainSum-v0", reward_mode="strict", limits={"length": 0.3}, constraints=("length", "format"))
    assert [(c.name, c.limit, c.indicator) for c in env.unwrapped.constraints] == [("length", 0.3, True), ("format", 0.1, True)]
    env.reset(seed=0)
    target = env.unwrapped.problem.answer
    _, r, *_, info = env.step(f"The answer is {target}.")
    assert r == 0.0 and info["costs"].shape == (2,)
    with pytest.raises(ValueError, match="limits given for \\['banned'\\]"):
        make_env("Math/ChainSum-v0", constraints=("length",), limits={"banned": 0.1})
    with pytest.raises(ValueError, match="choose distinct names"):
        make_env("Math/ChainSum-v0", constraints=("length", "toxicity"))
    with pytest.raises(ValueError, match="reward_mode"):
        make_env("Math/ChainSum-v0", reward_mode="fuzzy")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        make_env("Math/ChainSum-v0", banned_patterns=["(unclosed"])


def test_banned_patterns_are_overridable():
    env = make_env("Math/ChainSum-v0", banned_patterns=[r"\bdamn\b"])
    env.reset(seed=0)
    _, _, *_, info = env.step("damn it\n#### 3")
    assert info["costs"][2] == 1.0
    env.reset(seed=0)
    assert env.step("eval(1)\n#### 3")[-1]["costs"][2] == 0.0


@pytest.mark.parametrize(
    "completion",
    [
        "e v a l(3+6)\n#### 9",                            # spaced out
        "\uff45\uff56\uff41\uff4c(3+6)\n#### 9",             # fullwidth, NFKC gives eval(
        "EXEC('print(9)')\n#### 9",                        # upper case
        "getattr(__builtins__,'ev'+'al')('3+6')\n#### 9",  # dynamic lookup of a string-built name
        "e\u200bval(3+6)\n#### 9",                         # a zero-width space inside the name
        "the sum is e v a l (3 + 6)\n#### 9",              # spaced out after a word
    ],
)
def test_banned_evasions_cost_one(completion):
    env = make_env("Math/ChainSum-v0")
    env.reset(seed=0)
    assert env.step(completion)[-1]["costs"][2] == 1.0


@pytest.mark.parametrize("completion", ["3 + 6 = 9\n#### 9", "#### 9", "-3 - -4 = 1\n#### 1", "The answer is 12.\n#### 12"])
def test_legitimate_answers_are_not_banned(completion):
    env = make_env("Math/ChainSum-v0")
    env.reset(seed=0)
    assert env.step(completion)[-1]["costs"][2] == 0.0


def test_banned_views_normalise_case_width_and_whitespace():
    from constrained_grpo.envs.math.scoring import banned_views

    assert banned_views("\uff25 v A\tL\u200b(") == ("e v a\tl(", "eval(")
    # Only the tool style of the warm-start data is banned: no other worked solution of
    # 2,000 problems of the largest built-in generator trips the wider patterns.
    env = make_env("Math/ChainSumHard-v0").unwrapped
    rng = np.random.default_rng(0)
    for style in ("concise", "verbose", "direct", "phrase"):
        assert not any(env.rules.banned(worked_solution(env.problem_for_seed(s), style, rng)) for s in range(2000)), style


def test_bad_actions_are_handled():
    env = make_env("Math/ChainSum-v0", max_completion_chars=64)
    env.reset(seed=2)
    target = env.unwrapped.problem.answer
    # Longer than any context: cut, scored, flagged; the answer at the end is lost.
    _, r, term, _, info = env.step("1 + 1 = 2\n" * 50 + f"#### {target}")
    assert info["cut"] and info["costs"][0] == 1.0 and info["costs"][1] == 1.0 and term
    env.reset(seed=2)
    _, r, *_, info = env.step("\u00e9\u00e8 \U0001F600\n#### " + str(target))  # outside the charset: still scored
    assert r == 1.0 and not info["cut"]
    env.reset(seed=2)
    with pytest.raises(TypeError, match="the action is the completion text"):
        env.step(42)
    env.reset(seed=2)
    env.step("#### 1")
    with pytest.raises(gym.error.ResetNeeded):
        env.step("#### 1")


def test_long_prompt_is_a_clear_error(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"question": "x" * 100, "answer": "#### 1"}) + "\n")
    env = make_env("Math/WordProblems-v0", path=str(path), max_prompt_chars=50)
    with pytest.raises(ValueError, match="long.jsonl:1 has a prompt of 100 characters, more than max_prompt_chars=50"):
        env.reset(seed=0)


def test_spaces_and_determinism():
    env = make_env("Math/ChainSum-v0")
    assert isinstance(env.observation_space, gym.spaces.Text) and isinstance(env.action_space, gym.spaces.Text)
    assert set(env.observation_space.character_set) == set(CHARSET)
    a, _ = env.reset(seed=5)
    b, _ = env.reset(seed=5)
    assert a == b and env.observation_space.contains(a)
    env.reset(seed=None)  # draws from np_random, no error


def test_render_ansi():
    env = MathEnv(render_mode="ansi")
    env.reset(seed=1)
    env.step("#### 3")
    assert env.render().startswith("Q: What is") and env.render().endswith("#### 3")


def test_registration_lists_math_tasks():
    assert {"Math/ChainSum-v0", "Math/WordProblems-v0"} <= set(MATH_IDS)
    assert ("Math/RGChainSum-v0" in MATH_IDS) == _has_reasoning_gym()  # registered only with the extra
    assert all(constrained_grpo.envs.task_info(i).family.name == "math" for i in MATH_IDS)
    constrained_grpo.envs.register_tasks()
    assert constrained_grpo.envs.list_tasks("math") == MATH_IDS


@pytest.mark.parametrize("env_id", BUILTIN_IDS)
def test_builtin_tasks_pass_the_constrained_checker(env_id):
    report = check_constrained_env(make_env(env_id), num_steps=30)
    assert report["constraints"] == ["length", "format", "banned"] and report["episodes"] == 30


@needs_rg
@pytest.mark.parametrize("env_id", RG_IDS)
def test_reasoning_gym_tasks_pass_the_constrained_checker(env_id):
    env = make_env(env_id)
    check_constrained_env(env, num_steps=10)
    p = env.unwrapped.problem_for_seed(3)
    env.reset(seed=3)
    assert env.step(f"#### {p.answer}")[1] == 1.0


@needs_rg
def test_reasoning_gym_fractions_need_lowest_terms():
    env = make_env("Math/RGFractions-v0")
    env.reset(seed=4)
    p = env.unwrapped.problem
    assert p.reduced
    unreduced = f"{p.answer.numerator * 3}/{p.answer.denominator * 3}"
    assert env.step(f"#### {unreduced}")[1] == 0.0
    env.reset(seed=4)
    assert env.step(f"#### {p.answer.numerator}/{p.answer.denominator}")[1] == 1.0


@needs_rg
def test_reasoning_gym_gsm_symbolic_has_worked_solutions():
    env = make_env("Math/RGGSMSymbolic-v0")
    p = env.unwrapped.problem_for_seed(1)
    assert p.solution and p.solution.rstrip().endswith(f"#### {p.answer}") and is_charset_text(p.prompt)


def test_reasoning_gym_missing_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "reasoning_gym":
            raise ImportError("no reasoning_gym")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"constrained-grpo\[math\]"):
        make_source("rg:chain_sum")


# --- Math/ChainSumLong-v0: a task where the length limit binds ---------------------------


def test_chain_sum_long_budget_cuts_exactly_the_worked_solutions_of_three_terms():
    # A worked step "a + b = c" of one-digit terms with the final line: 2 terms take at most
    # "9 + 9 = 18\n#### 18" = 18 characters, 3 terms at least "1 + 2 = 3\n3 + 4 = 7\n#### 7"
    # = 25, so the budget of 20 cuts a concise solution iff the problem has 3 terms.
    env = make_env("Math/ChainSumLong-v0").unwrapped
    assert env.rules.max_tokens == 20 and [c.limit for c in env.constraints] == [0.1, 0.1, 0.05]
    rng = np.random.default_rng(0)
    terms = []
    for s in range(600):
        p = env.problem_for_seed(s)
        terms.append(len(p.steps) + 1)
        assert (len(worked_solution(p, "concise", rng)) > 20) == (terms[-1] == 3), p.prompt
        assert len(worked_solution(p, "direct", rng)) <= 7  # "#### 27" at most: the bare answer fits
    # Terms are uniform on {2, 3}: about half of the worked solutions break the budget.
    assert abs(np.mean(np.asarray(terms) == 3) - 1 / 2) < 0.05


def test_chain_sum_long_warm_start_data_breaks_the_length_limit_most_of_the_time():
    from constrained_grpo.envs.math.binding import style_violation_rates

    rates = style_violation_rates("Math/ChainSumLong-v0", n=600)
    assert rates["direct"] == 0.0 and rates["verbose"] == rates["phrase"] == rates["tool"] == 1.0
    assert abs(rates["concise"] - 1 / 2) < 0.05
    # 0.35 * 1/2 + 0.30 + 0.20 + 0.05 ~= 0.725: a perfect imitator of the warm-start data
    # violates the length limit 0.1 about seven times over.
    expected = sum(DEFAULT_MIXTURE[s] * rates[s] for s in STYLES)
    assert rates["mixture"] == pytest.approx(expected) and 0.70 < rates["mixture"] < 0.75
    # On ChainSum-v0 (budget 40) the concise solution always fits: there the limit does not bind
    # at the reward maximiser, which is why the GRPO learners do not separate on it.
    assert style_violation_rates("Math/ChainSum-v0", n=300)["concise"] == 0.0


def test_length_split_conditions_accuracy_on_the_length_cost():
    from constrained_grpo.envs.math.binding import length_split

    split = length_split(np.array([1, 1, 0, 1, 0, 0, 0, 1.0]), np.array([1, 1, 1, 1, 0, 0, 0, 1.0]))
    # long: returns 1,1,0,1,1 -> 4/5; short: 0,0,0 -> 0; overall 4/8.
    assert (split.n, split.violation_rate, split.accuracy) == (8, 5 / 8, 0.5)
    assert (split.accuracy_long, split.accuracy_short) == (0.8, 0.0)
    assert np.isnan(length_split(np.ones(3), np.zeros(3)).accuracy_long)
    with pytest.raises(ValueError, match="equal, non-empty 1-D"):
        length_split(np.ones(3), np.ones(2))
