"""Which instances a run reads: where a setting's data lives, and the filters that narrow a split to a selection."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from tide_dspy.data.loaders import load_instances
from tide_dspy.schemas import Instance
from tide_dspy.util.paths import DATA_ENV, data_root
from tide_dspy.util.tokens import estimate_tokens


def data_path(setting: str, data: str | Path | None = None) -> Path:
    """Where a setting's instances live: --data, else $TIDE_DATA/<setting>, else ../shared/data/<setting> beside
    the repository."""
    path = Path(data) if data is not None else data_root() / setting
    if not path.exists():
        raise FileNotFoundError(f"{path}: no {setting} data here; pass --data PATH or set {DATA_ENV}=<folder with "
                                f"workspace/ and repository/>")
    return path


def context_tokens(instance: Instance) -> int:
    """The estimated tokens of the instance's context as its setting renders it."""
    from tide_dspy.domains import get_setting

    return estimate_tokens(get_setting(instance.setting).render_context(instance))


def select_instances(instances: list[Instance], *, max_context_tokens: int | None = None,
                     limit: int | None = None) -> list[Instance]:
    """Instances whose rendered context fits `max_context_tokens` (estimated), smallest first, then the first
    `limit`."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if max_context_tokens is not None:
        sized = sorted(((context_tokens(i), n, i) for n, i in enumerate(instances)), key=lambda x: (x[0], x[1]))
        instances = [i for tokens, _, i in sized if tokens <= max_context_tokens]
    return instances[:limit] if limit is not None else instances


class Selection(BaseModel):
    """Which instances a step runs on: a setting's split, optionally narrowed by ids, context size and count."""

    setting: str | None  # None only until a saved program names it (evaluate --program)
    split: str
    data: str | None = None  # the setting's JSONL file or folder (default: $TIDE_DATA/<setting>)
    ids: list[str] | None = None
    max_context_tokens: int | None = None
    limit: int | None = None
    skip_invalid: bool = False  # leave out (and list) records that are not valid instances

    def load(self) -> list[Instance]:
        path = data_path(self.setting, self.data)
        instances = load_instances(path, setting=self.setting, split=self.split, skip_invalid=self.skip_invalid)
        if self.ids:
            known = {i.instance_id for i in instances}
            missing = [i for i in self.ids if i not in known]
            if missing:
                raise ValueError(f"--ids: {missing} not in the {self.split} split of {path}")
            instances = [i for i in instances if i.instance_id in self.ids]
        instances = select_instances(instances, max_context_tokens=self.max_context_tokens, limit=self.limit)
        if not instances:
            raise ValueError(f"{path}: no {self.setting} instances in split {self.split!r} after the filters")
        return instances
