"""The persistent prompt cache's bookkeeping, on a fake Llama whose "state" is a byte string (no model here; the
real measurement is experiments/bench_prompt_cache.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")

from tide_dspy.backbones import llamacpp_cache  # noqa: E402
from tide_dspy.backbones.llamacpp_cache import PromptCache  # noqa: E402


class FakeLlama:
    def __init__(self, n_ctx: int = 4096):
        self.input_ids = np.zeros(n_ctx, dtype=np.intc)
        self.n_tokens = 0
        self.cache = None
        self._ctx = SimpleNamespace(ctx=self)
        self._requires_eval = False
        self.kv = b""

    def set_cache(self, cache):
        self.cache = cache

    def reset(self):
        self.n_tokens = 0

    def evaluate(self, tokens: list[int]):
        """Stands for llama.cpp evaluating `tokens`: the state is derived from them."""
        self.input_ids[: len(tokens)] = tokens
        self.n_tokens = len(tokens)
        self.kv = bytes(t % 251 for t in tokens) * 3


@pytest.fixture(autouse=True)
def fake_state_api(monkeypatch):
    def get_data(llama, buffer, size):
        buffer[: len(llama.kv)] = llama.kv
        return len(llama.kv)

    def set_data(llama, buffer, size):
        llama.kv = bytes(buffer)[:size]
        return size

    monkeypatch.setattr(llama_cpp, "llama_state_get_size", lambda llama: len(llama.kv))
    monkeypatch.setattr(llama_cpp, "llama_state_get_data", get_data)
    monkeypatch.setattr(llama_cpp, "llama_state_set_data", set_data)


def test_a_new_process_restores_the_longest_prefix_and_evaluates_only_the_tail(tmp_path):
    first = FakeLlama()
    cache = PromptCache(tmp_path, limit_bytes=10**7, min_new_tokens=10)
    short, long = list(range(100, 150)), list(range(100, 400))
    for tokens in (short, long):
        first.evaluate(tokens)
        assert cache.store(first, new_tokens=len(tokens)) is not None
    stored_kv = first.kv

    again = FakeLlama()  # another process: nothing in memory
    fresh = PromptCache(tmp_path, limit_bytes=10**7, min_new_tokens=10)
    prompt = long[:250] + [7, 8, 9]
    assert fresh.restore(again, prompt) == 250
    assert again.n_tokens == 300 and again.input_ids[:300].tolist() == long and again.kv == stored_kv
    assert again._requires_eval  # llama.cpp re-decodes at least the last token before sampling
    # What is already in memory is not replaced by an entry no better than it.
    assert fresh.restore(again, prompt) == 0


def test_short_tails_are_not_stored_and_the_disk_bound_evicts_the_oldest(tmp_path):
    llama = FakeLlama()
    cache = PromptCache(tmp_path, limit_bytes=3000, min_new_tokens=100)
    llama.evaluate(list(range(50)))
    assert cache.store(llama, new_tokens=50) is None
    paths = []
    for start in (1000, 2000, 3000, 4000):
        llama.evaluate(list(range(start, start + 400)))
        paths.append(cache.store(llama, new_tokens=400))
    assert cache.size_bytes() <= 3000
    assert paths[-1].exists() and not paths[0].exists()


def test_the_hook_restores_once_and_detaches_so_llama_cpp_never_saves_its_own_copy(tmp_path):
    llama = FakeLlama()
    cache = PromptCache(tmp_path, limit_bytes=10**7, min_new_tokens=1)
    llama.evaluate(list(range(500, 800)))
    cache.store(llama, new_tokens=300)
    other = FakeLlama()
    cache.attach(other)
    assert other.cache is not None
    with pytest.raises(KeyError):
        other.cache[list(range(500, 700))]
    assert other.cache is None and cache.restored == 200 and other.n_tokens == 300


def test_configuration(monkeypatch, tmp_path):
    monkeypatch.delenv(llamacpp_cache.ENV, raising=False)
    assert llamacpp_cache.for_model("m", 4096) is None
    monkeypatch.setenv(llamacpp_cache.ENV, "off")
    assert llamacpp_cache.for_model("m", 4096) is None
    monkeypatch.setenv("TIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(llamacpp_cache.ENV, "1")
    assert llamacpp_cache.for_model("m", 4096).folder == tmp_path / "prompt-cache" / "m-ctx4096"
    monkeypatch.setenv(llamacpp_cache.ENV, str(tmp_path / "mine"))
    monkeypatch.setenv(llamacpp_cache.MAX_MB_ENV, "0.5")
    cache = llamacpp_cache.for_model("m", 2048)
    assert cache.folder == tmp_path / "mine" / "m-ctx2048" and cache.limit_bytes == 2**19
    monkeypatch.setenv(llamacpp_cache.MAX_MB_ENV, "lots")
    with pytest.raises(ValueError, match="TIDE_PROMPT_CACHE_MAX_MB='lots'"):
        llamacpp_cache.for_model("m", 1024)
