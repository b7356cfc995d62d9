"""Which instances a run reads: where a setting's data lives, and the filters that narrow a split to a selection."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tide_dspy.data.loaders import load_instances
from tide_dspy.data.sets import SetInfo, load_located, locate
from tide_dspy.domains import Setting, get_setting
from tide_dspy.schemas import Instance
from tide_dspy.util.tokens import estimate_tokens


def data_path(setting: str, data: str | Path | None = None, version: str | None = None) -> Path:
    """What a run of `setting` reads: --data, else $TIDE_DATA/<setting>, else the set shipped with tide-dspy; of a
    versioned set, the folder of `version` (default: its highest). See tide_dspy.data.sets.locate."""
    return locate(setting, data, version).path


def context_tokens(instance: Instance) -> int:
    """The estimated tokens of the instance's context as its setting renders it (the instance names its setting)."""
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

    model_config = ConfigDict(arbitrary_types_allowed=True)

    setting: Setting | None  # None only until a saved program names it (evaluate --program)
    split: str
    data: str | None = None  # --data: a set's folder, one version's, or a JSONL file or folder of your own
    data_version: str | None = None  # --data-version: of a versioned set (default: its highest)
    ids: list[str] | None = None
    max_context_tokens: int | None = None
    limit: int | None = None
    skip_invalid: bool = False  # leave out (and list) records that are not valid instances

    def source(self) -> SetInfo:
        """The set this selection reads: its name, version and checksum (what a result records) and its files."""
        return locate(self.setting.name, self.data, self.data_version)

    def load(self) -> list[Instance]:
        """The selected instances. A versioned set loads through its Features (tide_dspy.data.sets); files of your
        own, or any set read with skip_invalid, load line by line (tide_dspy.data.loaders)."""
        info = self.source()
        path = info.path
        if info.version is not None and not self.skip_invalid:
            instances = load_located(info, self.setting.name, self.split).instances
        else:
            instances = load_instances(path, setting=self.setting.name, split=self.split,
                                       skip_invalid=self.skip_invalid)
        if self.ids:
            known = {i.instance_id for i in instances}
            missing = [i for i in self.ids if i not in known]
            if missing:
                raise ValueError(f"--ids: {missing} not in the {self.split} split of {path}")
            instances = [i for i in instances if i.instance_id in self.ids]
        instances = select_instances(instances, max_context_tokens=self.max_context_tokens, limit=self.limit)
        if not instances:
            raise ValueError(f"{path}: no {self.setting.name} instances in split {self.split!r} after the filters")
        return instances
