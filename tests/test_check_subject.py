"""scripts/check_subject.py, the commit-msg hook: a subject over 72 characters is refused."""

from scripts import load_script

check_subject = load_script("check_subject", "scripts")


def test_a_subject_of_72_characters_passes():
    assert check_subject.problem("x" * 72 + "\n\n" + "body " * 40) is None


def test_a_subject_of_73_characters_is_refused_with_its_length():
    assert "73 characters" in check_subject.problem("x" * 73 + "\n")


def test_a_long_body_line_does_not_count_as_the_subject(tmp_path):
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("Short subject\n\n" + "y" * 200 + "\n")
    assert check_subject.main([str(message)]) == 0
