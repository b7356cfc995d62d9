"""What a command needs to know to build its LMs (backbone and judge): the options that ask for it, what they hold
(`LMOptions`), and the one place that builds the LMs from them."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from tide_dspy.backbones.providers import DEFAULT_BACKBONE
from tide_dspy.schemas import JUDGE_RUBRICS
from tide_dspy.util.argtypes import count, non_negative_float, positive_float, positive_int

if TYPE_CHECKING:
    import dspy


def add_lm_options(parser: argparse.ArgumentParser, *, with_backbone: bool = True) -> None:
    """The options every command that calls an LM takes: the one place they are defined (LMOptions reads them)."""
    if with_backbone:
        parser.add_argument("--backbone", default=DEFAULT_BACKBONE,
                            help="backbone name (local, local-small, gpt-5-mini, ..., openai-compatible) or a raw DSPy "
                                 "model string")
    parser.add_argument(
        "--judge",
        default="proxy",
        help="judge backbone for identification/resolution, or 'proxy' for the lexical proxy judge, or 'none'",
    )
    parser.add_argument("--judge-rubric", choices=JUDGE_RUBRICS, default="probe",
                        help="how an LLM judge rates: probe (the paper's, PROBE's 1 / 0.5 / 0 on the essential and "
                             "secondary details, the action id checked in code) or likert (a 1-5 rating mapped to "
                             "(s-1)/4); default probe")
    parser.add_argument("--judge-runs", type=positive_int, default=1, metavar="N",
                        help="judge each matched pair N times, each a fresh sample at temperature 1.0, score the "
                             "mean and report the judge's spread (default 1: one plain call)")
    parser.add_argument("--api-base", default=None,
                        help="where the backbone's calls go: an openai-compatible server (vLLM, llama.cpp server; "
                             "default $TIDE_API_BASE), or a gateway for a hosted backbone (its key goes there too)")
    parser.add_argument("--judge-api-base", default=None,
                        help="where a hosted judge's calls go, when not to its provider (never --api-base)")
    parser.add_argument("--num-retries", type=count, default=None,
                        help="retries of a call that hit a rate limit, a timeout, a 5xx or a dropped connection, "
                             "waiting the provider's Retry-After or an exponential backoff (default 8: at least 91 s "
                             "in all, longer than a per-minute limit; $TIDE_NUM_RETRIES)")
    parser.add_argument("--timeout", type=positive_float, default=None,
                        help="seconds one request may take before it is retried (default: the client's, 600; "
                             "$TIDE_TIMEOUT)")
    if with_backbone:
        parser.add_argument("--no-check", action="store_true",
                            help="skip the one preflight call to a hosted backbone and judge before the run "
                                 "(tide check)")
    parser.add_argument("--temperature", type=non_negative_float, default=None,
                        help="sampling temperature (not sent to models that take only their default: gpt-5-mini, "
                             "Gemini 3)")
    parser.add_argument("--max-tokens", type=positive_int, default=None,
                        help="output tokens per call (default: the backbone's, 16k for the hosted ones)")
    parser.add_argument("--threads", type=positive_int, default=None, help="CPU threads for the embedded backbone")
    parser.add_argument("--server-schema", default=None, choices=("json_schema", "llama.cpp", "off"),
                        help="how an openai-compatible server takes the output schema: json_schema (vLLM, OpenAI; "
                             "default), llama.cpp (python -m llama_cpp.server), off (default: $TIDE_SERVER_SCHEMA)")


def add_proposer_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command whose optimizer proposes instructions with a model of its own (`tide compile`)."""
    parser.add_argument("--prompt-model", default=None, metavar="BACKBONE",
                        help="the model that proposes or reflects on instructions (MIPROv2's and COPRO's "
                             "prompt_model, GEPA's reflection_lm, SIMBA's prompt_model): any backbone name "
                             "(default: the backbone being compiled); its calls count toward --max-calls and "
                             "--max-cost and appear in lm_usage.json")
    parser.add_argument("--prompt-api-base", default=None, metavar="URL",
                        help="where --prompt-model's calls go, when not to its provider (never --api-base)")


@dataclass(frozen=True)
class LMOptions:
    """The LM options of a command line (`--backbone`, `--api-base`, `--num-retries`, ...); None leaves a setting
    to the environment or the backbone's default."""

    backbone: str = DEFAULT_BACKBONE
    api_base: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    threads: int | None = None
    server_schema: str | None = None
    num_retries: int | None = None
    timeout: float | None = None
    judge_api_base: str | None = None
    prompt_model: str | None = None
    prompt_api_base: str | None = None
    no_check: bool = False
    judge_rubric: str = "probe"
    judge_runs: int = 1

    @classmethod
    def from_namespace(cls, namespace) -> LMOptions:
        """The options an argparse namespace holds; missing ones keep their defaults."""
        given = {
            f.name: getattr(namespace, f.name) for f in fields(cls) if getattr(namespace, f.name, None) is not None
        }
        if getattr(namespace, "dry_run", False):
            given["no_check"] = True  # a dry run calls no model, the preflight call included
        return cls(**given)

    def retry_options(self) -> dict:
        """What every LM of the command shares, the judge's included: retries and the timeout."""
        return {k: v for k, v in (("num_retries", self.num_retries), ("timeout", self.timeout)) if v is not None}

    def judge_spec(self, judge: str) -> JudgeSpec:
        """The judge `judge` ("proxy", "none" or a backbone), built with these options' retries and timeout and its
        own address (`--judge-api-base`; never the backbone's --api-base)."""
        options = {**self.retry_options(), **({"api_base": self.judge_api_base} if self.judge_api_base else {})}
        return JudgeSpec(judge, options, check=not self.no_check, rubric=self.judge_rubric, runs=self.judge_runs)


class JudgeSpec(str):
    """A judge's name (what records, paths and labels show) carrying the LM options its LM is built with, the
    rubric it rates on and how many times it rates each pair: a str, so it goes wherever a judge name goes
    (metrics.make_judge reads the rest)."""

    lm_options: dict
    check: bool
    rubric: str
    runs: int

    def __new__(cls, name: str, lm_options: dict | None = None, check: bool = False, rubric: str = "probe",
                runs: int = 1) -> JudgeSpec:
        spec = super().__new__(cls, name)
        spec.lm_options, spec.check, spec.rubric, spec.runs = dict(lm_options or {}), check, rubric, runs
        return spec


def proposer_from_options(options: LMOptions) -> dspy.LM | None:
    """The proposer (`--prompt-model`, at `--prompt-api-base`), with the options' retries and timeout; None without
    --prompt-model (the optimizer then proposes with the backbone). A hosted one is checked with one cheap call
    first unless `options.no_check`."""
    if options.prompt_model is None:
        if options.prompt_api_base:
            raise ValueError("--prompt-api-base needs --prompt-model BACKBONE")
        return None
    from tide_dspy.backbones.registry import get_lm

    lm = get_lm(options.prompt_model, api_base=options.prompt_api_base, **options.retry_options())
    if not options.no_check:
        from tide_dspy.backbones.preflight import require_ready

        require_ready(lm, "--prompt-model")
    return lm


def lm_from_options(options: LMOptions, backbone: str | None = None) -> dspy.LM:
    """The LM a command runs on: `backbone` (default: `options.backbone`) built by `get_lm`; a hosted backbone is
    first checked with one cheap call (backbones.preflight) unless `options.no_check`.

    An LM the caller has configured (`dspy.configure(lm=...)` or `dspy.context(lm=...)`) is used instead. That is
    the seam through which tests, and programs that run a command in-process, supply their own LM."""
    import dspy

    from tide_dspy.backbones.registry import get_lm

    if dspy.settings.lm is not None:
        return dspy.settings.lm
    name = backbone or options.backbone
    lm = get_lm(name, api_base=options.api_base, temperature=options.temperature,
                max_tokens=options.max_tokens, num_threads=options.threads, **options.retry_options(),
                **({"server_schema": options.server_schema} if options.server_schema else {}))
    if not options.no_check:
        from tide_dspy.backbones.preflight import require_ready

        require_ready(lm, "--backbone")
    return lm
