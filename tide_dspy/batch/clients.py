"""Submitting a batch of provider requests, polling it and reading its results, for each provider's batch API.

LiteLLM's file and batch API does most of it: `create_file`, `create_batch`, `retrieve_batch` and `file_content`
for OpenAI (and DashScope's OpenAI-compatible batch interface, at its own address), and for Gemini's Batch Mode
(LiteLLM 1.110 uploads through the Files API's resumable protocol and creates, reads and downloads batch jobs);
`retrieve_batch` and `file_content` for Anthropic's Message Batches. What LiteLLM lacks is written here, thinly:
creating an Anthropic Message Batch (LiteLLM's AnthropicBatchesConfig.transform_create_batch_request raises
NotImplementedError), and reading each provider's result lines back into the HTTP status and body that the same
request would have been answered with online, which is what DSPy's own client then parses.

The lines carry the request bodies DSPy's native client built for the online call (batch.engine captures them), so
a batched request is the online request, byte for byte.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import httpx

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of LiteLLM's price map

# Anthropic's error types and their HTTP statuses (https://docs.claude.com/en/api/errors): an errored batch line
# carries the type only, and DSPy's client maps the status.
ANTHROPIC_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
                    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                    "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529}


@dataclass(frozen=True)
class Endpoint:
    """Where one group of requests goes, and as whom: what the online request would have used. The credential and
    headers live in memory only; nothing here is written or logged."""

    provider: str  # openai | anthropic | gemini | dashscope
    base: str  # the online API's base: https://api.openai.com/v1, .../anthropic/v1, .../v1beta
    model: str  # the model id on the wire
    credential: str = field(repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # batch-level headers (anthropic-beta)
    timeout: float = 600.0

    @property
    def label(self) -> str:
        return f"{self.provider}/{self.model}"


@dataclass(frozen=True)
class Status:
    """A batch as its provider reports it: `state` in the provider's words, `done` once it has ended for good,
    `failed` with the provider's reasons when the whole batch was refused."""

    state: str
    done: bool
    total: int = 0
    finished: int = 0
    failed: str | None = None


@dataclass(frozen=True)
class LineResult:
    """One request's outcome: the HTTP status and body the online call would have received, or status 0 with the
    reason when it was never answered (expired, cancelled)."""

    status: int
    body: bytes = b""
    reason: str = ""

    @property
    def answered(self) -> bool:
        return self.status == 200

    @property
    def retryable(self) -> bool:
        """Worth sending again in another batch: never answered, rate-limited or a server error."""
        return self.status == 0 or self.status == 429 or self.status >= 500


def _json(data) -> bytes:
    return json.dumps(data).encode()


def _litellm():
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class OpenAIBatches:
    """OpenAI's Batch API through LiteLLM: a JSONL file of `{custom_id, method, url, body}` lines, then a batch.
    DashScope's OpenAI-compatible batch interface takes the same calls at its own address."""

    url = "/v1/chat/completions"

    def line(self, custom_id: str, body: dict) -> dict:
        return {"custom_id": custom_id, "method": "POST", "url": self.url, "body": body}

    def _auth(self, endpoint: Endpoint) -> dict:
        return {"custom_llm_provider": "openai", "api_base": endpoint.base, "api_key": endpoint.credential,
                "timeout": endpoint.timeout}

    def submit(self, endpoint: Endpoint, lines: list[dict], label: str) -> str:
        litellm = _litellm()
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
        file = litellm.create_file(file=(f"{label}.jsonl", data, "application/jsonl"), purpose="batch",
                                   **self._auth(endpoint))
        batch = litellm.create_batch(completion_window="24h", endpoint=self.url, input_file_id=file.id,
                                     metadata={"tide": label}, **self._auth(endpoint))
        return batch.id

    def status(self, endpoint: Endpoint, batch_id: str) -> Status:
        batch = _litellm().retrieve_batch(batch_id, **self._auth(endpoint))
        counts = batch.request_counts
        errors = [e.message for e in ((batch.errors.data or []) if batch.errors else []) if e.message]
        return Status(batch.status, batch.status in ("completed", "failed", "expired", "cancelled"),
                      counts.total if counts else 0, (counts.completed + counts.failed) if counts else 0,
                      "; ".join(errors) or "the provider refused the batch" if batch.status == "failed" else None)

    def results(self, endpoint: Endpoint, batch_id: str) -> dict[str, LineResult]:
        litellm = _litellm()
        batch = litellm.retrieve_batch(batch_id, **self._auth(endpoint))
        found = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            text = litellm.file_content(file_id, **self._auth(endpoint)).content.decode("utf-8")
            for row in text.splitlines():
                if not row.strip():
                    continue
                item = json.loads(row)
                response = item.get("response") or {}
                if response.get("status_code"):
                    found[item["custom_id"]] = LineResult(int(response["status_code"]), _json(response.get("body")))
                else:
                    error = item.get("error") or {}
                    found[item["custom_id"]] = LineResult(0, reason=error.get("code") or "not answered")
        return found


class AnthropicBatches:
    """Anthropic's Message Batches: created here (LiteLLM cannot), read through LiteLLM's retrieve_batch and
    file_content (which fetches the batch's results)."""

    def line(self, custom_id: str, body: dict) -> dict:
        return {"custom_id": custom_id, "params": body}

    def _auth(self, endpoint: Endpoint) -> dict:
        # LiteLLM appends /v1/messages/batches itself.
        return {"custom_llm_provider": "anthropic", "api_base": endpoint.base.removesuffix("/v1"),
                "api_key": endpoint.credential, "timeout": endpoint.timeout}

    def submit(self, endpoint: Endpoint, lines: list[dict], label: str) -> str:
        headers = {**dict(endpoint.headers), "x-api-key": endpoint.credential, "content-type": "application/json"}
        response = httpx.post(f"{endpoint.base}/messages/batches", headers=headers, timeout=endpoint.timeout,
                              content=json.dumps({"requests": lines}, ensure_ascii=False).encode())
        if response.status_code >= 400:
            raise BatchRefused(f"{endpoint.label}: creating a Message Batch was refused with HTTP "
                               f"{response.status_code}: {_error_message(response)}", response.status_code)
        return response.json()["id"]

    def status(self, endpoint: Endpoint, batch_id: str) -> Status:
        batch = _litellm().retrieve_batch(batch_id, **self._auth(endpoint))
        counts = batch.request_counts
        return Status(batch.status, batch.status in ("completed", "cancelled", "expired", "failed"),
                      counts.total if counts else 0, (counts.completed + counts.failed) if counts else 0)

    def results(self, endpoint: Endpoint, batch_id: str) -> dict[str, LineResult]:
        text = _litellm().file_content(batch_id, **self._auth(endpoint)).content.decode("utf-8")
        found = {}
        for row in text.splitlines():
            if not row.strip():
                continue
            item = json.loads(row)
            result = item.get("result") or {}
            if result.get("type") == "succeeded":
                found[item["custom_id"]] = LineResult(200, _json(result.get("message")))
            elif result.get("type") == "errored":
                error = result.get("error") or {}
                kind = (error.get("error") or {}).get("type", "api_error")
                found[item["custom_id"]] = LineResult(ANTHROPIC_STATUS.get(kind, 500), _json(error))
            else:
                found[item["custom_id"]] = LineResult(0, reason=result.get("type") or "not answered")
        return found


class GeminiBatches:
    """Gemini's Batch Mode through LiteLLM: a JSONL file of `{key, request}` lines uploaded with the Files API, a
    batchGenerateContent job reading it, and its responses file."""

    def line(self, custom_id: str, body: dict) -> dict:
        return {"key": custom_id, "request": body}

    def _auth(self, endpoint: Endpoint, model: bool = False) -> dict:
        # LiteLLM's Gemini base is the API's root, without /v1beta.
        auth = {"custom_llm_provider": "gemini", "api_base": endpoint.base.removesuffix("/v1beta"),
                "api_key": endpoint.credential, "timeout": endpoint.timeout}
        return {**auth, "model": f"gemini/{endpoint.model}"} if model else auth

    def submit(self, endpoint: Endpoint, lines: list[dict], label: str) -> str:
        litellm = _litellm()
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
        file = litellm.create_file(file=(f"{label}.jsonl", data, "application/jsonl"), purpose="batch",
                                   **self._auth(endpoint))
        batch = litellm.create_batch(completion_window="24h", endpoint="/v1/chat/completions", input_file_id=file.id,
                                     metadata={"display_name": label}, **self._auth(endpoint, model=True))
        return batch.id

    def status(self, endpoint: Endpoint, batch_id: str) -> Status:
        batch = _litellm().retrieve_batch(batch_id, **self._auth(endpoint, model=True))
        counts = batch.request_counts
        done = batch.status in ("completed", "failed", "expired", "cancelled")
        return Status(batch.status, done, counts.total if counts else 0,
                      (counts.completed + counts.failed) if counts else 0,
                      "the provider failed the batch job" if batch.status == "failed" else None)

    def results(self, endpoint: Endpoint, batch_id: str) -> dict[str, LineResult]:
        litellm = _litellm()
        batch = litellm.retrieve_batch(batch_id, **self._auth(endpoint, model=True))
        if not batch.output_file_id:
            return {}
        text = litellm.file_content(batch.output_file_id, **self._auth(endpoint)).content.decode("utf-8")
        found = {}
        for row in text.splitlines():
            if not row.strip():
                continue
            item = json.loads(row)
            if isinstance(item.get("response"), dict):
                found[str(item["key"])] = LineResult(200, _json(item["response"]))
                continue
            # A failed line is a google.rpc.Status; online, the same failure is that status in an error envelope.
            error = item.get("error") or item.get("status") or {}
            code = int(error.get("code") or 500)
            found[str(item["key"])] = LineResult(code if 400 <= code < 600 else 500, _json({"error": error}))
        return found


class BatchRefused(Exception):
    """The provider refused to create a batch (a bad key, a file too large): the whole group fails with it."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error") or {}
        return str(error.get("message") or error)[:300]
    except ValueError:
        return response.text[:300]


CLIENTS = {"openai": OpenAIBatches(), "dashscope": OpenAIBatches(), "anthropic": AnthropicBatches(),
           "gemini": GeminiBatches()}
