"""scripts/check_docs.py: each rule finds what it is for, and the shipped docs pass it."""

from __future__ import annotations

import pytest

from scripts import load_script

check_docs = load_script("check_docs", folder="scripts")


@pytest.fixture(scope="module")
def parser():
    from tide_dspy.cli.main import build_parser

    return build_parser()


def problems_in(tmp_path, parser, text: str) -> list[str]:
    page = tmp_path / "page.md"
    page.write_text(text)
    return [p.message for p in check_docs.check_file(page, parser, check_docs.all_flags(parser))]


def test_a_real_command_and_its_flags_pass(tmp_path, parser):
    assert problems_in(tmp_path, parser, "```bash\ntide evaluate --method single --setting workspace \\\n"
                                         "  --limit 2\n```\n") == []


def test_an_unknown_subcommand_is_found(tmp_path, parser):
    [problem] = problems_in(tmp_path, parser, "Run `tide evaluat --limit 2`.\n")
    assert problem.startswith("`tide evaluat`: no such command (commands: ")


def test_a_flag_the_command_lacks_is_found(tmp_path, parser):
    assert problems_in(tmp_path, parser, "```\n$ TIDE_X=1 tide discover workspace d --no-such-flag\n```\n") == [
        "`tide discover workspace` has no option --no-such-flag"]


def test_alternatives_are_not_pipes(tmp_path, parser):
    assert problems_in(tmp_path, parser, "`tide evaluate --method single|multi --setting workspace`\n") == []


def test_a_flag_on_its_own_must_belong_to_some_command(tmp_path, parser):
    assert problems_in(tmp_path, parser, "Pass `--resume`, not `--resumed`.\n") == [
        "no `tide` command has the option --resumed"]


def test_a_broken_relative_link_is_found(tmp_path, parser):
    (tmp_path / "there.md").write_text("x\n")
    assert problems_in(tmp_path, parser, "[ok](there.md#part) [web](https://dspy.ai) [bad](missing.md)\n") == [
        "the link missing.md leads nowhere"]


def test_a_machine_path_is_found(tmp_path, parser):
    assert problems_in(tmp_path, parser, "The report is in /tmp/run7/report.md.\n") == [
        "a machine's absolute path: /tmp/run7"]


def test_an_undocumented_variable_is_found(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("| variable | default | meaning |\n|---|---|---|\n| `TIDE_DATA` | the shipped sets | data |\n")
    missing = [p.message.split()[0] for p in check_docs.check_configuration(readme, {"TIDE_DATA", "TIDE_N_CTX"})]
    assert missing == ["TIDE_N_CTX"]


def test_the_table_of_methods_must_match_the_registry(tmp_path):
    page = tmp_path / "program.md"
    page.write_text("| method | class | guidance | what |\n|---|---|---|---|\n"
                    "| `tide` | `TIDE` | none | wrong guidance |\n| `magic` | `TIDE` | none | not a method |\n")
    found = [p.message for p in check_docs.check_methods(page)]
    assert "'tide' is TIDE with guidance templates in tide_dspy.methods, not TIDE / none" in found
    assert "the table lists 'magic', which tide_dspy.methods does not define" in found
    assert any(m.startswith("method 'single' of tide_dspy.methods has no row") for m in found)


def test_the_code_reads_the_variables_the_registry_and_settings_name():
    names = check_docs.env_reads(check_docs.ROOT / "tide_dspy")
    assert {"TIDE_DATA", "TIDE_N_CTX", "OPENAI_API_KEY", "MLFLOW_TRACKING_URI"} <= names


def test_the_shipped_docs_pass(capsys):
    assert check_docs.main([]) == 0, capsys.readouterr().out


def configuration_defaults() -> dict[str, str]:
    """The default cell of each row of README.md's configuration table, by variable."""
    text = (check_docs.ROOT / "README.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        m = check_docs.ENV_TABLE_ROW.match(line)
        if m:
            rows[m.group(1)] = line.split("|")[2].strip()
    return rows


def test_the_configuration_table_gives_the_code_s_defaults():
    from tide_dspy.backbones import llamacpp, llamacpp_cache
    from tide_dspy.backbones.calls import DEFAULT_RETRIES

    defaults = configuration_defaults()
    assert defaults["TIDE_N_CTX"] == str(llamacpp.DEFAULT_N_CTX)
    assert defaults["TIDE_NUM_RETRIES"] == str(DEFAULT_RETRIES)
    assert defaults["TIDE_PROMPT_CACHE_MAX_MB"] == str(llamacpp_cache.DEFAULT_MAX_MB)
    assert defaults["TIDE_MAX_TOKENS"].startswith(f"{llamacpp.DEFAULT_MAX_TOKENS} embedded")


def test_the_tide_variables_are_read_through_the_settings_only():
    """Every TIDE_* variable is a field of tide_dspy.util.settings.Settings, which the docs check reads, so the
    configuration table lists what the code reads; nothing reads one from os.environ by hand."""
    import ast

    from tide_dspy.util.settings import variables

    package = check_docs.ROOT / "tide_dspy"
    by_hand = sorted(f"{path.relative_to(package)}: {ast.unparse(node)}" for path in package.rglob("*.py")
                     for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                     if isinstance(node, (ast.Call, ast.Subscript)) and "environ" in ast.unparse(node)
                     and "'TIDE_" in ast.unparse(node))
    assert by_hand == []
    assert {"TIDE_DATA", "TIDE_API_KEY", "TIDE_N_CTX"} <= set(variables()) <= set(configuration_defaults())
