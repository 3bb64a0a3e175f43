"""Every benchmark's ``--help`` explains it: its whole docstring, and every option with
what it is for and its default."""

from __future__ import annotations

import argparse
import importlib
import runpy
import sys
from pathlib import Path

import pytest

from bench.figures import command_line, commands

BENCH = Path(__file__).parents[2] / "bench"
#: The benchmarks with a command line (each builds it with ``command_line``).
COMMANDS = sorted(commands())


class _Parsed(Exception):
    """Raised in place of parsing: the parser was built."""


def _parser(module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser ``python -m bench.<module>`` builds, caught as it would parse."""
    built: list[argparse.ArgumentParser] = []

    def caught(self: argparse.ArgumentParser, *_args: object, **_kwargs: object) -> None:
        built.append(self)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", caught)
    monkeypatch.setattr(sys, "argv", [f"bench.{module}"])
    with pytest.raises(_Parsed):
        # As a script, so the imported module is not run a second time under its name.
        runpy.run_path(str(BENCH / f"{module}.py"), run_name="__main__")
    return built[0]


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _options(sub)
        elif not isinstance(action, argparse._HelpAction):
            found.append(action)
    return found


def test_no_benchmark_builds_a_command_line_of_its_own():
    own = [p.name for p in BENCH.glob("*.py") if "ArgumentParser(" in p.read_text()]
    assert own == ["figures.py"]
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("module", COMMANDS)
def test_a_benchmark_s_help_is_its_docstring_and_explains_every_option(module, monkeypatch):
    parser = _parser(module, monkeypatch)
    doc = importlib.import_module(f"bench.{module}").__doc__ or ""
    assert parser.description == doc == commands()[module]
    # How to run it, as it runs: ``python bench/<module>.py`` does not find the package.
    assert f"python -m bench.{module}" in doc and "python bench/" not in doc
    unexplained = [a.option_strings or [a.dest] for a in _options(parser) if not a.help]
    assert unexplained == []


def test_help_keeps_the_docstring_s_lines_and_gives_each_default_once():
    """What it is for, across lines as written; ``(default: …)`` where the help does not
    already say it, and none for a flag or a None."""
    parser = command_line("Measures a thing.\n\n    python -m bench.thing [--n N]\n")
    parser.add_argument("--n", type=int, default=5, help="rounds")
    parser.add_argument("--out", default="x", help="where (default: beside it)")
    parser.add_argument("--plan", action="store_true", help="print the plan")
    parser.add_argument("--only", default=None, help="these")
    text = parser.format_help()
    assert "Measures a thing.\n\n    python -m bench.thing [--n N]\n" in text
    assert "rounds (default: 5)" in text
    assert "where (default: beside it)\n" in text
    assert "print the plan\n" in text and "these\n" in text
    assert text.count("default") == 2
