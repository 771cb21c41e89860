"""docs/cli.md, the command-line reference, is generated from the parsers: it must match them."""

from pathlib import Path

from agents.cli import build_parser, reference

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_docs_cli_md_matches_the_parsers():
    assert REFERENCE.read_text() == reference(), (
        "docs/cli.md is stale: regenerate it with `python -m agents.cli reference > docs/cli.md`")


def test_the_reference_lists_every_command_and_each_argument_with_its_default():
    text = reference()
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    listed = {c.dest for c in commands._choices_actions}
    assert listed >= {"measure", "calibrate", "tune", "schedule", "apply", "train", "export", "pretrain", "place"}
    assert "reference" not in listed and "## placer reference" not in text
    for name in listed - {"cluster"}:
        assert f"## placer {name}\n" in text
    assert "## placer cluster up\n" in text
    assert "| `--target`, `--cluster` | `inprocess:1` |" in text  # measure's target, its alias and default
    assert "| `--repeats` | `10` |" in text  # apply's timed steps
