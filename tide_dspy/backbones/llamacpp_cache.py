"""A persistent prompt cache for the embedded engine: llama.cpp's evaluated state, kept on disk across calls and
processes and keyed by its token prefix.

In one process the shared `Llama` already reuses the longest common prefix of its *last* call. This cache keeps
more than the last one and outlives the process: after a call whose prompt cost at least `min_new_tokens` of
fresh evaluation, the context's state (`llama_state_get_data`: the KV cache of every evaluated token) is written
to `<dir>/<model>-ctx<n_ctx>/<sha>.state` beside its tokens (`<sha>.tokens.npy`). Before a call, the entry
sharing the longest prefix with the new prompt is loaded (`llama_state_set_data`) when it beats what is already in
memory; llama.cpp then evaluates only the tail. So reruns, other methods and tuning trials on the same instance
pay for their new tokens only.

Configure with TIDE_PROMPT_CACHE: unset, "" or "0"/"off" disables it; "1"/"on" uses ~/.cache/tide-dspy/prompt-cache
(under TIDE_CACHE_DIR when set); anything else is the folder. TIDE_PROMPT_CACHE_MAX_MB bounds its disk use
(default 4096): the least recently used entries go first. Entries are raw bytes and a numpy array read with
allow_pickle=False: nothing in the folder is executed or unpickled.

llama-cpp-python's own LlamaDiskCache was measured unfit here: it pickles a copy of the logits buffer with every
entry (n_batch x vocabulary floats, about 300 MB for Qwen2.5), prints to stderr on every save, and removes an
entry when it is read.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from pathlib import Path

import numpy as np

from tide_dspy.util.hashing import short_sha256
from tide_dspy.util.settings import Settings, settings

log = logging.getLogger(__name__)

ENV = "TIDE_PROMPT_CACHE"
MAX_MB_ENV = "TIDE_PROMPT_CACHE_MAX_MB"
DEFAULT_MAX_MB = Settings.model_fields["prompt_cache_max_mb"].default
MIN_NEW_TOKENS = 256


def configured_dir() -> Path | None:
    raw = settings().prompt_cache.strip()
    if raw.lower() in ("", "0", "off", "false", "no"):
        return None
    if raw.lower() in ("1", "on", "true", "yes"):
        return (settings().cache_dir or Path.home() / ".cache" / "tide-dspy") / "prompt-cache"
    return Path(raw).expanduser()


def max_bytes() -> int:
    return int(settings().prompt_cache_max_mb * 1024 * 1024)


class PromptCache:
    """The entries of one model file at one context size."""

    def __init__(self, folder: Path, limit_bytes: int, min_new_tokens: int = MIN_NEW_TOKENS):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.limit_bytes = limit_bytes
        self.min_new_tokens = min_new_tokens
        self.restored = 0  # tokens loaded from disk by the last call (0 when none)
        self.seconds = 0.0  # time spent loading (before) and saving (after) in the last call

    # ---- llama-cpp-python's cache hook: it hands over the exact prompt tokens of each completion ----
    def attach(self, llama) -> None:
        """Before a call: llama.cpp will ask this hook for the prompt's tokens once (then the hook detaches,
        so llama-cpp-python's own end-of-call save, which copies the logits buffer, never runs)."""
        self.restored, self.seconds = 0, 0.0
        llama.set_cache(_Hook(self, llama))

    def detach(self, llama) -> None:
        if isinstance(llama.cache, _Hook):
            llama.set_cache(None)

    def restore(self, llama, prompt: list[int]) -> int:
        """Load the entry with the longest prefix of `prompt` if it beats what llama holds; the tokens loaded."""
        t0 = time.perf_counter()
        held = common_prefix(llama.input_ids[: llama.n_tokens].tolist(), prompt)
        best, best_len = None, 0
        for tokens_path in self.folder.glob("*.tokens.npy"):
            try:
                tokens = np.load(tokens_path, allow_pickle=False)
            except (OSError, ValueError):
                continue
            n = common_prefix(tokens.tolist(), prompt)
            if n > best_len:
                best, best_len = (tokens_path, tokens), n
        if best is None or best_len <= held + 1:
            return 0
        tokens_path, tokens = best
        state_path = tokens_path.with_name(tokens_path.name.removesuffix(".tokens.npy") + ".state")
        try:
            data = state_path.read_bytes()
        except OSError:
            return 0
        import llama_cpp

        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_set_data(llama._ctx.ctx, buffer, len(data)) != len(data):
            log.warning("prompt cache: %s did not load; removing it", state_path.name)
            self._remove(tokens_path)
            llama.reset()
            return 0
        n = len(tokens)
        llama.input_ids[:n] = tokens
        llama.n_tokens = n
        llama._requires_eval = True
        os.utime(tokens_path)  # recently used
        self.restored, self.seconds = best_len, time.perf_counter() - t0
        log.info("prompt cache: loaded %d tokens (%d of them this prompt's prefix) in %.2fs",
                 n, best_len, self.seconds)
        return best_len

    def keep(self, llama, raw: dict, before: list[int]) -> Path | None:
        """After a call (`raw`: its chat completion; `before`: the tokens llama held before it): store the state
        when the prompt's freshly evaluated tail was long enough to be worth a file."""
        prompt = int((raw.get("usage") or {}).get("prompt_tokens") or 0)
        reused = max(common_prefix(before, llama.input_ids[:prompt].tolist()), self.restored)
        return self.store(llama, prompt - reused)

    def store(self, llama, new_tokens: int) -> Path | None:
        """After a call: keep llama's state if this call evaluated at least min_new_tokens fresh tokens."""
        if new_tokens < self.min_new_tokens or llama.n_tokens == 0:
            return None
        import llama_cpp

        t0 = time.perf_counter()
        tokens = np.asarray(llama.input_ids[: llama.n_tokens], dtype=np.int32)
        key = short_sha256(tokens.tobytes(), length=24)
        size = llama_cpp.llama_state_get_size(llama._ctx.ctx)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_get_data(llama._ctx.ctx, buffer, size)
        if written > self.limit_bytes:
            log.info("prompt cache: a state of %d MB exceeds the bound; not kept", written >> 20)
            return None
        state_path = self.folder / f"{key}.state"
        tmp = state_path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(memoryview(buffer)[:written])
        tmp.replace(state_path)
        tokens_tmp = self.folder / f"{key}.tmp{os.getpid()}.npy"
        np.save(tokens_tmp, tokens, allow_pickle=False)
        tokens_tmp.replace(self.folder / f"{key}.tokens.npy")
        self._evict()
        self.seconds += time.perf_counter() - t0
        return state_path

    # ---- bookkeeping ----
    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.folder.iterdir() if p.is_file())

    def _evict(self) -> None:
        entries = sorted(self.folder.glob("*.tokens.npy"), key=lambda p: p.stat().st_mtime)
        while entries and self.size_bytes() > self.limit_bytes:
            self._remove(entries.pop(0))

    def _remove(self, tokens_path: Path) -> None:
        stem = tokens_path.name.removesuffix(".tokens.npy")
        for path in (tokens_path, tokens_path.with_name(stem + ".state")):
            path.unlink(missing_ok=True)


class _Hook:
    """Stands in llama.cache for one call: looked up with the prompt tokens, it restores and reports a miss."""

    def __init__(self, cache: PromptCache, llama):
        self.cache, self.llama = cache, llama

    def __getitem__(self, prompt_tokens):
        self.llama.set_cache(None)
        self.cache.restore(self.llama, list(prompt_tokens))
        raise KeyError("restored by tide's prompt cache (or nothing to restore)")


def common_prefix(a, b) -> int:
    """How many leading tokens two token sequences share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


_CACHES: dict[tuple, PromptCache] = {}
_LOCK = threading.Lock()


def for_model(model_key: str, n_ctx: int) -> PromptCache | None:
    """The cache of this model (a name carrying its weights hash) at this context size, or None when disabled."""
    folder = configured_dir()
    if folder is None:
        return None
    key = (str(folder), model_key, n_ctx)
    with _LOCK:
        if key not in _CACHES:
            _CACHES[key] = PromptCache(folder / f"{model_key}-ctx{n_ctx}", max_bytes())
        return _CACHES[key]
