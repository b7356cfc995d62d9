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

# The offline tests read the small hand-written instances under fixtures/instances (laid out like a data folder:
# workspace/ and repository/, so it can stand in for $TIDE_DATA); see its README. The tests of the benchmark sets
# read the sets shipped in the repository's data/ (SHIPPED_DATA), whatever $TIDE_DATA says.
FIXTURE_DATA = Path(__file__).resolve().parent / "fixtures" / "instances"
WORKSPACE_JSONL = FIXTURE_DATA / "workspace" / "workspaces.jsonl"
REPOSITORY_JSONL = FIXTURE_DATA / "repository" / "instances.jsonl"
SHIPPED_DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(autouse=True)
def clear_settings_and_cache():
    """Every test starts without DSPy's response cache and ends with DSPy's default settings, reset through the
    public API as DSPy's own tests/conftest.py does."""
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    yield
    dspy.configure(**copy.deepcopy(DEFAULT_CONFIG))


@pytest.fixture(autouse=True)
def mlflow_uris_restored():
    """mlflow.set_tracking_uri and set_registry_uri write MLFLOW_TRACKING_URI and MLFLOW_REGISTRY_URI into the
    environment (a command's --tracking-uri does too). Each test's are undone after it, so a later test's
    registry follows its own tracking store rather than the last one configured."""
    before = {name: os.environ.get(name) for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _first_record(path: Path, predicate=lambda r: True) -> dict:
    with path.open() as f:
        for line in f:
            record = json.loads(line)
            if predicate(record):
                return record
    raise LookupError(f"no matching record in {path}")


@pytest.fixture(scope="session")
def workspace_instance():
    """The first train-split workspace instance of the fixtures (12 artifacts, 5 problems)."""
    from tide_dspy.data.records import instance_from_record

    return instance_from_record(_first_record(WORKSPACE_JSONL, lambda r: r["split"] == "train"))


@pytest.fixture(scope="session")
def repository_instance():
    """The train-split repository instance of the fixtures (8 functions, 2 problems with patches)."""
    from tide_dspy.data.records import instance_from_record

    return instance_from_record(_first_record(REPOSITORY_JSONL, lambda r: r["split"] == "train"))


@pytest.fixture(scope="session")
def repository_fixture_instance():
    """The first, test-split repository instance of the fixtures (6 functions, 2 problems)."""
    from tide_dspy.data.records import instance_from_record

    return instance_from_record(_first_record(REPOSITORY_JSONL))


@pytest.fixture
def repo(tmp_path) -> Path:
    """A committed git checkout with one planted bug (tests/sample_checkout.py)."""
    from sample_checkout import make_repo

    return make_repo(tmp_path / "repo")
