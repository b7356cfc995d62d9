"""What a command needs to know to build its LM, and the one place that builds it."""

from __future__ import annotations

from dataclasses import dataclass, fields

import dspy

from tide_dspy.backbones.registry import DEFAULT_BACKBONE, get_lm


@dataclass(frozen=True)
class LMOptions:
    """The LM options of a command line (`--backbone`, `--api-base`, ...); None leaves a setting to the environment
    or the backbone's default."""

    backbone: str = DEFAULT_BACKBONE
    api_base: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    threads: int | None = None
    server_schema: str | None = None

    @classmethod
    def from_namespace(cls, namespace) -> LMOptions:
        """The options an argparse namespace holds; missing ones keep their defaults."""
        given = {f.name: getattr(namespace, f.name) for f in fields(cls) if getattr(namespace, f.name, None) is not None}
        return cls(**given)


def lm_from_options(options: LMOptions, backbone: str | None = None) -> dspy.LM:
    """The LM a command runs on: `backbone` (default: `options.backbone`) built by `get_lm`.

    An LM the caller has configured (`dspy.configure(lm=...)` or `dspy.context(lm=...)`) is used instead. That is
    the seam through which tests, and programs that run a command in-process, supply their own LM."""
    if dspy.settings.lm is not None:
        return dspy.settings.lm
    return get_lm(backbone or options.backbone, api_base=options.api_base, temperature=options.temperature,
                  max_tokens=options.max_tokens, num_threads=options.threads,
                  **({"server_schema": options.server_schema} if options.server_schema else {}))
