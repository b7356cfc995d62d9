"""Token estimates without a tokenizer."""

from __future__ import annotations

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Rough token count: one token per 4 characters, rounded up.

    BPE tokenizers (Qwen, GPT) average about 3.5-4.5 characters per token on English prose and Python code, so this
    is good for budgeting prompts, not for billing. It needs no tokenizer and is deterministic.
    """
    return -(-len(text) // CHARS_PER_TOKEN)
