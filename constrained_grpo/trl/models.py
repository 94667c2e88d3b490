"""A character-level tokenizer and a tiny Llama, both built locally (no hub access).

They make the TRL path testable on a CPU: :func:`char_tokenizer` is a
``PreTrainedTokenizerFast`` whose vocabulary is the math family's charset (one token per
character, plus ``<pad>``, ``<bos>`` and ``<eos>``), and :func:`tiny_llama` a randomly
initialised ``LlamaForCausalLM`` sized by a few integers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHARSET_TASK", "SPECIAL_TOKENS", "char_tokenizer", "task_charset", "tiny_llama"]

#: Special tokens of :func:`char_tokenizer`, ids 0, 1, 2.
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>")


#: The task whose text space gives :func:`char_tokenizer` its characters by default (every
#: math task shares one charset).
CHARSET_TASK = "Math/ChainSum-v0"


def task_charset(task: str = CHARSET_TASK) -> str:
    """The characters of a registered text task's observation space, in its order."""
    from constrained_grpo.tasks import make_env

    env = make_env(task)
    try:
        return "".join(env.observation_space.character_list)
    finally:
        env.close()


def char_tokenizer(chars: str | None = None) -> Any:
    """A fast tokenizer with one token per character of ``chars`` (ids from 3 on; default: the
    math tasks' charset, :func:`task_charset`).

    A character outside ``chars`` is dropped (there is no unknown token to map it to: the
    math prompts are ASCII by construction). Decoding concatenates the characters.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = task_charset() if chars is None else chars
    if len(set(chars)) != len(chars) or not chars:
        raise ValueError(f"chars must be a non-empty string of distinct characters, got {len(chars)} with repeats")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({ch: len(SPECIAL_TOKENS) + i for i, ch in enumerate(chars)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    # Every character is its own pre-token, so WordLevel maps it to its id.
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", padding_side="left"
    )


def tiny_llama(
    tokenizer: Any,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 2,
    max_positions: int = 512,
    seed: int = 0,
) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` over ``tokenizer``'s vocabulary.

    ``intermediate_size = 2 * hidden_size``; weights are drawn under ``torch.manual_seed(seed)``.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be a multiple of num_heads={num_heads}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model
