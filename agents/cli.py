"""The `placer` console script: placer/'s commands (placer/cli.py) and those of agents/, assembled here, at
the top of the layers, so that every import from the command line to the code it runs is one a reader can follow.
"""

from __future__ import annotations

import argparse
import os
import sys

from placer import cli as placer_cli

from agents.graph_policy.commands import place_command, pretrain_command
from agents.launch import Command, export_command, train_command
from agents.optimize_command import optimize_command

AGENT_COMMANDS: dict[str, Command] = {"train": train_command, "export": export_command,
                                      "pretrain": pretrain_command, "place": place_command,
                                      "optimize": optimize_command}
"""The commands of agents/, beside placer/'s `PLACER_COMMANDS`."""


def build_parser() -> argparse.ArgumentParser:
    """The whole `placer` command line, with the hidden `reference` command that prints docs/cli.md."""
    parser, sub = placer_cli.new_parser()
    placer_cli.add_placer_commands(sub)
    for name, command in AGENT_COMMANDS.items():
        command.add_arguments(sub.add_parser(name, help=command.help, description=command.help))
    sub.add_parser("reference")  # no help: not listed; `python -m agents.cli reference > docs/cli.md`
    return parser


def run(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """argv: the command line `args` were parsed from, for a command that must re-run itself elsewhere."""
    if getattr(args, "ray", None) == "auto" and argv is not None:
        from placer.testbed import only_loopback

        if not only_loopback():
            return _run_in_private_network(argv)
    if OUTER_PROCESS in os.environ:
        _end_with_outer_process(int(os.environ.pop(OUTER_PROCESS)))
    if args.command in AGENT_COMMANDS:
        return AGENT_COMMANDS[args.command].run(args)
    if args.command == "reference":
        print(reference(), end="")
        return 0
    return placer_cli.run_placer_command(args)


def reference() -> str:
    """docs/cli.md: every command of `placer`, its usage, and each argument with its default and help, read from
    the parsers themselves (tests/test_cli_reference.py fails when the file is stale)."""
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps usage lines to the terminal: the file must not depend on it
    try:
        parser = build_parser()
        lines = ["# The `placer` command line", "",
                 "Generated from the parsers by `python -m agents.cli reference > docs/cli.md`; do not edit by hand.",
                 "`--cluster` (and `--machines` for `placer pretrain`) are older spellings of `--target`, and",
                 "`--steps` of `--repeats` in `placer apply` and of `--updates` in `placer train`; they still work.", ""]
        for name, sub, help in _commands(parser):
            lines += _command_reference(name, sub, help)
        return "\n".join(lines).rstrip() + "\n"
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns


def _commands(parser: argparse.ArgumentParser, prefix: str = ""):
    """(name, parser, help) of every listed command under `parser`, nested ones (`cluster up`) included."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            if name not in helps:
                continue  # unlisted: the `reference` command itself
            if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                yield from _commands(sub, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", sub, helps[name]


def _command_reference(name: str, parser: argparse.ArgumentParser, help: str) -> list[str]:
    formatter = parser._get_formatter()
    lines = [f"## placer {name}", "", " ".join((help or "").split()), "", "```text",
             parser.format_usage().rstrip(), "```", "", "| argument | default | help |", "| --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.metavar or action.dest}`"
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS, []) else f"`{default}`"
        text = " ".join(formatter._expand_help(action).split()) if action.help else ""
        lines.append(f"| {flags} | {shown} | {text.replace('|', '&#124;')} |")
    return lines + [""]


def _run_in_private_network(argv: list[str]) -> int:
    """Run `placer ARGV` again in a private network namespace that has only loopback: `--ray auto` starts a
    private Ray there, whose servers listen on every interface of their namespace with no authentication."""
    import subprocess

    from agents.workers import WorkerError
    from placer.testbed import isolation_available

    if not isolation_available():
        raise WorkerError("--ray auto starts a private Ray only in a private network namespace, and `unshare -rn` "
                          "cannot make one here (user namespaces may be disabled): start a Ray cluster yourself on "
                          "a private network and give its ADDRESS (docs/scale-out.md)")
    # `unshare` execs the command: the command re-run is this process's own child, which ends with it.
    return subprocess.run(["unshare", "-rn", sys.executable, "-m", "agents.cli", *argv],
                          env={**os.environ, OUTER_PROCESS: str(os.getpid())}).returncode


OUTER_PROCESS = "PLACER_OUTER_PROCESS"
"""Set in a command re-run in a private network namespace: the pid of the command that re-ran it."""


def _end_with_outer_process(outer: int) -> None:
    """End this re-run command, and the private Ray it starts, when the outer command ends, however it ends
    (even SIGKILL): the kernel sends SIGTERM, which leaves the `with` blocks as an exit does, so Ray is shut
    down and its folder removed."""
    import signal

    from placer.testbed import die_with_parent

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    die_with_parent(outer, signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return placer_cli.run_command(build_parser(), argv, lambda args: run(args, argv))


if __name__ == "__main__":
    sys.exit(main())
