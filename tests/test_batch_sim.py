"""The provider simulator's batch APIs (testing/batch_sim.py): each provider's wire format, status transitions,
result files, expiry, per-line errors and the documented limits. Simulated time is moved on explicitly
(`advance`), so nothing here waits or depends on timing."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest

from tide_dspy.backbones.batch_rules import ANTHROPIC_BATCH
from tide_dspy.testing.provider_sim import Fault, ProviderSimulator

HOUR = 3600.0


def http(method: str, url: str, headers: dict, body: bytes | None = None) -> tuple[int, bytes, dict]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


def chat_line(custom_id: str, model: str = "gpt-5-mini", **extra) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"say {custom_id}"}],
                     "max_completion_tokens": 100, **extra}}


class OpenAIBatches:
    """The OpenAI batch flow over plain HTTP: upload, create, poll, download."""

    def __init__(self, sim: ProviderSimulator, provider: str = "openai"):
        self.sim, self.base = sim, sim.base_url(provider)
        self.auth = {"Authorization": f"Bearer {sim.keys[provider]}"}

    def upload(self, lines: list[dict]) -> str:
        boundary = uuid.uuid4().hex
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
                "Content-Type: application/jsonl\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        status, raw, _ = http("POST", f"{self.base}/files", {**self.auth, "Content-Type":
                                                             f"multipart/form-data; boundary={boundary}"}, body)
        assert status == 200, raw
        return json.loads(raw)["id"]

    def create(self, lines: list[dict], **extra) -> dict:
        body = {"input_file_id": self.upload(lines), "endpoint": "/v1/chat/completions", "completion_window": "24h",
                **extra}
        status, raw, _ = http("POST", f"{self.base}/batches", {**self.auth, "Content-Type": "application/json"},
                              json.dumps(body).encode())
        assert status == 200, raw
        return json.loads(raw)

    def get(self, batch_id: str) -> dict:
        return json.loads(http("GET", f"{self.base}/batches/{batch_id}", self.auth)[1])

    def rows(self, file_id: str) -> list[dict]:
        status, raw, _ = http("GET", f"{self.base}/files/{file_id}/content", self.auth)
        assert status == 200, raw
        return [json.loads(r) for r in raw.decode().splitlines() if r.strip()]


@pytest.fixture
def sim():
    with ProviderSimulator() as s:
        yield s


def test_an_openai_batch_moves_from_validating_through_in_progress_to_completed(sim):
    api = OpenAIBatches(sim)
    batch = api.create([chat_line("a"), chat_line("b")])
    assert batch["id"].startswith("batch_") and batch["status"] == "validating"
    sim.batches.advance(60)
    assert api.get(batch["id"])["status"] == "in_progress"
    sim.batches.advance(sim.batches.plan.seconds)
    done = api.get(batch["id"])
    assert done["status"] == "completed" and done["request_counts"] == {"total": 2, "completed": 2, "failed": 0}
    rows = api.rows(done["output_file_id"])
    assert [r["custom_id"] for r in rows] == ["a", "b"]
    assert rows[0]["response"]["status_code"] == 200 and rows[0]["response"]["body"]["object"] == "chat.completion"


def test_each_line_is_logged_with_its_batch(sim):
    batch = OpenAIBatches(sim).create([chat_line("a"), chat_line("b")])
    lines = [r for r in sim.log if r.batch == batch["id"]]
    assert len(lines) == 2 and {r.model for r in lines} == {"gpt-5-mini"}
    assert [j.id for j in sim.batches.received("openai")] == [batch["id"]]


def test_an_openai_input_file_with_two_models_fails_validation(sim):
    api = OpenAIBatches(sim)
    batch = api.create([chat_line("a"), chat_line("b", model="gpt-4o-mini")])
    sim.batches.advance(60)
    failed = api.get(batch["id"])
    assert failed["status"] == "failed" and failed["errors"]["data"][0]["code"] == "mismatched_model"


def test_a_repeated_custom_id_fails_validation(sim):
    api = OpenAIBatches(sim)
    batch = api.create([chat_line("a"), chat_line("a")])
    sim.batches.advance(60)
    assert api.get(batch["id"])["errors"]["data"][0]["line"] == 2


def test_a_completion_window_other_than_24h_is_refused(sim):
    api = OpenAIBatches(sim)
    body = {"input_file_id": api.upload([chat_line("a")]), "endpoint": "/v1/chat/completions",
            "completion_window": "48h"}
    status, raw, _ = http("POST", f"{api.base}/batches", {**api.auth, "Content-Type": "application/json"},
                          json.dumps(body).encode())
    assert status == 400 and "completion_window" in raw.decode()


def test_a_partly_failed_batch_puts_its_failed_lines_in_the_error_file(sim):
    sim.batches.plan.line_faults.append(Fault(500, count=1))
    api = OpenAIBatches(sim)
    batch = api.create([chat_line("a"), chat_line("b"), chat_line("c")])
    sim.batches.advance(sim.batches.plan.seconds + 60)
    done = api.get(batch["id"])
    assert done["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    errors = api.rows(done["error_file_id"])
    assert [(r["custom_id"], r["response"]["status_code"]) for r in errors] == [("a", 500)]
    assert [r["custom_id"] for r in api.rows(done["output_file_id"])] == ["b", "c"]


def test_a_line_that_breaks_a_documented_rule_gets_the_online_error(sim):
    api = OpenAIBatches(sim)
    batch = api.create([chat_line("a", temperature=0.7)])
    sim.batches.advance(sim.batches.plan.seconds + 60)
    error = api.rows(api.get(batch["id"])["error_file_id"])[0]["response"]
    assert error["status_code"] == 400 and error["body"]["error"]["code"] == "unsupported_value"


def test_a_batch_that_outlasts_its_window_expires_with_its_unfinished_lines(sim):
    sim.batches.plan.seconds = 30 * HOUR
    api = OpenAIBatches(sim)
    batch = api.create([chat_line("a"), chat_line("b")])
    sim.batches.advance(25 * HOUR)
    done = api.get(batch["id"])
    assert done["status"] == "expired"
    assert [r["custom_id"] for r in api.rows(done["output_file_id"])] == ["a"]
    assert [r["error"]["code"] for r in api.rows(done["error_file_id"])] == ["batch_expired"]


def test_a_cancelled_batch_returns_what_was_done_before_the_cancel(sim):
    api = OpenAIBatches(sim)
    batch = api.create([chat_line("a"), chat_line("b"), chat_line("c"), chat_line("d")])
    sim.batches.advance(sim.batches.plan.validating + 0.6 * (sim.batches.plan.seconds - sim.batches.plan.validating))
    status, raw, _ = http("POST", f"{api.base}/batches/{batch['id']}/cancel", api.auth)
    assert status == 200 and json.loads(raw)["status"] == "cancelling"
    sim.batches.advance(sim.batches.plan.seconds)
    done = api.get(batch["id"])
    assert done["status"] == "cancelled"
    assert [r["custom_id"] for r in api.rows(done["output_file_id"])] == ["a", "b"]
    assert {r["error"]["code"] for r in api.rows(done["error_file_id"])} == {"batch_cancelled"}


def test_the_batch_endpoints_take_the_provider_key(sim):
    status, raw, _ = http("GET", f"{sim.base_url('openai')}/batches/batch_x", {"Authorization": "Bearer wrong"})
    assert status == 401


def test_dashscope_batches_report_no_cached_tokens(sim):
    api = OpenAIBatches(sim, "dashscope")
    long = "context " * 3000
    lines = [{"custom_id": c, "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "qwen3.6-flash", "messages": [{"role": "user", "content": long + c}]}}
             for c in ("a", "b")]
    batch = api.create(lines)
    sim.batches.advance(sim.batches.plan.seconds + 60)
    rows = api.rows(api.get(batch["id"])["output_file_id"])
    assert [r["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"] for r in rows] == [0, 0]


ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "content-type": "application/json"}


def anthropic_create(sim, requests: list[dict]) -> tuple[int, dict]:
    status, raw, _ = http("POST", f"{sim.root}/anthropic/v1/messages/batches",
                          {**ANTHROPIC_HEADERS, "x-api-key": sim.keys["anthropic"]},
                          json.dumps({"requests": requests}).encode())
    return status, json.loads(raw)


def claude_request(custom_id: str) -> dict:
    return {"custom_id": custom_id, "params": {"model": "claude-sonnet-4-5", "max_tokens": 100,
                                               "messages": [{"role": "user", "content": f"say {custom_id}"}]}}


def anthropic_get(sim, path: str) -> tuple[int, bytes]:
    status, raw, _ = http("GET", f"{sim.root}/anthropic/v1/messages/batches/{path}",
                          {**ANTHROPIC_HEADERS, "x-api-key": sim.keys["anthropic"]})
    return status, raw


def test_an_anthropic_batch_ends_with_a_results_url(sim):
    status, batch = anthropic_create(sim, [claude_request("a"), claude_request("b")])
    assert status == 200 and batch["id"].startswith("msgbatch_") and batch["processing_status"] == "in_progress"
    assert batch["request_counts"]["processing"] == 2 and batch["results_url"] is None
    sim.batches.advance(sim.batches.plan.seconds + 1)
    ended = json.loads(anthropic_get(sim, batch["id"])[1])
    assert ended["processing_status"] == "ended" and ended["request_counts"]["succeeded"] == 2
    status, raw = anthropic_get(sim, f"{batch['id']}/results")
    results = [json.loads(r) for r in raw.decode().splitlines()]
    assert [(r["custom_id"], r["result"]["type"]) for r in results] == [("a", "succeeded"), ("b", "succeeded")]
    assert ended["results_url"].endswith(f"/v1/messages/batches/{batch['id']}/results")


def test_anthropic_results_are_not_served_before_the_batch_ends(sim):
    _, batch = anthropic_create(sim, [claude_request("a")])
    assert anthropic_get(sim, f"{batch['id']}/results")[0] == 400


def test_anthropic_results_are_archived_after_29_days(sim):
    _, batch = anthropic_create(sim, [claude_request("a")])
    sim.batches.advance((ANTHROPIC_BATCH.results_days + 1) * 24 * HOUR)
    assert anthropic_get(sim, f"{batch['id']}/results")[0] == 404
    assert json.loads(anthropic_get(sim, batch["id"])[1])["archived_at"] is not None


@pytest.mark.parametrize("custom_id", ["has space", "x" * 65, ""])
def test_an_anthropic_custom_id_outside_the_documented_pattern_is_refused(sim, custom_id):
    status, body = anthropic_create(sim, [claude_request(custom_id)])
    assert status == 400 and "custom_id" in body["error"]["message"]


def test_an_errored_anthropic_line_carries_the_messages_api_error(sim):
    sim.batches.plan.line_faults.append(Fault(529, count=1))
    _, batch = anthropic_create(sim, [claude_request("a"), claude_request("b")])
    sim.batches.advance(sim.batches.plan.seconds + 1)
    results = [json.loads(r) for r in anthropic_get(sim, f"{batch['id']}/results")[1].decode().splitlines()]
    assert results[0]["result"]["type"] == "errored"
    assert results[0]["result"]["error"]["error"]["type"] == "overloaded_error"
    assert results[1]["result"]["type"] == "succeeded"


def test_an_expired_anthropic_line_is_reported_expired(sim):
    sim.batches.plan.seconds = 30 * HOUR
    _, batch = anthropic_create(sim, [claude_request("a"), claude_request("b")])
    sim.batches.advance(25 * HOUR)
    batch = json.loads(anthropic_get(sim, batch["id"])[1])
    assert batch["processing_status"] == "ended" and batch["request_counts"]["expired"] == 1


def gemini_upload(sim, data: bytes) -> str:
    key = {"x-goog-api-key": sim.keys["gemini"]}
    status, _, headers = http("POST", f"{sim.root}/gemini/upload/v1beta/files",
                              {**key, "X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": "start",
                               "Content-Type": "application/json"},
                              json.dumps({"file": {"display_name": "in"}}).encode())
    assert status == 200
    url = {k.lower(): v for k, v in headers.items()}["x-goog-upload-url"]
    status, raw, _ = http("POST", url, {"X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "0"},
                          data)
    assert status == 200, raw
    return json.loads(raw)["file"]["name"]


def gemini_request(text: str) -> dict:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], "generationConfig": {"maxOutputTokens": 100}}


def test_a_gemini_file_batch_succeeds_with_a_responses_file(sim):
    key = {"x-goog-api-key": sim.keys["gemini"], "Content-Type": "application/json"}
    data = "".join(json.dumps({"key": k, "request": gemini_request(k)}) + "\n" for k in ("a", "b")).encode()
    name = gemini_upload(sim, data)
    status, raw, _ = http("POST", f"{sim.root}/gemini/v1beta/models/gemini-3.5-flash:batchGenerateContent", key,
                          json.dumps({"batch": {"display_name": "t", "input_config": {"file_name": name}}}).encode())
    op = json.loads(raw)
    assert status == 200 and op["name"].startswith("batches/") and op["metadata"]["state"] == "BATCH_STATE_PENDING"
    sim.batches.advance(60)
    assert json.loads(http("GET", f"{sim.root}/gemini/v1beta/{op['name']}", key)[1])["metadata"]["state"] == \
        "BATCH_STATE_RUNNING"
    sim.batches.advance(sim.batches.plan.seconds)
    done = json.loads(http("GET", f"{sim.root}/gemini/v1beta/{op['name']}", key)[1])
    assert done["done"] and done["metadata"]["state"] == "BATCH_STATE_SUCCEEDED"
    file_id = done["response"]["responsesFile"].removeprefix("files/")
    rows = [json.loads(r) for r in http("GET", f"{sim.root}/gemini/download/v1beta/files/{file_id}:download?alt=media",
                                        key)[1].decode().splitlines()]
    assert [r["key"] for r in rows] == ["a", "b"] and "candidates" in rows[0]["response"]


def test_a_gemini_inline_batch_answers_inline(sim):
    key = {"x-goog-api-key": sim.keys["gemini"], "Content-Type": "application/json"}
    inline = {"requests": [{"request": gemini_request("a"), "metadata": {"key": "a"}}]}
    _, raw, _ = http("POST", f"{sim.root}/gemini/v1beta/models/gemini-3.5-flash:batchGenerateContent", key,
                     json.dumps({"batch": {"displayName": "t", "inputConfig": {"requests": inline}}}).encode())
    sim.batches.advance(sim.batches.plan.seconds + 1)
    done = json.loads(http("GET", f"{sim.root}/gemini/v1beta/{json.loads(raw)['name']}", key)[1])
    answers = done["response"]["inlinedResponses"]["inlinedResponses"]
    assert answers[0]["metadata"]["key"] == "a" and "candidates" in answers[0]["response"]
