"""What each provider's batch API takes: requests and bytes per batch, the window a batch has to finish in, how long
its results are kept, and what a batched token costs against the same token sent online.

One `BatchRules` per provider, referenced from its `ProviderRules` (`rules.batch`); the batch machinery
(`tide_dspy.batch`) splits a round's calls by these limits and the provider simulator (`testing/batch_sim.py`)
enforces the same figures. Each rule names where it is documented; `unconfirmed` lists the rules that could not be
read on the provider's own pages, with where they were read instead.
"""

from __future__ import annotations

from dataclasses import dataclass

MB = 1024 * 1024


@dataclass(frozen=True)
class BatchRules:
    api: str  # openai | anthropic | gemini | dashscope: the wire format of the batch API
    max_requests: int  # requests in one batch
    max_bytes: int  # size of one batch: its input file, or the create request's body
    window_hours: int = 24  # a batch not finished by then expires; its unfinished requests are not answered
    price_factor: float = 0.5  # a batched token's price over the same token's online price
    results_days: int | None = None  # how long results can be fetched after creation; None: not documented
    # Whether prompt caching discounts apply inside a batch: True, False, or None where no page says.
    caches_in_batch: bool | None = None
    docs: tuple[str, ...] = ()
    unconfirmed: tuple[str, ...] = ()


OPENAI_BATCH = BatchRules(
    # https://help.openai.com/en/articles/9197833-batch-api-faq: processed within 24 hours, 50% of the synchronous
    # price; a batch that expires has its remaining work cancelled, its completed work returned and charged.
    # OpenAI's API reference, POST /v1/batches: the input file holds up to 50,000 requests and up to 200 MB;
    # completion_window "24h" is the only value.
    "openai", max_requests=50_000, max_bytes=200 * MB,
    docs=("https://help.openai.com/en/articles/9197833-batch-api-faq",
          "https://platform.openai.com/docs/api-reference/batch/create"),
    unconfirmed=("50,000 requests / 200 MB: read in OpenAI's API reference as mirrored by Azure AI Foundry's REST "
                 "reference (learn.microsoft.com/azure/foundry/reference/rest/batches-create-batch) and by SDK docs "
                 "generated from OpenAI's OpenAPI spec; platform.openai.com itself was not readable here",
                 "prompt caching inside a batch: no OpenAI page read here says whether cached-input prices apply"),
)

ANTHROPIC_BATCH = BatchRules(
    # https://docs.claude.com/en/docs/build-with-claude/batch-processing: a Message Batch is limited to 100,000
    # requests or 256 MB, whichever comes first; it ends within 24 hours or expires; results are available for 29
    # days after creation; all usage is charged at 50% of the standard price; prompt caching works inside a batch
    # (the guide advises the 1-hour cache duration, since a batch can take more than 5 minutes).
    "anthropic", max_requests=100_000, max_bytes=256 * MB, results_days=29, caches_in_batch=True,
    docs=("https://docs.claude.com/en/docs/build-with-claude/batch-processing",
          "https://docs.claude.com/en/api/creating-message-batches"),
)

GEMINI_BATCH = BatchRules(
    # https://ai.google.dev/gemini-api/docs/batch-mode: 50% of the standard cost, a 24-hour target turnaround;
    # inline requests up to 20 MB in all, a JSONL input file (one GenerateContentRequest a line) for larger ones.
    # https://ai.google.dev/api/batch-mode: models/{model}:batchGenerateContent, batch.inputConfig, batch.state.
    "gemini", max_requests=100_000, max_bytes=2048 * MB,
    docs=("https://ai.google.dev/gemini-api/docs/batch-mode", "https://ai.google.dev/api/batch-mode"),
    unconfirmed=("the 2 GB input-file limit: from a third-party write-up of Batch Mode (apidog.com), not Google's "
                 "page", "requests per batch: no limit found on Google's pages; 100,000 is tide-dspy's own cap",
                 "expiry: the guide states a 24-hour target, not when an unfinished job expires",
                 "prompt caching inside a batch: not stated on the pages read here"),
)

DASHSCOPE_BATCH = BatchRules(
    # https://www.alibabacloud.com/help/en/model-studio/batch-interfaces-compatible-with-openai: an OpenAI-compatible
    # Batch File API (files, then batches, on compatible-mode/v1) at 50% of the real-time price; batch calls get no
    # context-cache discount; qwen3.6-flash is listed for the Beijing region, at most 256K context tokens a request.
    "dashscope", max_requests=50_000, max_bytes=500 * MB, caches_in_batch=False,
    docs=("https://www.alibabacloud.com/help/en/model-studio/batch-interfaces-compatible-with-openai",
          "https://help.aliyun.com/zh/model-studio/batch-interfaces-compatible-with-openai"),
    unconfirmed=("50,000 requests / 500 MB per input file: the input-file section of Alibaba's page was not "
                 "readable here; these are tide-dspy's assumption, to be checked against that section",
                 "the 24-hour window: Alibaba says results come back when the task completes or 'the maximum "
                 "waiting time' is reached, without the figure in the part read here"),
)
