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


def test_every_command_has_an_example_in_its_help_and_the_example_is_valid() -> None:
    from evalsvc.cli import main

    for path in ["", *all_commands()]:
        shown = run_cli(*path.split(), "--help").stdout
        examples = [shlex.split(line.split("evalsvc", 1)[1]) for line in shown.split("Example:", 1)[-1].splitlines()
                    if re.match(r"\s*(?:\w+=\S+ )?evalsvc\b", line)]
        assert [w for w in examples if w[:len(path.split())] == path.split()], f"`evalsvc {path} --help` has no example"
        for words in examples:
            assert invocation_problems(["evalsvc", *words], main) == [], f"`evalsvc {path} --help` example {words}"


EVALSVC_CALL = re.compile(r"(?:^|&& |\.venv/bin/|time )(evalsvc(?: [^#>`]*)?)")


def readme_invocations(readme: str) -> list[list[str]]:
    """The `evalsvc ...` command lines of a README: in its fenced blocks (continued lines joined; comments and
    redirections dropped) and in its inline code spans (`evalsvc demo --full`)."""
    lines = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", readme, flags=re.S | re.M):
        lines += block.replace("\\\n", " ").splitlines()
    lines += re.findall(r"(?<!`)`([^`\n]+)`(?!`)", readme)
    found = (EVALSVC_CALL.search(line.strip()) for line in lines)
    return [shlex.split(match.group(1)) for match in found if match]


def invocation_problems(words: list[str], command: click.Command) -> list[str]:
    """What in one `evalsvc ...` command line the click tree does not have: a command, a subcommand or an
    option (an option's value is skipped; a group's own options count before its subcommand)."""
    problems, path, rest = [], "evalsvc", iter(words[1:])
    for word in rest:
        if word.startswith("-"):
            name = word.split("=")[0]
            options = {opt: param for param in command.params for opt in (*param.opts, *param.secondary_opts)}
            param = options.get(name)
            if param is None and name != "--help":
                problems.append(f"`{path}` has no option {name}")
            elif isinstance(param, click.Option) and not (param.is_flag or param.count or "=" in word):
                next(rest, None)  # the option's value
        elif isinstance(command, click.Group):
            sub = command.commands.get(word)
            if sub is None:
                problems.append(f"`{path}` has no command {word!r}")
                break
            command, path = sub, f"{path} {word}"
    return problems


def readme_problems(readme: str) -> list[str]:
    from evalsvc.cli import main

    return [problem for words in readme_invocations(readme) for problem in invocation_problems(words, main)]


def test_every_command_and_option_in_the_readme_exists() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme_invocations(readme)) >= 25  # the parser reads the README's examples, blocks and inline
    assert readme_problems(readme) == []


def test_the_readme_check_finds_a_missing_command_subcommand_or_option() -> None:
    readme = """
Run `evalsvc run --endpoint a --url U --model M --no-such-flag` or `evalsvc --verbose runs --db x.db`.

```sh
evalsvc ladder walk my.yaml          # no such subcommand
evalsvc compare a b \\
    --margin 2 --wider               # a continued line
.venv/bin/evalsvc frobnicate --json
```
"""
    assert readme_problems(readme) == [
        "`evalsvc ladder` has no command 'walk'",
        "`evalsvc compare` has no option --wider",
        "`evalsvc` has no command 'frobnicate'",
        "`evalsvc run` has no option --no-such-flag",
    ]


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
