"""Compile and tune with DummyLM, optimizer configs, and the distill -> compile -> tune -> evaluate CLI path with
MLflow (a temporary sqlite store) and a registered program loaded back in a fresh process."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import dspy
import pytest
from dspy.dsp.utils.settings import DEFAULT_CONFIG
from routed_lm import FIXTURE_DATA, RoutedLM, fixture_instances

from tide_dspy.domains import WORKSPACE
from tide_dspy.methods import DEMOS
from tide_dspy.optimize import (
    available_optimizers,
    compile_program,
    load_optimizer_config,
    optimizer_arguments,
    parse_options,
    split_train,
    tune,
)
from tide_dspy.programs import build_program
from tide_dspy.schemas import Template
from tide_dspy.shipped import OPTIMIZERS_DIR
from tide_dspy.templates import TemplateLibrary, solved_demos

TEMPLATES = [
    Template(id=f"ws-t0{i}", name=f"pattern {i}", pattern=f"shape {i}", evidence_flow=["x"]) for i in range(1, 5)
]


@pytest.fixture(scope="module")
def train():
    return fixture_instances("workspace", "train")


def test_split_train_is_seeded_disjoint_and_refuses_test(train, workspace_instance):
    many = [train[0].model_copy(update={"instance_id": f"i{n}"}) for n in range(8)]
    a_train, a_val = split_train(many, 0.25, seed=0)
    b_train, b_val = split_train(many, 0.25, seed=0)
    assert [i.instance_id for i in a_val] == [i.instance_id for i in b_val] and len(a_val) == 3  # at least 3
    assert not {i.instance_id for i in a_train} & {i.instance_id for i in a_val}
    assert len(a_train) + len(a_val) == 8
    assert [len(p) for p in split_train(train)] == [1, 1]
    test = workspace_instance.model_copy(update={"split": "test"})
    with pytest.raises(ValueError, match="test split"):
        split_train([train[0], test])
    with pytest.raises(ValueError, match="at least 2"):
        split_train(train[:1])


def test_every_optimizer_config_loads_and_names_a_real_class():
    from tide_dspy.optimize import optimizer_class

    assert set(available_optimizers()) >= {"miprov2", "copro", "gepa", "simba", "bootstrap"}
    for name in available_optimizers():
        config = load_optimizer_config(name)
        assert callable(optimizer_class(config["optimizer"], config["path"]))
        init, _ = optimizer_arguments(config, demos=None, options=None, n_train=10)
        if name != "bootstrap":  # instruction-only by default; bootstrap is the demo optimizer
            assert all(v == 0 for k, v in init.items() if "demos" in k), name
    with pytest.raises(ValueError, match="available"):
        load_optimizer_config("nonesuch")


HOSTILE = Path(__file__).parent / "fixtures" / "hostile"


def test_an_optimizers_folder_in_the_working_directory_is_never_read(tmp_path, monkeypatch):
    shutil.copytree(HOSTILE / "optimizers", tmp_path / "optimizers")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIDE_OPTIMIZERS", raising=False)
    config = load_optimizer_config("copro")
    assert config["optimizer"] == "dspy.teleprompt.COPRO"
    assert Path(config["path"]).parent == OPTIMIZERS_DIR
    assert not (tmp_path / "PWNED").exists()


def test_tide_optimizers_adds_configs_but_never_replaces_a_shipped_one(monkeypatch):
    monkeypatch.setenv("TIDE_OPTIMIZERS", str(HOSTILE / "extra_optimizers"))
    assert load_optimizer_config("mine")["init"] == {"breadth": 2}
    assert load_optimizer_config("copro")["optimizer"] == "dspy.teleprompt.COPRO"


@pytest.mark.parametrize("how", ["path", "env"])
def test_a_config_naming_any_other_callable_is_refused(tmp_path, monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDE_OPTIMIZERS", str(HOSTILE / "extra_optimizers"))
    target = str(HOSTILE / "extra_optimizers" / "evil.yaml") if how == "path" else "evil"
    with pytest.raises(ValueError, match=r"evil.yaml: optimizer 'subprocess.getoutput' is not a DSPy optimizer"):
        load_optimizer_config(target)
    assert not (tmp_path / "PWNED").exists()


def test_compile_refuses_a_hostile_optimizer_before_it_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="not a DSPy optimizer"):
        compile_program(build_program("iter", "workspace"), [], [], str(HOSTILE / "optimizers" / "copro.yaml"),
                        lm=dspy.utils.DummyLM([]))
    assert not (tmp_path / "PWNED").exists()


def test_demos_overrides_and_fit_to_trainset():
    assert parse_options(["init.breadth=2", "compile.num_trials=3", "auto=null"]) == {
        "init": {"breadth": 2, "auto": None}, "compile": {"num_trials": 3}}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_options(["breadth"])
    mipro = load_optimizer_config("miprov2")
    init, comp = optimizer_arguments(mipro, demos=2, options=parse_options(["compile.num_trials=3"]), n_train=5)
    assert init["max_bootstrapped_demos"] == 2 and comp["num_trials"] == 3
    init, _ = optimizer_arguments(load_optimizer_config("simba"), demos=None, options=None, n_train=2)
    assert init["bsize"] == 2
    with pytest.raises(ValueError, match="instructions only"):
        optimizer_arguments(load_optimizer_config("copro"), demos=1, options=None, n_train=5)


TINY_BUDGETS = {
    "copro": ["init.breadth=2", "init.depth=1"],
    "gepa": ["init.max_metric_calls=6"],
    "miprov2": ["init.auto=null", "init.num_candidates=2", "compile.num_trials=2"],
    "simba": ["init.max_steps=1", "init.num_candidates=2"],
}


@pytest.mark.parametrize("optimizer", sorted(TINY_BUDGETS))
def test_instruction_optimizers_compile_without_demos(optimizer, train):
    """The gated LM answers well only under the instruction it proposes, so installing it raises the metric."""
    from tide_dspy.evaluation import evaluate

    program = build_program("tide", "workspace", templates=TEMPLATES, max_rounds=1, per_round=3)
    lm = RoutedLM(train, instruction="Read every artifact twice.", gated=True)
    part_train, part_val = split_train(train)
    compiled = compile_program(program, part_train, part_val, optimizer, "retrieval-f1", judge="proxy", lm=lm,
                               options=parse_options(TINY_BUDGETS[optimizer]))
    assert compiled is not program and compiled.config() == program.config()
    assert compiled.discover.demos == []
    before = evaluate(program, part_val, lm=lm, progress=False).f1["retrieval"]
    after = evaluate(compiled, part_val, lm=lm, progress=False).f1["retrieval"]
    assert before == 0
    if optimizer == "simba":  # it proposes rules only from varied trajectories; a deterministic LM gives none
        assert after == 0
    else:
        assert compiled.discover.signature.instructions == "Read every artifact twice."
        assert after > 0


def test_bootstrap_adds_demos_when_asked(train):
    program = build_program("iter", "workspace", max_rounds=1, per_round=2)
    compiled = compile_program(program, *split_train(train), "bootstrap", "retrieval-f1", lm=RoutedLM(train), demos=1)
    assert len(compiled.discover.demos) == 1


def test_compile_builds_iter_demos_from_its_own_train_part(train):
    from tide_dspy.workflows import ProgramShape, build_method

    program = build_method(WORKSPACE, "iter-demos", ProgramShape(rounds=2, per_round=1), train_instances=train[:1])
    # The demos come from the instances compile trains on, never from its validation part.
    assert program.demos == solved_demos(train[:1], WORKSPACE, DEMOS) != solved_demos(train[1:], WORKSPACE, DEMOS)


def test_tune_is_a_resumable_sqlite_study(tmp_path, train):
    library = TemplateLibrary(TEMPLATES, "workspace")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    seen = []
    study = tune(WORKSPACE, library, train[:1], lm=RoutedLM(train), n_trials=2, storage=storage,
                 study_name="t", on_trial=lambda trial, value, result: seen.append((trial.params, value)))
    assert len(study.trials) == 2 and len(seen) == 2
    assert set(study.best_params) == {"max_rounds", "per_round", "pool_size", "temperature"}
    assert 1 <= study.best_params["pool_size"] <= 4
    assert study.best_value == max(v for _, v in seen)
    again = tune(WORKSPACE, library, train[:1], lm=RoutedLM(train), n_trials=1, storage=storage, study_name="t")
    assert len(again.trials) == 3
    with pytest.raises(ValueError, match="test split"):
        tune(WORKSPACE, library, [train[0].model_copy(update={"split": "test"})], lm=RoutedLM(train),
             n_trials=1, storage=storage)


def test_tune_keeps_the_base_programs_scan_so_scan_recall_can_score_trials(tmp_path, train):
    from tide_dspy.discovery import TIDE

    library = TemplateLibrary(TEMPLATES, "workspace")
    base = TIDE("workspace", templates=TEMPLATES, scan=True, focus_size=2)
    seen = []
    tune(WORKSPACE, library, train[:1], lm=RoutedLM(train), n_trials=1, storage=f"sqlite:///{tmp_path / 'o.db'}",
         metric="scan-recall", base=base, on_trial=lambda trial, value, result: seen.append((value, result)))
    (value, result), = seen
    assert result.scan_recall is not None and value == result.scan_recall


LOAD_REGISTERED = textwrap.dedent("""
    import json, sys
    import dspy
    import tide_dspy
    sys.path.insert(0, sys.argv[2])
    from routed_lm import RoutedLM, fixture_instances
    program = tide_dspy.load_program(sys.argv[1])
    instances = fixture_instances("workspace", "train")
    with dspy.context(lm=RoutedLM(instances)):
        out = program(instances[0])
    print(json.dumps({"kind": type(program).__name__, "findings": len(out.findings),
                      "instruction": program.discover.signature.instructions,
                      "backbone": program.tide_extra["backbone"]}))
""")


@dataclass
class Pipeline:
    """What the CLI's distill -> compile -> tune -> evaluate path left behind in `root`."""

    root: Path
    uri: str  # the MLflow store
    codes: dict[str, int]  # step -> exit status
    printed: dict[str, str]  # step -> stdout
    rows: dict[str, int]  # step -> lines in eval/results.jsonl after it

    def read(self, relative: str):
        return json.loads((self.root / relative).read_text())


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Pipeline:
    """The CLI path run once on the workspace fixtures with a RoutedLM: distill, compile (COPRO), tune, evaluate the
    registered program (again without --resume, then with it), and evaluate iter-demos; MLflow logs to a sqlite store
    in the same temporary folder."""
    from tide_dspy.cli.main import main

    root = tmp_path_factory.mktemp("pipeline")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    common = ["--setting", "workspace", "--backbone", "dummy"]
    evaluate = ["evaluate", "--program", "models:/tide-workspace-dummy/1", "--backbone", "dummy", "--limit", "2",
                "--out", "eval"]
    steps = {
        "distill": ["distill", *common],
        "compile": ["compile", *common, "--optimizer", "copro", "--metric", "retrieval-f1",
                    "--opt", "init.breadth=2", "--opt", "init.depth=1", "--rounds", "2", "--per-round", "2"],
        "tune": ["tune", *common, "--trials", "2", "--storage", f"sqlite:///{root / 'optuna.db'}"],
        "evaluate": evaluate,
        "evaluate-again": evaluate,
        "evaluate-resume": [*evaluate, "--resume"],
        "evaluate-demos": ["evaluate", "--method", "iter-demos", *common, "--limit", "1", "--out", "demos"],
    }
    codes, printed, rows = {}, {}, {}
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        # mlflow.set_registry_uri writes MLFLOW_REGISTRY_URI, which configure_tracking prefers: set here, the
        # registry is this store, and the variable is restored when the context ends.
        patch.setenv("MLFLOW_REGISTRY_URI", uri)
        patch.setenv("TIDE_DATA", str(FIXTURE_DATA))
        # Gated: the rounds cite the gold evidence only under the proposed instruction, so compile improves the
        # validation score and saves the compiled program.
        dspy.configure(lm=RoutedLM(fixture_instances("workspace"), instruction="Compiled instruction.", gated=True))
        try:
            for step, argv in steps.items():
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    codes[step] = main(argv)
                printed[step] = out.getvalue()
                results = root / "eval" / "results.jsonl"
                rows[step] = len(results.read_text().splitlines()) if results.exists() else 0
        finally:
            dspy.configure(**copy.deepcopy(DEFAULT_CONFIG))
    return Pipeline(root, uri, codes, printed, rows)


@pytest.fixture(scope="module")
def runs(pipeline) -> dict:
    """The MLflow runs of the pipeline, by the command that logged them."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=pipeline.uri, registry_uri=pipeline.uri)
    found = client.search_runs([client.get_experiment_by_name("tide-dspy").experiment_id])
    return {r.data.tags["tide.command"]: r for r in found}


def test_cli_distill_keeps_one_template_per_solved_case(pipeline):
    library = TemplateLibrary.load(pipeline.root / "programs/workspace/dummy/templates.json")
    assert pipeline.codes["distill"] == 0
    assert len(library) == library.meta["passed"] - library.meta["merges"] == 10 == library.meta["cases"]


def test_cli_distill_prints_the_abstraction_check_counts(pipeline):
    printed = pipeline.printed["distill"]
    assert "10 passed the abstraction check, 0 failed and were dropped, 0 merged, 0 capped" in printed


def test_cli_distill_records_its_counts_in_the_provenance(pipeline):
    distilled = pipeline.read("programs/workspace/dummy/provenance.json")["templates.json"]
    assert {k: distilled[k] for k in ("passed", "failed", "merges", "capped", "mean_abstraction_score")} == {
        "passed": 10, "failed": 0, "merges": 0, "capped": 0, "mean_abstraction_score": 1.0}


def test_cli_compile_saves_the_backbone_validation_ids_and_shape_with_the_program(pipeline):
    saved = pipeline.read("programs/workspace/dummy/tide.json")
    assert pipeline.codes["compile"] == 0
    assert saved["tide_extra"]["backbone"] == "dummy" and saved["tide_extra"]["dspy_version"]
    assert saved["tide_extra"]["validation"]["ids"] and saved["tide_config"]["max_rounds"] == 2


def test_cli_compile_records_its_command_beside_the_templates_provenance(pipeline):
    provenance = pipeline.read("programs/workspace/dummy/provenance.json")
    assert provenance["tide.json"]["command"].startswith("tide compile") and "templates.json" in provenance


def test_every_step_records_the_data_it_read(pipeline):
    from tide_dspy.data.sets import file_sha256

    fixture = FIXTURE_DATA / "workspace" / "workspaces.jsonl"
    read = {"name": "workspace", "version": None, "sha256": file_sha256(fixture)}
    provenance = pipeline.read("programs/workspace/dummy/provenance.json")
    assert {name: provenance[name]["data"] for name in provenance} == {
        "templates.json": read, "tide.json": read, "tune.json": read}
    assert pipeline.read("eval/config.json")["data"] == read == pipeline.read("eval/summary.json")["data"]


def test_cli_tune_runs_the_trials_asked_for(pipeline):
    assert pipeline.codes["tune"] == 0
    assert pipeline.read("programs/workspace/dummy/tune.json")["trials"] == 2


def test_cli_evaluate_runs_a_registered_program_by_its_model_uri(pipeline):
    rows = (pipeline.root / "eval/results.jsonl").read_text().splitlines()
    assert pipeline.codes["evaluate"] == 0 and pipeline.rows["evaluate"] == 2
    assert all(json.loads(r)["instance_id"].startswith("ws-") for r in rows)


def test_cli_evaluate_into_existing_results_needs_resume_or_fresh(pipeline):
    assert pipeline.codes["evaluate-again"] == 2


def test_cli_evaluate_resume_reruns_no_finished_instance(pipeline):
    assert pipeline.codes["evaluate-resume"] == 0 and pipeline.rows["evaluate-resume"] == 2


def test_cli_evaluate_iter_demos_takes_its_demos_from_the_train_split(pipeline):
    assert pipeline.codes["evaluate-demos"] == 0
    assert pipeline.read("demos/config.json")["program"]["n_demos"] == DEMOS


def test_each_cli_command_logs_one_mlflow_run(runs):
    assert set(runs) == {"distill", "compile", "tune", "evaluate"}


def test_the_distill_run_logs_the_abstraction_counts(runs):
    assert {"passed", "failed", "merges", "capped", "mean_abstraction_score", "backbone_calls"} <= set(
        runs["distill"].data.metrics)


def test_the_compile_run_logs_the_setup_as_params(runs):
    assert {"backbone", "setting", "optimizer", "T", "k", "pool_size", "dataset_hash", "git_sha"} <= set(
        runs["compile"].data.params)


def test_the_compile_run_logs_the_scores_before_and_after(runs):
    assert {"before_f1_retrieval", "after_f1_retrieval", "backbone_calls"} <= set(runs["compile"].data.metrics)


def test_the_compile_run_logs_the_program_and_its_run_files(pipeline, runs):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=pipeline.uri)
    artifacts = {a.path for a in client.list_artifacts(runs["compile"].info.run_id)}
    assert {"program", "templates.json", "val_before.jsonl", "val_after.jsonl", "lm_usage.json"} <= artifacts


def test_the_compile_run_registers_the_program(pipeline, runs):
    from mlflow import MlflowClient

    version = MlflowClient(tracking_uri=pipeline.uri, registry_uri=pipeline.uri).get_model_version(
        "tide-workspace-dummy", "1")
    assert version.run_id == runs["compile"].info.run_id and version.source.startswith("models:/")


def test_a_registered_program_loads_and_runs_in_a_fresh_process(pipeline, tmp_path):
    (tmp_path / "load.py").write_text(LOAD_REGISTERED)
    # A fresh shell's environment: the registry follows the tracking store (this process's MLflow set its own).
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_REGISTRY_URI"} | {"MLFLOW_TRACKING_URI": pipeline.uri}
    done = subprocess.run([sys.executable, "load.py", "models:/tide-workspace-dummy/1", str(Path(__file__).parent)],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"kind": "TIDE", "findings": 4, "instruction": "Compiled instruction.", "backbone": "dummy"}


def test_cli_distill_writes_nothing_when_no_template_passes_the_check(tmp_path, monkeypatch, capsys, train):
    from dspy.utils.dummies import DummyLM

    from tide_dspy.cli.main import main

    data_root = FIXTURE_DATA
    # Leaks the names and the id of the first train case (ws-fernhill-biolab, problem fh-1).
    leaky = {"template": {"name": "Priya Anand never e-signed", "pattern": "PO-58-3301 waits on the controller",
                          "evidence_flow": ["find the request still pending in the tracker"]}}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDE_DATA", str(data_root))
    dspy.configure(lm=DummyLM([leaky, leaky]))
    code = main(["distill", "--setting", "workspace", "--backbone", "dummy", "--max-cases", "1", "--max-attempts", "2",
                 "--no-track"])
    captured = capsys.readouterr()
    assert code == 1
    assert "0 passed the abstraction check, 1 failed and were dropped" in captured.out
    assert "no template passed the abstraction check" in captured.err
    assert not (tmp_path / "programs" / "workspace" / "dummy" / "templates.json").exists()


def test_cli_distill_takes_max_attempts_and_no_other_spelling(capsys):
    from tide_dspy.cli.main import build_parser

    assert build_parser().parse_args(["distill", "--setting", "workspace", "--max-attempts", "2"]).max_attempts == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args(["distill", "--setting", "workspace", "--attempts", "2"])
