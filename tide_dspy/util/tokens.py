"""Token counts: a quick 4-characters rule for sizing context windows, and a real BPE for cost estimates.

`estimate_tokens` needs nothing and is deterministic; windows and instance filters use it. `count_tokens` uses
tiktoken's o200k_base (else cl100k_base) when its vocabulary file is on this machine: tiktoken's own cache, or
the copy LiteLLM bundles. Nothing is ever downloaded; without a file it falls back to the 4-characters rule.
`tokenizer_name()` says which was used, so an estimate can say how it counted.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import tempfile
import threading
from pathlib import Path

CHARS_PER_TOKEN = 4
CHARS_RULE = f"{CHARS_PER_TOKEN} characters per token"
# tiktoken names a cached vocabulary by the SHA-1 of the URL it comes from; LiteLLM bundles files named the same way.
BPE_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
BPE_PREFERENCE = ("o200k_base", "cl100k_base")  # GPT-4o/GPT-5's vocabulary first


def estimate_tokens(text: str) -> int:
    """Rough token count: one token per 4 characters, rounded up.

    BPE tokenizers (Qwen, GPT) average about 3.5-4.5 characters per token on English prose and Python code, so this
    is good for budgeting prompts, not for billing. It needs no tokenizer and is deterministic.
    """
    return -(-len(text) // CHARS_PER_TOKEN)


def _cache_dirs() -> list[Path]:
    """Where a vocabulary file may already be: tiktoken's cache (as tiktoken looks it up), then LiteLLM's copy."""
    dirs = [os.environ.get("TIKTOKEN_CACHE_DIR"), os.environ.get("DATA_GYM_CACHE_DIR"),
            str(Path(tempfile.gettempdir()) / "data-gym-cache")]
    spec = importlib.util.find_spec("litellm")  # finds the package without importing it (a slow import)
    if spec is not None and spec.submodule_search_locations:
        dirs += [str(Path(p) / "litellm_core_utils" / "tokenizers") for p in spec.submodule_search_locations]
    return [Path(d) for d in dirs if d]


def _local_file(name: str) -> Path | None:
    key = hashlib.sha1(BPE_URL.format(name).encode()).hexdigest()
    return next((d / key for d in _cache_dirs() if (d / key).is_file()), None)


_LOAD_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _encoding():
    """(tiktoken Encoding, its name), or (None, the 4-characters rule) when no vocabulary file is here."""
    try:
        import tiktoken
    except ImportError:
        return None, CHARS_RULE
    for name in BPE_PREFERENCE:
        path = _local_file(name)
        if path is None:
            continue
        with _LOAD_LOCK:
            # tiktoken reads its cache folder from the environment; pointing it at the folder that holds the file
            # makes it load (and hash-check) that file instead of fetching the URL.
            before = os.environ.get("TIKTOKEN_CACHE_DIR")
            os.environ["TIKTOKEN_CACHE_DIR"] = str(path.parent)
            try:
                return tiktoken.get_encoding(name), f"{name} (tiktoken)"
            except Exception:  # noqa: BLE001, S112 - a damaged file: try the next vocabulary, else count characters
                continue
            finally:
                if before is None:
                    os.environ.pop("TIKTOKEN_CACHE_DIR", None)
                else:
                    os.environ["TIKTOKEN_CACHE_DIR"] = before
    return None, CHARS_RULE


def tokenizer_name() -> str:
    """What `count_tokens` counts with: "o200k_base (tiktoken)", or the 4-characters rule."""
    return _encoding()[1]


def count_tokens(text: str) -> int:
    """Tokens of `text` under o200k_base (or cl100k_base) when available offline, else `estimate_tokens`.

    Special-token text (e.g. "<|endoftext|>" inside a document) is counted as ordinary text, as a provider bills it."""
    encoding, _ = _encoding()
    if encoding is None:
        return estimate_tokens(text)
    return len(encoding.encode(text, disallowed_special=()))
