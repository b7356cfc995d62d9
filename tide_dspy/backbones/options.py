"""What a command needs to know to build its LMs (backbone, judge, proposer): what the LM options hold
(`LMOptions`; cli/options.py asks for them), and the one place that builds the LMs from them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from tide_dspy.backbones.providers import DEFAULT_BACKBONE

if TYPE_CHECKING:
    import dspy


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
        """The options a parsed command line holds; missing ones keep their defaults."""
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
