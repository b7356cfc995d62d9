"""Prompt caching where the provider has to be asked: Anthropic caches a prefix only up to a `cache_control` mark.

Every round signature puts its static inputs first and the growing state last (signatures.py), so the static prefix
of a call is everything before its last input field. `mark_static_prefix` splits the last user message there into
two user messages (the Messages API joins consecutive user turns) and marks the first, plus the system prompt:

- on DSPy's native client (lm15) with its prompt-cache option, `CacheConfig(prefix_until_index=i)`, which marks the
  system block and the last block of message i;
- on LiteLLM, which DSPy's option does not reach, with LiteLLM's `cache_control_injection_points`.

Both were checked against the provider simulator's log (tests/test_providers.py): the marks reach the wire on each
path, and the second round reads the first round's prefix from the cache. Providers that cache by themselves
(OpenAI, Gemini, DashScope) get nothing extra: their requests are left as they were.
https://docs.claude.com/en/docs/build-with-claude/prompt-caching
"""

from __future__ import annotations

import re

from dspy.lm15 import CacheConfig

# A line that is an input field's header in DSPy's chat and JSON formats ("[[ ## already_found ## ]]"); the
# closing instruction names output fields inline, in backticks, never at the start of a line.
_INPUT_HEADER = re.compile(r"^\[\[ ## \w+ ## \]\]$", re.M)


def uses_native_client(lm) -> bool:
    """Whether DSPy sends this LM's calls through its native client (lm15) rather than LiteLLM."""
    from dspy.clients.backend_selection import select_backend

    try:
        return select_backend(lm).native
    except Exception:  # noqa: BLE001 - a custom engine, or a model lm15 does not route: not native
        return False


def split_static_prefix(messages: list[dict]) -> int | None:
    """Split the last user message of `messages`, in place, before its last input field; the index of the static
    half (None when there is nothing to split: no such header, or nothing before it)."""
    if not messages or messages[-1].get("role") != "user" or not isinstance(messages[-1].get("content"), str):
        return None
    content = messages[-1]["content"]
    headers = list(_INPUT_HEADER.finditer(content))
    if not headers or headers[-1].start() == 0:
        return None
    cut = headers[-1].start()
    messages[-1:] = [{"role": "user", "content": content[:cut].rstrip("\n")},
                     {"role": "user", "content": content[cut:]}]
    return len(messages) - 2


def mark_static_prefix(lm, messages: list[dict] | None, kwargs: dict) -> dict:
    """The call options with the static prefix marked for caching, on an explicit-cache provider; `messages` (the
    adapter's list) is split in place where the mark goes."""
    if lm.tide_rules.prompt_cache != "explicit" or not messages or "prompt_cache" in kwargs:
        return kwargs
    static = split_static_prefix(messages)
    if static is None:
        return kwargs
    if getattr(lm, "tide_native_client", False):
        non_system = sum(1 for m in messages[:static] if m.get("role") != "system")
        return {**kwargs, "prompt_cache": CacheConfig(prefix_until_index=non_system)}
    points = [{"location": "message", "role": "system"}, {"location": "message", "index": static}]
    return {**kwargs, "cache_control_injection_points": points}
