"""What the README and `--help` promise about the command line is what it does."""

from __future__ import annotations

import re
import shlex

import click

from harness.errors import EXIT_CODES
from tests.conftest import ROOT, run_cli


def test_exit_codes_are_documented_in_readme_and_help() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| (\d+) \| (.+) \|$", readme, flags=re.M))
    assert {int(code): meaning for code, meaning in documented.items()} == EXIT_CODES
    shown = run_cli("--help").stdout
    for code, meaning in EXIT_CODES.items():
        assert re.search(rf"^\s+{code}\s+{re.escape(meaning)}$", shown, flags=re.M), (code, shown)


def test_version() -> None:
    from importlib.metadata import version

    result = run_cli("--version")
    assert result.exit_code == 0 and result.stdout == f"evalsvc {version('evalsvc')}\n"


def all_commands() -> dict[str, click.Command]:
    """Every command by its path under `evalsvc` ("run", "ladder run", ...)."""
    from evalsvc.cli import main

    found: dict[str, click.Command] = {}

    def walk(group: click.Group, path: str) -> None:
        for name, command in group.commands.items():
            found[f"{path}{name}"] = command
            if isinstance(command, click.Group):
                walk(command, f"{path}{name} ")

    walk(main, "")
    return found


def test_every_command_has_an_example_in_its_help() -> None:
    for path, command in all_commands().items():
        shown = run_cli(*path.split(), "--help").stdout
        assert re.search(rf"Example:[\s\S]{{0,120}}?evalsvc {re.escape(path)}\b", shown), f"`evalsvc {path} --help` has no example"


def readme_invocations() -> list[list[str]]:
    """The `evalsvc ...` command lines of the README's shell blocks, comments and redirections dropped."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.S):
        for line in block.splitlines():
            found = re.search(r"(?:^|&& |\.venv/bin/)(evalsvc [^#>]*)", line)
            if found:
                lines.append(shlex.split(found.group(1)))
    return lines


def test_every_command_and_option_in_the_readme_exists() -> None:
    commands = all_commands()
    invocations = readme_invocations()
    assert len(invocations) >= 15  # the parser reads the README's examples
    for words in invocations:
        path = " ".join(w for w in words[1:3] if not w.startswith("-"))
        name = path if path in commands else words[1]
        assert name in commands, f"README runs `evalsvc {name}`, which does not exist"
        known = {opt for param in commands[name].params for opt in (*param.opts, *param.secondary_opts)}
        for word in words:
            if word.startswith("--"):
                assert word.split("=")[0] in known, f"README gives `evalsvc {name} {word}`, which it does not take"


def test_one_vocabulary_template_keys_task_names_and_limit(db_path: str) -> None:
    import json

    from tests.conftest import GSM8K_TEST
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        ran = run_cli("run", "--endpoint", "step3", "--url", server.base_url, "--model", "fake-model", "--data",
                      GSM8K_TEST, "--limit", "2", "--template", "fewshot-completion@v1", "--json", "--db", db_path)
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["runs"][0]["template"] == "fewshot-completion@v1"  # as the README names it
    entered = run_cli("speed", "--endpoint", "step3", "--workload", "gsm8k", "--tokens-per-second", "200",
                      "--source", "vendor", "--json", "--db", db_path)
    assert entered.exit_code == 0 and json.loads(entered.stdout)["workload"] == "math"
    speed_help = run_cli("speed", "--help").stdout
    assert "--limit, --n" in speed_help


def untyped_parameters(command: click.Command) -> list[str]:
    """What is wrong with a command function's signature: a catch-all (**opts), a parameter without a type,
    or a click parameter the function does not name."""
    import inspect

    signature = inspect.signature(command.callback) if command.callback else None
    if signature is None:
        return []
    params = signature.parameters
    wrong = [f"**{p.name}" for p in params.values() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    wrong += [f"{p.name} (no type)" for p in params.values() if p.annotation is inspect.Parameter.empty]
    wrong += [f"{p.name} (not a parameter of the function)" for p in command.params
              if p.name not in params and p.expose_value and p.name != "help"]
    return wrong


def test_every_command_names_and_types_each_option() -> None:
    for path, command in all_commands().items():
        assert not untyped_parameters(command), f"`evalsvc {path}`: {untyped_parameters(command)}"


def test_the_typed_options_check_can_fail() -> None:
    @click.command("loose")
    @click.option("--limit", type=int)
    @click.option("--name")
    def loose(limit, **opts):  # type: ignore[no-untyped-def]
        """Example: evalsvc loose"""

    assert untyped_parameters(loose) == ["**opts", "limit (no type)", "opts (no type)",
                                         "name (not a parameter of the function)"]
