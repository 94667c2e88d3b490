"""Constrained GRPO through TRL's GRPOTrainer (extra ``[trl]``), on a tiny local Llama, CPU only."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402
import trl.trainer.grpo_trainer as trl_grpo  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from constrained_grpo.agents.advantages import AdvantageSpec, compute_advantages  # noqa: E402
from constrained_grpo.tasks import make_env  # noqa: E402
from constrained_grpo.trl import ConstrainedGRPOTrainer, char_tokenizer, math_task, tiny_llama  # noqa: E402
from constrained_grpo.trl.agent import TRLAgentConfig, cgrpo  # noqa: E402

P, G = 3, 4
#: A fixed batch: 3 groups of 4 completions, columns (reward, cost a, cost b). Group 2's
#: cost a is constant (its z-score is 0), group 1's reward too.
FIXED = np.array(
    [
        [1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 5.0],
        [1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 3.0], [1.0, 0.0, 1.0],
        [0.0, 1.0, 4.0], [1.0, 1.0, 0.0], [0.5, 1.0, 2.0], [0.0, 1.0, 1.0],
    ]
)
LAMBDA0 = 0.7
LIMITS = (0.5, 1.0)


def _fixed_column(j: int, name: str):
    def func(prompts, completions, **_):
        assert len(completions) == P * G
        return FIXED[:, j].tolist()

    func.__name__ = name
    return func


class _Capture(ConstrainedGRPOTrainer):
    """Keeps the advantages that TRL's loss receives."""

    seen: list[torch.Tensor]

    def _compute_loss(self, model, inputs):
        self.seen.append(inputs["advantages"].detach().clone())
        return super()._compute_loss(model, inputs)


def _args(tmp_path: Path, **kw) -> GRPOConfig:
    base = dict(
        output_dir=str(tmp_path / "trl"), per_device_train_batch_size=P * G, num_generations=G,
        max_completion_length=4, max_steps=1, learning_rate=1e-3, logging_steps=1, report_to="none",
        save_strategy="no", use_cpu=True, seed=0, beta=0.0, disable_tqdm=True,
    )
    return GRPOConfig(**(base | kw))


@pytest.fixture(scope="module")
def tiny():
    tok = char_tokenizer()
    return tok, tiny_llama(tok, hidden_size=16, num_layers=1, num_heads=2)


def _zscore(v: np.ndarray) -> np.ndarray:
    """Population z-score along the group axis, 0 for a constant group (written out by hand)."""
    out = np.zeros_like(v)
    for p in range(v.shape[0]):
        sd = v[p].std()
        if sd > 0:
            out[p] = (v[p] - v[p].mean()) / sd
    return out


@pytest.mark.parametrize("aggregator", ["scadv", "screw", "gdpo"])
def test_loss_receives_our_advantages_on_a_fixed_batch(aggregator, tiny, tmp_path, monkeypatch):
    # TRL shuffles the generation batch before splitting it into steps; switched off, the loss
    # sees the rows in generation order and can be compared row by row.
    monkeypatch.setattr(trl_grpo, "shuffle_sequence_dict", lambda batch: batch)
    tok, model = tiny
    prompts = ["What is 1 + 2?", "What is 3 + 4?", "What is 5 + 1?"]
    from datasets import Dataset

    trainer = _Capture(
        model, [_fixed_column(0, "r")], [_fixed_column(1, "a"), _fixed_column(2, "b")], LIMITS, _args(tmp_path),
        advantage={"aggregator": aggregator}, multiplier={"init": LAMBDA0, "lr": 0.5},
        train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tok,
    )
    trainer.seen = []
    trainer.train()
    got = torch.cat(trainer.seen).numpy().astype(np.float64)
    x = FIXED.reshape(P, G, 3)
    lam = np.array([LAMBDA0, LAMBDA0])
    expected = compute_advantages(x, lam, AdvantageSpec(aggregator=aggregator)).reshape(-1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    if aggregator == "scadv":
        by_hand = _zscore(x[..., 0]) - LAMBDA0 * _zscore(x[..., 1]) - LAMBDA0 * _zscore(x[..., 2])
        np.testing.assert_allclose(got, by_hand.reshape(-1), atol=1e-6)
        # TRL's stock advantages (weights 1, unbiased std + 1e-4) are something else.
        s = x @ np.array([1.0, 1.0, 1.0])
        stock = (s - s.mean(1, keepdims=True)) / (s.std(1, ddof=1, keepdims=True) + 1e-4)
        assert np.abs(got - stock.reshape(-1)).max() > 0.1
    # One dual-ascent step from the batch's mean costs: 0.7 + 0.5 (mean - limit).
    mean_costs = FIXED[:, 1:].mean(axis=0)
    assert mean_costs.tolist() == [8 / 12, 19 / 12]
    np.testing.assert_allclose(trainer.lambdas, LAMBDA0 + 0.5 * (mean_costs - np.array(LIMITS)), atol=1e-12)
    logs = trainer.state.log_history[0]
    assert logs["constraints/a/lambda"] == pytest.approx(trainer.lambdas[0])
    assert logs["constraints/b/limit"] == pytest.approx(1.0)
    assert logs["constraints/a/weight"] == pytest.approx(-LAMBDA0)
    assert logs["constraints/b/cost"] == pytest.approx(19 / 12)
    if aggregator == "scadv":  # with z-scores, ScAdv's effective weights are (1, lambda_1, lambda_2)
        assert (logs["eff_w/reward"], logs["eff_w/a"], logs["eff_w/b"]) == pytest.approx((1.0, LAMBDA0, LAMBDA0))
    # TRL's logged "reward" is the Lagrangian R - sum_k lambda_k C_k of the batch.
    assert logs["reward"] == pytest.approx((FIXED @ np.array([1.0, -LAMBDA0, -LAMBDA0])).mean(), abs=1e-5)


def test_math_functions_score_like_the_env():
    task = math_task("Math/ChainSum-v0")
    assert task.constraint_names == ("length", "format", "banned")
    assert task.limits == [0.1, 0.1, 0.05]
    ds = task.dataset(3, seed=5)
    env = make_env("Math/ChainSum-v0")
    completions = [
        "The sum is 12.\n#### 12",          # a wrong answer in the required form, most likely
        "x" * 41 + " eval(1)",              # too long, banned, no answer
        None,                               # the right answer, filled in below
    ]
    rows = ds.to_dict()
    right = f"so it is {rows['answer'][2]}"
    completions[2] = right                  # correct (lenient), but not in the required form
    kwargs = {k: rows[k] for k in ("answer", "reduced", "uid")}
    got = [f(prompts=rows["prompt"], completions=completions, **kwargs) for f in task.reward_funcs() + task.cost_funcs()]
    for i, seed in enumerate(rows["problem_seed"]):
        prompt, _ = env.reset(seed=seed)
        assert prompt == rows["prompt"][i]
        _, reward, _, _, info = env.step(completions[i])
        assert [g[i] for g in got] == [reward, *info["costs"].tolist()]
    assert [g[1] for g in got] == [0.0, 1.0, 1.0, 1.0]
    assert [g[2] for g in got] == [1.0, 0.0, 1.0, 0.0]
    # Token lengths come from completion_ids; a conversation's last message is the completion.
    tok_task = math_task("Math/ChainSum-v0", length_unit="token", max_tokens=3)
    length = tok_task.cost_funcs()[0]
    chats = [[{"role": "assistant", "content": "#### 1"}]] * 3
    assert length(prompts=rows["prompt"], completions=chats, completion_ids=[[1, 2, 3], [1, 2, 3, 4], []], **kwargs) == [0.0, 1.0, 0.0]


@pytest.mark.timeout(60)
def test_math_rewards_read_only_a_number_alone_and_bound_the_answer_column():
    """Issue 35: ``#### 9^2`` and the like were read as 9 and earned reward 1 on "What is 3 + 6?",
    and a dataset answer 1e1000000000 ran Fraction() for minutes; the TRL rewards score through
    the env's extractor (``score_row``), so they refuse both as the env does."""
    correct = math_task("Math/ChainSum-v0").reward_funcs()[0]
    texts = ["#### 9^2", "#### 9 + 1", "#### 9!", "#### 9^9^9^9", "#### 9 plus 1", "#### 9"]
    n = len(texts)
    rows = {"prompts": ["What is 3 + 6?"] * n, "answer": ["9"] * n, "reduced": [False] * n, "uid": ["q"] * n}
    assert correct(completions=texts, **rows) == [0.0] * (n - 1) + [1.0]
    # A refusal rather than minutes of Fraction(): the timeout marker fails a hang.
    with pytest.raises(ValueError, match=r"answer '1e1000000000' is not a number literal \(\|exponent\| <= 100\)"):
        correct(prompts=["What is 3 + 6?"], completions=["#### 9"], answer=["1e1000000000"], reduced=[False], uid=["q"])


def test_datasets_from_jsonl_and_reasoning_gym(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question": "Half of 3?", "answer": "#### 3/2"}) + "\n")
    task = math_task("Math/WordProblems-v0", path=str(path))
    ds = task.dataset(2, seeds=[0, 7])
    assert ds["prompt"] == ["Half of 3?", "Half of 3?"] and ds["answer"] == ["3/2", "3/2"]
    correct = task.reward_funcs()[0]
    assert correct(prompts=ds["prompt"], completions=["#### 1.5", "#### 2"], answer=ds["answer"],
                   reduced=ds["reduced"], uid=ds["uid"]) == [1.0, 0.0]
    pytest.importorskip("reasoning_gym")
    rg = math_task("Math/RGChainSum-v0")
    row = rg.dataset(1, seeds=[4])[0]
    p = rg.problem(4)
    assert row["prompt"] == p.prompt and Fraction(row["answer"]) == p.answer


def test_bad_input_is_refused_before_any_work(tiny, tmp_path):
    tok, model = tiny
    r, a = _fixed_column(0, "r"), _fixed_column(1, "a")
    with pytest.raises(ValueError, match="1 cost function.* but 2 limit"):
        ConstrainedGRPOTrainer(model, [r], [a], [0.1, 0.2], _args(tmp_path))
    with pytest.raises(ValueError, match="reward_weights must be None"):
        ConstrainedGRPOTrainer(model, [r], [a], [0.1], _args(tmp_path, reward_weights=[1.0, 1.0]))
    with pytest.raises(ValueError, match="unknown advantage option"):
        ConstrainedGRPOTrainer(model, [r], [a], [0.1], _args(tmp_path), advantage={"aggregatr": "scadv"})
    with pytest.raises(ValueError, match="aggregator 'scadv'"):
        cgrpo("Math/ChainSum-v0", advantage={"aggregator": "screw"})
    with pytest.raises(ValueError, match="unknown TRL agent option"):
        TRLAgentConfig.from_dict({"prompts_per_stp": 2})
    with pytest.raises(ValueError, match="num_generations=1"):
        TRLAgentConfig(num_generations=1)
    with pytest.raises(ValueError, match="length_unit"):
        math_task(length_unit="word")


@pytest.mark.slow
def test_end_to_end_multipliers_and_leaderboard(tmp_path):
    from constrained_grpo.cli import main as cgrpo_main
    from constrained_grpo.eval.scoring.loader import load_results
    from constrained_grpo.eval.runner import RunSpec, execute_run

    # 4 iterations of P=4 problems x G=8 completions of at most 12 characters: the random
    # Llama never writes '#### <n>' (format 1 > limit 0.1: violated) and never exceeds the
    # 40-character budget (length 0 < 0.2, the run's own limit: satisfied).
    spec = RunSpec("Math/ChainSum-v0", "constrained_grpo.trl:cgrpo", 0, steps=4 * 32, eval_episodes=53,
                   config={"max_completion_length": 12, "tiny_hidden": 16, "tiny_layers": 1, "limits": {"length": 0.2},
                           "multiplier": {"init": 1.0, "lr": 0.5}})
    outcome = execute_run(spec, tmp_path / "runs")
    assert outcome.status == "done", outcome.error
    results = load_results(tmp_path / "runs", allow_modified_tasks=True)  # trained with its own length limit
    train = results.table[results.table["kind"] == "train"]
    assert train["env_steps"].tolist() == [32, 64, 96, 128]
    assert (train["cost_format"] == 1.0).all() and (train["cost_length"] == 0.0).all()
    fmt, length = train["lambda_format"].to_numpy(), train["lambda_length"].to_numpy()
    # Dual ascent from 1.0 with step 0.5: +0.5 (1 - 0.1) per iteration on format, -0.5 (0.2) on length.
    np.testing.assert_allclose(fmt, 1.0 + 0.45 * np.arange(1, 5), atol=1e-12)
    np.testing.assert_allclose(length, 1.0 - 0.1 * np.arange(1, 5), atol=1e-12)
    assert results.tasks["Math/ChainSum-v0"].limits == {"length": 0.2, "format": 0.1, "banned": 0.05}
    assert len(results.table[results.table["kind"] == "eval"]) >= 4
    config = json.loads((spec.run_dir(tmp_path / "runs") / "config.json").read_text())
    assert config["schema"] == 1 and config["run"]["algo"] == "constrained_grpo.trl:cgrpo"
    assert cgrpo_main(["leaderboard", str(tmp_path / "runs"), "--quiet", "--allow-modified-tasks"]) == 0
    assert (tmp_path / "runs" / "leaderboard.md").is_file()


@pytest.mark.slow
def test_multipliers_survive_a_checkpoint(tiny, tmp_path, monkeypatch):
    from datasets import Dataset

    tok, model = tiny
    data = Dataset.from_dict({"prompt": ["What is 1 + 2?", "What is 3 + 4?", "What is 5 + 1?"] * 2})

    def make(**kw):
        return ConstrainedGRPOTrainer(
            model, [_fixed_column(0, "r")], [_fixed_column(1, "a"), _fixed_column(2, "b")], LIMITS,
            _args(tmp_path, max_steps=2, **kw), multiplier={"init": LAMBDA0, "lr": 0.5}, train_dataset=data,
            processing_class=tok,
        )

    make(save_strategy="steps", save_steps=1).train()
    step = 0.5 * (FIXED[:, 1:].mean(axis=0) - np.array(LIMITS))
    saved = json.loads((tmp_path / "trl" / "checkpoint-1" / "constrained_grpo_state.json").read_text())
    np.testing.assert_allclose(saved["multiplier"]["values"], LAMBDA0 + step, atol=1e-12)
    resumed = make()
    resumed.train(resume_from_checkpoint=str(tmp_path / "trl" / "checkpoint-1"))
    # One more update on top of the restored one (a fresh start would be one step from 0.7).
    np.testing.assert_allclose(resumed.lambdas, LAMBDA0 + 2 * step, atol=1e-12)


@pytest.mark.slow
def test_docs_quick_start_runs(tmp_path, monkeypatch, capsys):
    import runpy

    text = (Path(__file__).resolve().parents[2] / "docs" / "trl.md").read_text()
    section = text.split("## 2. CPU quick start", 1)[1]
    script = tmp_path / "quick_start.py"
    script.write_text(section.split("```python\n", 1)[1].split("```", 1)[0])
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    lambdas = capsys.readouterr().out.strip().splitlines()[-1]
    # Two dual-ascent steps of 0.5 (cost - limit) from 1.0 on 12-character completions.
    assert lambdas == str({"length": 0.9, "format": 1.9, "banned": 0.95})


def test_gpu_benchmark_writes_nothing_without_a_gpu(tmp_path):
    from constrained_grpo.eval.bench import trl as speed_trl

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run")
    assert speed_trl.run(tmp_path) == []
    assert list(tmp_path.iterdir()) == []
