"""The README and the guides in docs/ say only what the code does: every `placer` and `experiments/` command in
their shell blocks names a real subcommand or script and flags its parser accepts, every relative link
resolves, the README stays an entry point, and its quick commands run as shown."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # docs/results/ holds measurements, not commands
README_MAX_LINES = 250
RESULTS_MAX_LINES = 150
EXPERIMENTS_TOP_LEVEL_MAX = 20

SHELL_FENCES = {"bash", "sh", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|"}

# Pages written on other branches of the same change. A link into them is skipped only while its target is
# missing; once those branches are merged, empty this tuple so that every link is checked.
# The README's commands that take seconds: CI runs them exactly as written (the script from this environment).
QUICK_README_COMMANDS = (
    ".venv/bin/placer models",
    ".venv/bin/placer measure two-tower --target modeled:2xV100 --placement expert --json",
)

NARRATION = re.compile(r"\b(we|our|this VM|(last|previous|earlier|this) session|"
                       r"earlier version)\b", re.IGNORECASE)


@dataclass(frozen=True)
class DocCommand:
    """One command of a shell block: where it is written, and its words."""

    where: str
    argv: tuple[str, ...]

    @property
    def is_placer(self) -> bool:
        return Path(self.argv[0]).name == "placer"

    @property
    def is_experiment(self) -> bool:
        return (len(self.argv) > 1 and Path(self.argv[0]).name.startswith("python")
                and re.fullmatch(r"experiments/(?:(?:probes|reports)/)?\w+\.py", self.argv[1]) is not None)

    def __str__(self) -> str:
        return f"{self.where}: {shlex.join(self.argv)}"


def shell_blocks(path: Path) -> list[tuple[int, list[str]]]:
    """(line number of the first line, lines) of every fenced block in a shell language."""
    blocks, current, start, language = [], None, 0, ""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = re.match(r"\s*```(\S*)", line)
        if fence and current is None:
            current, start, language = [], number + 1, fence.group(1).lower()
        elif fence:
            if language in SHELL_FENCES:
                blocks.append((start, current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def commands_in(path: Path) -> list[DocCommand]:
    """Every command of the file's shell blocks: continuation lines joined, prompts and comments dropped,
    chains (`&&`, `;`, `|`) split, and a command after `--` (`placer cluster up ... -- COMMAND`) taken apart."""
    found = []
    for start, lines in shell_blocks(path):
        joined, first = "", start
        for offset, line in enumerate(lines):
            if not joined:
                first = start + offset
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            text = re.sub(r"^\s*\$ ", "", joined + line)
            joined = ""
            where = f"{path.relative_to(ROOT)}:{first}"
            segment: list[str] = []
            for word in [*shlex.split(text, comments=True), ";"]:
                if word in SEPARATORS or word == "--":
                    if segment:
                        found.append(DocCommand(where, tuple(segment)))
                    segment = []
                else:
                    segment.append(word)
    return found


ALL_COMMANDS = [command for path in DOCS for command in commands_in(path)]
PLACER_COMMANDS = [command for command in ALL_COMMANDS if command.is_placer]
EXPERIMENT_COMMANDS = [command for command in ALL_COMMANDS if command.is_experiment]


def placer_script() -> str:
    """The installed `placer` console script of the Python running the tests (whichever module holds it)."""
    script = shutil.which("placer", path=str(Path(sys.executable).parent)) or shutil.which("placer")
    if script is None:
        pytest.fail("no `placer` console script next to this Python or on PATH: run `pip install -e .`")
    return script


def _help(argv: list[str]) -> str:
    result = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env=os.environ)
    assert result.returncode == 0, f"`{shlex.join(argv)} --help` failed:\n{result.stderr[-2000:]}"
    return result.stdout


@functools.lru_cache(maxsize=None)
def placer_help(*words: str) -> str:
    return _help([placer_script(), *words])


@functools.lru_cache(maxsize=None)
def script_help(script: str) -> str:
    return _help([sys.executable, str(ROOT / script)])


def subcommands(help_text: str) -> set[str]:
    """The choices of the parser's sub-command positional, empty when it has none: listed as `{measure,...}`,
    or under a metavar (`COMMAND`) one per line, indented four spaces."""
    positional = help_text.split("positional arguments:", 1)[-1].split("\noptions:", 1)[0] \
        if "positional arguments:" in help_text else ""
    choices = re.search(r"^\s+\{([\w,-]+)\}", positional, re.MULTILINE)
    if choices:
        return set(choices.group(1).split(","))
    return set(re.findall(r"^    ([a-z][\w-]*)(?:\s|$)", positional, re.MULTILINE))


def accepted_flags(help_text: str) -> set[str]:
    """Every option string an argparse help lists: the invocation column of its option lines."""
    flags = set()
    for line in help_text.splitlines():
        if re.match(r"^  -\S", line):
            invocation = re.split(r"\s{2,}", line.strip())[0]
            flags.update(re.findall(r"(?:^|,\s)(--?[A-Za-z0-9][\w-]*)", invocation))
    return flags


def used_flags(words: tuple[str, ...]) -> list[str]:
    return [word.split("=", 1)[0] for word in words
            if word.startswith("-") and not re.match(r"-\d", word)]


def test_docs_show_the_main_job_and_benchmark_commands():
    """Guards the extraction itself: a parser that found nothing would make every check below pass."""
    for main_job in (("optimize", "two-tower", "--target", "local:2"),
                     ("train", "two-tower", "--target", "local:2", "--simulator-updates", "20", "--updates", "10")):
        assert any(command.argv[1:] == main_job for command in PLACER_COMMANDS if command.where.startswith("README"))
    assert len(PLACER_COMMANDS) > 40 and len(EXPERIMENT_COMMANDS) > 15
    assert any(command.argv[1:3] == ("cluster", "up") for command in PLACER_COMMANDS)


@pytest.mark.parametrize("command", PLACER_COMMANDS, ids=str)
def test_placer_command_names_a_subcommand_and_flags_it_accepts(command):
    words: list[str] = []
    choices = subcommands(placer_help())
    rest = list(command.argv[1:])
    while choices:
        assert rest, f"{command}: no subcommand; one of {sorted(choices)}"
        word = rest.pop(0)
        assert word in choices, f"{command}: `placer {' '.join([*words, word])}` is not a subcommand; one of {sorted(choices)}"
        words.append(word)
        choices = subcommands(placer_help(*words))
    unknown = set(used_flags(tuple(rest))) - accepted_flags(placer_help(*words))
    assert not unknown, f"{command}: `placer {' '.join(words)}` does not accept {sorted(unknown)}"


@pytest.mark.parametrize("command", EXPERIMENT_COMMANDS, ids=str)
def test_experiment_command_names_a_script_and_flags_it_accepts(command):
    script = command.argv[1]
    assert (ROOT / script).is_file(), f"{command}: {script} does not exist"
    unknown = set(used_flags(command.argv[2:])) - accepted_flags(script_help(script))
    assert not unknown, f"{command}: {script} does not accept {sorted(unknown)}"


def test_experiment_commands_include_the_probes_and_reports():
    """Guards the pattern: the shelf's subfolders are checked like its top level."""
    named = {Path(command.argv[1]).parent.as_posix() for command in EXPERIMENT_COMMANDS}
    assert {"experiments", "experiments/probes", "experiments/reports"} <= named


def test_every_script_named_in_the_docs_and_results_exists():
    """Beyond the shell blocks: inline commands and the results pages name scripts too, probes included."""
    pages = [*DOCS, ROOT / "RESULTS.md", *sorted((ROOT / "docs" / "results").glob("*.md"))]
    named = {(path.relative_to(ROOT).as_posix(), script) for path in pages
             for script in re.findall(r"experiments/(?:\w+/)*\w+\.py", path.read_text())}
    assert any(script.startswith("experiments/probes/") for _, script in named)
    missing = sorted(f"{where}: {script}" for where, script in named if not (ROOT / script).is_file())
    assert not missing, "scripts that do not exist:\n" + "\n".join(missing)


def test_results_is_an_index_of_at_most_150_lines():
    lines = (ROOT / "RESULTS.md").read_text().splitlines()
    assert len(lines) <= RESULTS_MAX_LINES, f"RESULTS.md has {len(lines)} lines; move the detail to docs/results/"


def test_experiments_top_level_holds_at_most_20_scripts():
    """The shelf: launch scripts and the benchmarks behind RESULTS.md (counted: every `*.py` but `__init__.py`
    and `_report.py`); one-off probes live in experiments/probes/, reports over runs in experiments/reports/."""
    scripts = sorted(path.name for path in (ROOT / "experiments").glob("*.py")
                     if path.name not in {"__init__.py", "_report.py"})
    assert len(scripts) <= EXPERIMENTS_TOP_LEVEL_MAX, f"{len(scripts)} scripts at the top of experiments/: {scripts}"
    for folder in ("probes", "reports"):
        assert (ROOT / "experiments" / folder / "__init__.py").is_file()


def relative_links(path: Path) -> list[tuple[str, str]]:
    """(link text, target relative to the repository root) of every relative link or image outside code."""
    text = re.sub(r"^\s*```.*?^\s*```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    links = []
    for label, target in re.findall(r"\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        resolved = (path.parent / target.split("#", 1)[0]).resolve()
        links.append((label, resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)))
    return links


def test_every_relative_link_resolves():
    checked, broken = 0, []
    for path in DOCS:
        for label, target in relative_links(path):
            if (ROOT / target).exists():
                checked += 1
            else:
                broken.append(f"{path.relative_to(ROOT)}: [{label}]({target})")
    assert checked > 20
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_readme_is_an_entry_point_of_at_most_250_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move the details to a guide in docs/"


def test_docs_describe_the_software_not_its_development():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in DOCS
             for number, line in enumerate(path.read_text().splitlines(), 1) if NARRATION.search(line)]
    assert not found, "narration of development:\n" + "\n".join(found)


def _run_as_written(command: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert Path(argv[0]).name == "placer"
    return subprocess.run([placer_script(), *argv[1:]], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=os.environ)


@pytest.mark.parametrize("command", QUICK_README_COMMANDS)
def test_quick_readme_command_is_in_the_readme(command):
    assert tuple(shlex.split(command)) in {c.argv for c in ALL_COMMANDS if c.where.startswith("README")}


def test_readme_lists_the_built_in_models(tmp_path):
    result = _run_as_written(QUICK_README_COMMANDS[0], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    for model in ("two-tower", "nmt-2", "inception-v3", "transformer"):
        assert re.search(rf"^\s+{re.escape(model)}\s", result.stdout, re.MULTILINE), result.stdout


def _step_seconds(record) -> float | None:
    """The step time's `seconds` wherever the JSON record nests it."""
    if isinstance(record, dict):
        if isinstance(record.get("seconds"), (int, float)):
            return float(record["seconds"])
        return next((s for s in map(_step_seconds, record.values()) if s is not None), None)
    return None


def test_readme_measure_command_prints_a_simulated_step_time_as_json(tmp_path):
    result = _run_as_written(QUICK_README_COMMANDS[1], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout)
    seconds = _step_seconds(record)
    assert seconds is not None and 0 < seconds < 1, record
    assert "simulated" in json.dumps(record)
