"""Token counts: a quick 4-characters rule, and a real BPE for windows and cost estimates.

`estimate_tokens` needs nothing and is deterministic; the instance filter (--max-context-tokens) uses it.
`count_tokens` uses tiktoken's o200k_base (GPT-4o's and GPT-5's vocabulary) from the copy LiteLLM bundles (a DSPy
dependency, so it is always here; tiktoken is pointed at it as LiteLLM itself does), and falls back to the
4-characters rule where tiktoken cannot load it. LiteLLM's own `token_counter` is not used: it counts GPT-4o and
GPT-5 prompts with cl100k_base, and importing LiteLLM takes seconds. `tokenizer_name()` says which was used, so an
estimate can say how it counted.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

CHARS_PER_TOKEN = 4
CHARS_RULE = f"{CHARS_PER_TOKEN} characters per token"
VOCABULARY = "o200k_base"


def estimate_tokens(text: str) -> int:
    """Rough token count: one token per 4 characters, rounded up.

    BPE tokenizers (Qwen, GPT) average about 3.5-4.5 characters per token on English prose and Python code, so this
    is good for budgeting prompts, not for billing. It needs no tokenizer and is deterministic.
    """
    return -(-len(text) // CHARS_PER_TOKEN)


@functools.lru_cache(maxsize=1)
def _encoding():
    """(tiktoken Encoding, its name), or (None, the 4-characters rule) when tiktoken cannot load the vocabulary."""
    spec = importlib.util.find_spec("litellm")  # finds the package without importing it (a slow import)
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(bundled))
    try:
        import tiktoken

        return tiktoken.get_encoding(VOCABULARY), f"{VOCABULARY} (tiktoken)"
    except Exception:  # noqa: BLE001 - no tiktoken, no vocabulary file, no network: count characters
        return None, CHARS_RULE


def tokenizer_name() -> str:
    """What `count_tokens` counts with: "o200k_base (tiktoken)", or the 4-characters rule."""
    return _encoding()[1]


def count_tokens(text: str) -> int:
    """Tokens of `text` under o200k_base when available, else `estimate_tokens`.

    Special-token text (e.g. "<|endoftext|>" inside a document) is counted as ordinary text, as a provider bills it."""
    encoding, _ = _encoding()
    if encoding is None:
        return estimate_tokens(text)
    return len(encoding.encode(text, disallowed_special=()))
