"""Shared fixtures. Every test starts from DSPy's default settings with an empty in-memory cache."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import dspy
import pytest
from dspy.dsp.utils.settings import DEFAULT_CONFIG

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# Fixture repositories under fixtures/ carry their own test suites; they run only inside those repositories.
collect_ignore_glob = ["fixtures/*"]

# The offline tests read the copy under fixtures/data (see its README); only the data-loader tests read the full data
# set, from $TIDE_DATA (default ../shared/data), and skip with a reason without it.
FIXTURE_DATA = Path(__file__).resolve().parent / "fixtures" / "data"
WORKSPACE_JSONL = FIXTURE_DATA / "workspace" / "workspaces.jsonl"
REPOSITORY_JSONL = FIXTURE_DATA / "repository" / "swebench_multibug.jsonl"


def full_data(setting: str) -> Path:
    """The full benchmark data of a setting ($TIDE_DATA/<setting>); the test is skipped with a reason without it."""
    from tide_dspy.util.paths import DATA_ENV, data_root

    path = data_root() / setting
    if not path.exists():
        pytest.skip(f"the full benchmark data is not at {path}; set {DATA_ENV} to the folder holding "
                    "workspace/ and repository/ to run this data test")
    return path


@pytest.fixture(autouse=True)
def clear_settings_and_cache():
    """Every test starts without DSPy's response cache and ends with DSPy's default settings, reset through the
    public API as DSPy's own tests/conftest.py does."""
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    yield
    dspy.configure(**copy.deepcopy(DEFAULT_CONFIG))


def _first_record(path: Path, predicate=lambda r: True) -> dict:
    with path.open() as f:
        for line in f:
            record = json.loads(line)
            if predicate(record):
                return record
    raise LookupError(f"no matching record in {path}")


@pytest.fixture(scope="session")
def workspace_instance():
    from tide_dspy.data.records import instance_from_record

    return instance_from_record(_first_record(WORKSPACE_JSONL))


@pytest.fixture(scope="session")
def repository_instance():
    """The smallest-candidate-pool repository instance of the test data (cheap to render)."""
    from tide_dspy.data.records import instance_from_record

    best = None
    with REPOSITORY_JSONL.open() as f:
        for line in f:
            # num_candidates sits near the start of each line; avoid parsing 25 MB of code for the min.
            head = json.loads(line[: line.index('"candidates"') - 2] + "}")
            if best is None or head["num_candidates"] < best[0]:
                best = (head["num_candidates"], line)
    return instance_from_record(json.loads(best[1]))


@pytest.fixture(scope="session")
def repository_fixture_instance():
    """The tiny repository instance under tests/fixtures/instances (no shared data needed)."""
    from tide_dspy.data import load_instances

    return load_instances(Path(__file__).parent / "fixtures" / "instances" / "repository.jsonl",
                          setting="repository")[0]
