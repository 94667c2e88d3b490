"""A character-level tokenizer for short math prompts and completions.

One token per character of printable ASCII (plus newline and tab), and five special
tokens: ``<pad>``, ``<bos>`` (starts a prompt), ``<sep>`` (ends the prompt: the completion
follows), ``<eos>`` (ends the completion) and ``<unk>`` (any other character). With this
tokenizer a completion's token count equals its character count, which is the math
tasks' default length unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["CharTokenizer", "DEFAULT_CHARS"]

#: Printable ASCII, newline and tab: the math tasks' charset.
DEFAULT_CHARS: str = "".join(chr(c) for c in range(32, 127)) + "\n\t"
_SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<sep>", "<eos>", "<unk>")


class CharTokenizer:
    """Characters to ids and back; ids 0-4 are the special tokens."""

    pad_id, bos_id, sep_id, eos_id, unk_id = range(5)

    def __init__(self, chars: str = DEFAULT_CHARS):
        if len(set(chars)) != len(chars):
            raise ValueError("the tokenizer's characters must be distinct")
        self.chars = chars
        self._to_id = {ch: i + len(_SPECIALS) for i, ch in enumerate(chars)}

    @property
    def vocab_size(self) -> int:
        return len(_SPECIALS) + len(self.chars)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; a character outside the vocabulary is ``<unk>``."""
        get = self._to_id.get
        return [get(ch, self.unk_id) for ch in text]

    def encode_prompt(self, prompt: str) -> list[int]:
        """``<bos> prompt <sep>``: what the policy reads before writing a completion."""
        return [self.bos_id, *self.encode(prompt), self.sep_id]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; specials are dropped, except ``<unk>``, which becomes ``?``."""
        n = len(_SPECIALS)
        out = []
        for i in ids:
            i = int(i)
            if i >= n and i - n < len(self.chars):
                out.append(self.chars[i - n])
            elif i == self.unk_id:
                out.append("?")
        return "".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "char", "chars": self.chars}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CharTokenizer":
        if data.get("kind") != "char":
            raise ValueError(f"not a character tokenizer config: {data!r}")
        return cls(str(data["chars"]))
