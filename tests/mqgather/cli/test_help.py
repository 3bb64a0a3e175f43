"""`mqgather … --help` explains every command and every option."""

from __future__ import annotations

import click
from click.testing import CliRunner

from mqgather.cli.main import cli


def _commands(
    command: click.Command, path: tuple[str, ...] = ("mqgather",)
) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            found += _commands(sub, (*path, name))
    return found


def test_every_command_and_option_says_what_it_is_for():
    unexplained = []
    for path, command in _commands(cli):
        if not (command.help or command.short_help):
            unexplained.append(" ".join(path))
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and not param.help:
                unexplained.append(f"{' '.join(path)} {param.opts[0]}")
    assert unexplained == []


def test_an_option_s_help_is_shown_with_its_default():
    shown = CliRunner().invoke(cli, ["collector", "rules", "set", "--help"])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "--max-messages INTEGER A batch closes at this many messages. [default: 10]" in text
