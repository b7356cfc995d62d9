"""The TIDE_* environment variables, read in one place: `settings()` gives their values now, typed and checked by
pydantic-settings, or an error that names the variable. An empty variable counts as unset; a flag on the command
line wins over its variable. README.md's configuration table lists each of them (scripts/check_docs.py reads the
names from here)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import PositiveFloat, PositiveInt, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

PREFIX = "TIDE_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, env_ignore_empty=True, extra="ignore")

    data: Path | None = None  # a folder holding one benchmark set folder per setting
    optimizers: Path | None = None  # extra optimizer configs, searched after the shipped ones
    temperature: float | None = None
    max_tokens: int | None = None
    num_retries: int | None = None
    timeout: float | None = None
    n_ctx: PositiveInt | None = None  # the embedded engine's
    num_threads: PositiveInt | None = None
    constrained: bool = True
    fast_grammar: bool = True
    require_items: bool = False
    prompt_cache: str = ""  # the embedded engine's disk cache: off, on, or its folder
    prompt_cache_max_mb: PositiveFloat = 4096
    cache_dir: Path | None = None  # the embedded GGUF files, and the prompt cache's parent
    api_base: str | None = None  # an openai-compatible server's
    api_key: SecretStr | None = None
    served_model: str | None = None
    server_schema: str | None = None
    server_timeout: PositiveFloat = 600.0


def settings() -> Settings:
    """The TIDE_* variables as they are now; a value that does not parse is an error naming its variable."""
    try:
        return Settings()
    except ValidationError as exc:
        error = exc.errors()[0]
        name = PREFIX + str(error["loc"][0]).upper()
        raise ValueError(f"environment variable {name}={os.environ.get(name)!r} is not valid: {error['msg']}") \
            from None


def variables() -> list[str]:
    """The names of the TIDE_* variables."""
    return [PREFIX + field.upper() for field in Settings.model_fields]
