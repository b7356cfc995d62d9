"""Grammar-constrained sampling that checks one token, not the whole vocabulary, at each step.

llama-cpp-python puts its grammar sampler first in the chain, so every step runs the grammar over all ~151k
tokens of the Qwen vocabulary. llama.cpp's own `common_sampler` (common/sampling.cpp) does it the other way:
sample without the grammar, ask the grammar whether that one token is allowed, and only when it is not, run
the grammar over the full vocabulary and sample again among the allowed tokens. `GrammarFilter` does the same
as a llama-cpp-python logits processor: it picks the token itself and leaves only that token's logit finite, so
the rest of llama-cpp-python's chain (greedy or top-k/top-p/temperature) keeps it.

At temperature 0 the choice is the same token as full-vocabulary masking (the argmax, if the grammar allows
it, is also the argmax of the allowed tokens); above 0, like llama.cpp's common sampler, a first draw that the
grammar allows is kept.
"""

from __future__ import annotations

import ctypes
import json

import numpy as np

# The sampling settings llama-cpp-python's create_chat_completion uses by default.
TOP_K, TOP_P, MIN_P = 40, 0.95, 0.05


class GrammarFilter:
    """A llama-cpp-python logits processor enforcing a GBNF grammar with llama.cpp's check-then-fallback.

    One instance serves one generation: it accepts each generated token into its grammar state when it sees
    the next step's input ids."""

    def __init__(self, llama, grammar: str, *, temperature: float = 0.0, seed: int = 0,
                 top_k: int | None = None, top_p: float | None = None, root: str = "root", logprobs: int | None = None):
        import llama_cpp

        self._lib, self._sampler = llama_cpp, None
        self._sampler = llama_cpp.llama_sampler_init_grammar(llama._model.vocab, grammar.encode(), root.encode())
        if not self._sampler:
            raise ValueError("llama.cpp could not parse the grammar built from the response schema")
        self.temperature = float(temperature or 0.0)
        self.top_k = top_k or TOP_K
        self.top_p = TOP_P if top_p is None else top_p
        self._rng = np.random.default_rng(seed)
        self._seen: int | None = None
        self._one = (llama_cpp.llama_token_data * 1)()
        self._full = None
        self.steps = 0
        self.fallbacks = 0  # steps where the first choice broke the grammar and the full vocabulary was checked
        # With `logprobs` (the top-n alternatives to keep, 0 for the chosen token only), one
        # (token, logprob, [(alternative, logprob), ...]) per step, from the model's own distribution before the
        # grammar: a rating the grammar forces to one digit still shows how the model weighed the others.
        self.logprobs_top = logprobs
        self.logprobs: list[tuple[int, float, list[tuple[int, float]]]] = []

    @classmethod
    def for_response_format(cls, llama, response_format: dict, **kwargs) -> GrammarFilter:
        """From an OpenAI-style `{"type": "json_object", "schema": ...}` (any JSON object when there is no schema)."""
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        schema = response_format.get("schema")
        text = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)._grammar if schema else JSON_GBNF
        return cls(llama, text, **kwargs)

    def close(self) -> None:
        if getattr(self, "_sampler", None):
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self):
        self.close()

    # ---- one step ----
    def __call__(self, input_ids, scores: np.ndarray) -> np.ndarray:
        self._accept_new(input_ids)
        self.steps += 1
        token = self._pick(scores)
        if not self._allows(token, float(scores[token])):
            self.fallbacks += 1
            token = self._pick(self._mask_full(scores))
        if self.logprobs_top is not None:
            self._record(scores, token)
        out = np.full_like(scores, -np.inf)
        out[token] = scores[token] if np.isfinite(scores[token]) else 0.0
        return out

    def _record(self, scores: np.ndarray, token: int) -> None:
        finite = np.isfinite(scores)
        shift = scores[finite].max()
        log_total = shift + np.log(np.exp(scores[finite] - shift).sum())
        n = min(self.logprobs_top, scores.size)
        top = np.argpartition(-scores, n - 1)[:n] if n else np.array([], dtype=int)
        top = top[np.argsort(-scores[top])]
        chosen = float(scores[token] - log_total) if finite[token] else float("-inf")
        self.logprobs.append((token, chosen, [(int(t), float(scores[t] - log_total)) for t in top if finite[t]]))

    def _accept_new(self, input_ids) -> None:
        """Feed the grammar the tokens generated since the last step (none at the first step: the prompt)."""
        n = len(input_ids)
        if self._seen is not None:
            for token in input_ids[self._seen:n]:
                self._lib.llama_sampler_accept(self._sampler, int(token))
        self._seen = n

    def _pick(self, scores: np.ndarray) -> int:
        if self.temperature <= 0:
            return int(np.argmax(scores))
        k = min(self.top_k, scores.size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top])]
        logits = scores[top].astype(np.float64) / self.temperature
        finite = np.isfinite(logits)
        top, logits = top[finite], logits[finite]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        keep = p >= MIN_P * p[0]
        keep &= np.concatenate(([True], np.cumsum(p)[:-1] < self.top_p))
        top, p = top[keep], p[keep] / p[keep].sum()
        return int(self._rng.choice(top, p=p))

    def _apply(self, data, size: int) -> None:
        array = self._lib.llama_token_data_array(data=ctypes.cast(data, self._lib.llama_token_data_p), size=size,
                                                 selected=-1, sorted=False)
        self._lib.llama_sampler_apply(self._sampler, ctypes.byref(array))

    def _allows(self, token: int, logit: float) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, logit if np.isfinite(logit) else 0.0, 0.0
        self._apply(self._one, 1)
        return bool(np.isfinite(self._one[0].logit))

    def _mask_full(self, scores: np.ndarray) -> np.ndarray:
        """`scores` with -inf wherever the grammar rejects the token (llama.cpp's full-vocabulary pass)."""
        n = scores.size
        if self._full is None or len(self._full) != n:
            self._full = (self._lib.llama_token_data * n)()
            self._view = np.ctypeslib.as_array(self._full)
        self._view["id"] = np.arange(n, dtype=np.intc)
        self._view["logit"] = np.where(np.isfinite(scores), scores, np.finfo(np.single).min)
        self._view["p"] = 0.0
        self._apply(self._full, n)
        allowed = np.isfinite(self._view["logit"])
        if not allowed.any():
            raise RuntimeError("the grammar allows no token here (the response schema cannot be completed)")
        return np.where(allowed, scores, -np.inf)
