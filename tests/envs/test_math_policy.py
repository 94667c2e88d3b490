"""The small transformer policy, its warm start, the text rollout adapter and the text agent on math."""

import json

import numpy as np
import pytest
import torch

from constrained_grpo.agents.lm_base import left_pad
from constrained_grpo.agents.lm_sft import supervised_warm_start
from constrained_grpo.agents.lm_tokenizer import CharTokenizer
from constrained_grpo.agents.lm_transformer import TinyCausalLM, TinyLMConfig
from constrained_grpo.agents.text_adapter import TextRolloutAdapter
from constrained_grpo.agents.agent import is_text_task
from constrained_grpo.agents.text_agent import LMConfig, TextGRPOAgent, load_text_agent, make_text_grpo_agent
from constrained_grpo.agents.trainer import GRPOTrainer, RolloutAdapter
from constrained_grpo.agents.config import make_config
from constrained_grpo.registry import validate_log_record

TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, context=96, max_new_tokens=40)


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def tiny_model(seed: int = 0, context: int = 96) -> TinyCausalLM:
    torch.manual_seed(seed)
    tok = CharTokenizer()
    return TinyCausalLM(TinyLMConfig(vocab_size=tok.vocab_size, context=context, d_model=32, n_layers=2, n_heads=2, d_ff=64), tok)


def test_char_tokenizer_round_trip():
    tok = CharTokenizer()
    text = "What is 3 + 4?\n#### 7\t"
    assert tok.decode(tok.encode(text)) == text
    assert tok.encode_prompt("a") == [tok.bos_id, tok.encode("a")[0], tok.sep_id]
    assert tok.decode(tok.encode("\u00e9")) == "?"  # unknown characters are <unk>
    assert CharTokenizer.from_dict(tok.to_dict()).chars == tok.chars


def test_left_pad():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[True] * 3, [False, False, True]]


def test_kv_cache_sampling_matches_full_forward():
    model = tiny_model()
    prompts = model.encode_prompts(["What is 1 + 2?", "Hi", "What is 9 + 9 + 9?"])
    gen = model.generate(prompts, 30, generator=torch.Generator().manual_seed(0))
    logp, entropy = model.completion_logprobs(gen.prompt_ids, gen.prompt_mask, gen.tokens, gen.mask)
    assert torch.allclose(logp[gen.mask], gen.logp[gen.mask], atol=1e-5)
    assert (entropy[gen.mask] > 0).all()
    # A prompt's completion does not depend on the padding its batch needed.
    alone = model.generate(prompts[1:2], 30, greedy=True)
    batched = model.generate(prompts, 30, greedy=True)
    n = int(alone.mask[0].sum())
    assert batched.tokens[1, :n].tolist() == alone.tokens[0, :n].tolist()


def test_sampling_is_seeded_and_temperature_consistent():
    model = tiny_model()
    model.temperature = 0.7
    prompts = model.encode_prompts(["What is 1 + 2?"] * 4)
    a = model.generate(prompts, 20, generator=torch.Generator().manual_seed(3))
    b = model.generate(prompts, 20, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.tokens, b.tokens)
    logp, _ = model.completion_logprobs(a.prompt_ids, a.prompt_mask, a.tokens, a.mask)
    assert torch.allclose(logp[a.mask], a.logp[a.mask], atol=1e-5)


def test_context_limits_are_clear_errors():
    model = tiny_model(context=16)
    with pytest.raises(ValueError, match="leaves no room in the context of 16"):
        model.generate(model.encode_prompts(["x" * 20]), 5)
    gen = model.generate(model.encode_prompts(["x" * 10]), 100)  # budget cut to the context
    assert gen.tokens.shape[1] <= 16 - 12
    with pytest.raises(ValueError, match="exceeds the model's context of 16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        TinyLMConfig(d_model=30, n_heads=4)


def test_checkpoint_round_trip(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path / "ckpt")
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["kind"] == "tiny"
    loaded = TinyCausalLM.from_pretrained(tmp_path / "ckpt")
    ids = torch.randint(5, 50, (2, 10))
    assert torch.equal(model(ids), loaded(ids))
    with pytest.raises(FileNotFoundError, match="not a TinyCausalLM checkpoint"):
        TinyCausalLM.from_pretrained(tmp_path)


def test_supervised_warm_start_lowers_the_loss():
    model = tiny_model()
    pairs = [(f"What is {a} + {b}?", f"#### {a + b}") for a in range(10) for b in range(10)]
    first = supervised_warm_start(model, pairs, steps=5, batch_size=16, lr=3e-3, warmup=1)
    later = supervised_warm_start(model, pairs, steps=60, batch_size=16, lr=3e-3, warmup=1)
    assert later.final_loss < first.final_loss - 0.5
    with pytest.raises(ValueError, match="none of the 1 demonstrations fits"):
        supervised_warm_start(tiny_model(context=8), [("long prompt", "long answer")], steps=1)


def test_text_adapter_collects_groups():
    adapter = TextRolloutAdapter("Math/ChainSum-v0", seed=0, max_new_tokens=24)
    assert isinstance(adapter, RolloutAdapter)
    assert adapter.constraint_names == ("length", "format", "banned")
    model = tiny_model()
    batch = adapter.collect(model, num_groups=3, group_size=4)
    assert batch.components.shape == (3, 4, 4) and batch.env_steps == 12
    assert batch.logp_old.shape == batch.mask.shape and batch.mask.shape[0] == 12
    # Every member of a group answered the same prompt.
    prompts = adapter.prompts_for_seeds(batch.data.seeds)
    assert len(set(prompts)) == len(prompts) or len(prompts) == 3
    logp, entropy = adapter.log_probs(model, batch, torch.arange(12))
    assert torch.allclose(logp[batch.mask], batch.logp_old[batch.mask], atol=1e-5)
    assert logp.requires_grad and logp.shape == batch.logp_old.shape
    assert batch.info["tokens"] == float(batch.mask.sum())


def test_text_adapter_skips_prompts_that_do_not_fit(tmp_path):
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps({"question": "q" * 200, "answer": "#### 1"}), json.dumps({"question": "Two?", "answer": "#### 2"})]
    path.write_text("\n".join(lines) + "\n")
    adapter = TextRolloutAdapter("Math/WordProblems-v0", {"path": str(path)}, seed=0, max_new_tokens=8)
    batch = adapter.collect(tiny_model(context=64), 4, 2)
    assert set(adapter.prompts_for_seeds(batch.data.seeds)) == {"Two?"}
    assert batch.info["skipped_prompts"] >= 0 and adapter.skipped_prompts == batch.info["skipped_prompts"]
    only_long = tmp_path / "long.jsonl"
    only_long.write_text(lines[0] + "\n")
    adapter = TextRolloutAdapter("Math/WordProblems-v0", {"path": str(only_long)}, seed=0, max_redraws=2)
    with pytest.raises(ValueError, match="longer context"):
        adapter.collect(tiny_model(context=64), 2, 2)


def test_non_text_task_is_rejected():
    assert is_text_task("Math/ChainSum-v0") and not is_text_task("Grid/HazardFuel3x3-v0")
    with pytest.raises(TypeError, match="not a text task"):
        TextRolloutAdapter("Grid/HazardFuel3x3-v0")


@pytest.mark.parametrize("algo", ["cgrpo", "grpo-screw", "grpo"])
def test_grpo_variants_train_on_math(algo):
    agent = make_text_grpo_agent("Math/ChainSum-v0", seed=0, algo=algo, preset="quick", lm=TINY)
    records = []
    agent.learn(32, records.append)
    assert len(records) == 2 and agent.config.aggregator == {"cgrpo": "scadv", "grpo-screw": "screw", "grpo": "reward"}[algo]
    for r in records:
        validate_log_record(r, num_constraints=3)
        assert 0.0 <= r["accuracy"] <= 1.0 and r["tokens"] > 0
    assert len(agent.multipliers) == (0 if algo == "grpo" else 3)
    if algo != "grpo":
        assert agent.multipliers[1] > 0  # the untrained model never writes '#### n': format cost 1 > 0.1


def test_agent_evaluate_save_load(tmp_path):
    agent = TextGRPOAgent("Math/ChainSum-v0", seed=1, preset="quick", lm=TINY)
    agent.learn(16)
    result = agent.evaluate(6, deterministic=True)
    assert result.returns.shape == (6,) and result.costs.shape == (6, 3) and set(agent.last_eval) >= {"accuracy"}
    again = agent.evaluate(6, deterministic=True)
    np.testing.assert_array_equal(result.costs, again.costs)
    assert isinstance(agent.act("What is 1 + 1?"), str)
    agent.save(tmp_path / "run")
    loaded = load_text_agent(tmp_path / "run")
    assert loaded.trainer.iteration == agent.trainer.iteration
    np.testing.assert_allclose(loaded.multipliers, agent.multipliers)
    for (k, v), (k2, v2) in zip(agent.policy.state_dict().items(), loaded.policy.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    other = TextGRPOAgent("Math/ChainSum-v0", seed=1, preset="quick", lm=TINY, lr=5e-4)
    with pytest.raises(ValueError, match="another config"):
        other.load(tmp_path / "run")


def test_agent_from_checkpoint_and_option_errors(tmp_path):
    tiny_model().save_pretrained(tmp_path / "warm")
    agent = TextGRPOAgent("Math/ChainSum-v0", preset="quick", lm={"init_from": str(tmp_path / "warm")})
    assert agent.sft_result is None and agent.policy.config.d_model == 32
    with pytest.raises(ValueError, match="unknown lm option"):
        TextGRPOAgent("Math/ChainSum-v0", preset="quick", lm={"layers": 2})
    with pytest.raises(ValueError, match="unknown GRPO option"):
        TextGRPOAgent("Math/ChainSum-v0", preset="quick", lm=TINY, learning_rate=1e-3)
    with pytest.raises(ValueError, match="unknown preset"):
        TextGRPOAgent("Math/ChainSum-v0", preset="huge")
    with pytest.raises(ValueError, match="lm.max_new_tokens"):
        LMConfig(max_new_tokens=0)


def test_trainer_needs_no_math_code():
    # The shared trainer runs a text batch through the same loop as control tasks.
    model = tiny_model()
    adapter = TextRolloutAdapter("Math/Arithmetic-v0", seed=0, max_new_tokens=16)
    cfg = make_config("quick", num_groups=2, group_size=3, minibatches=1, epochs=1, lr=1e-4)
    trainer = GRPOTrainer(cfg, adapter, model)
    record = trainer.step()
    assert record["env_steps"] == 6 and len(record["ep_cost"]) == 3
