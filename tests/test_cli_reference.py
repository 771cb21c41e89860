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


def _model_arguments(parser, words=()):
    """(command words, help) of every MODEL argument (the positional `model` or `--model`) of every subcommand."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _model_arguments(sub, (*words, name))
        elif action.dest == "model" and action.help:
            yield words, " ".join(action.help.split())


def test_every_model_argument_names_what_load_model_accepts():
    from placer.models.loader import SPEC_FORMS

    found = dict(_model_arguments(build_parser()))
    assert {("measure",), ("tune",), ("apply",), ("schedule",), ("train",), ("place",), ("optimize",)} <= set(found)
    # what placer.models.load_model accepts from a command line, as its SPEC_FORMS names it
    assert all(form in SPEC_FORMS for form in ("module:function", "file.py:function", "OpGraph", "compiled keras.Model"))
    for words, text in found.items():
        for form in ("built-in model", "module:function", "file.py:function", "OpGraph", "compiled keras.Model"):
            assert form in text, f"`placer {' '.join(words)} --help` does not say MODEL may be a {form}: {text!r}"
