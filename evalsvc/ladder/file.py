"""Ladder files: the steps of an optimization ladder, parsed and checked (`evalsvc.ladder.launch` starts them).

A ladder file is YAML naming the endpoints to compare, in order (for example
BF16 -> 4-bit -> + speculative decoding -> + custom kernel -> deeper quant).
Each step names its OpenAI-compatible `base_url` and `model`; a step with a
`launch` section is started by `launch_step` and stopped afterwards, a step
without one is assumed to be running already.

    name: my-ladder
    description: optional text
    setup: embedded            # optional; ask for `evalsvc.engine.embedded.ensure_engine()` first
    steps:
      - name: bf16
        base_url: http://127.0.0.1:30000/v1
        model: meta-llama/Llama-3.1-8B-Instruct
        mode: chat             # or completions; default chat
        launch:
          command: [python, -m, sglang.launch_server, --port, "30000"]
          health_url: http://127.0.0.1:30000/health   # default: {base_url}/models
          startup_timeout_s: 600
          env: {CUDA_VISIBLE_DEVICES: "0"}
        metadata: {quantization: bf16}                # free-form

Strings in `base_url`, `model`, `launch.command`, `launch.health_url` and
`launch.env` may hold `${NAME}` placeholders; `resolve_ladder` fills them in
from a mapping (the environment plus, for the embedded ladder,
`EngineInfo.placeholders()`).

Secrets stay out of the process list: `launch.command` may not use a secret
placeholder (`${EVALSVC_API_KEY}`, `${HF_TOKEN}`, ...) nor hold the store
password or API key; pass such values in `launch.env`. A launched server does
not inherit `EVALSVC_DB` or `EVALSVC_API_KEY` unless `launch.env` names them.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from db.engine import DB_ENV
from evalsvc.home import HOME_ENV
from harness.client import API_KEY_ENV
from harness.errors import UserError
from harness.redact import MIN_SECRET_LEN, is_secret_name, known_secrets, url_secrets
from harness.urls import api_url

log = logging.getLogger(__name__)

Mode = Literal["chat", "completions"]

DEFAULT_STARTUP_TIMEOUT_S = 600.0
SETUP_CHOICES = ("embedded",)

_TOP_KEYS = {"name": True, "description": False, "setup": False, "steps": True}
_STEP_KEYS = {"name": True, "base_url": True, "model": True, "mode": False, "launch": False, "metadata": False}
_LAUNCH_KEYS = {"command": True, "health_url": False, "startup_timeout_s": False, "env": False}
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_PLACEHOLDER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A launched server does not inherit these (the store password, the endpoint key) unless launch.env passes them.
SECRET_ENV = (DB_ENV, API_KEY_ENV)


class LadderError(UserError, ValueError):
    """A ladder file is malformed; the message names the file, the step and the key."""

    def __init__(self, source: str, message: str, step: str | None = None, key: str | None = None) -> None:
        where = source if step is None else f"{source}: step '{step}'"
        super().__init__(f"{where}: {message}")
        self.source = source
        self.step = step
        self.key = key


@dataclass(frozen=True)
class LaunchSpec:
    """How to start a step's server and tell when it is ready."""

    command: tuple[str, ...]
    health_url: str
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # may pass a key to the server


@dataclass(frozen=True)
class LadderStep:
    """One rung of the ladder: an endpoint, and optionally how to launch it."""

    name: str
    base_url: str
    model: str
    mode: Mode = "chat"
    launch: LaunchSpec | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ladder:
    """A parsed ladder file; steps keep the file's order."""

    name: str
    steps: tuple[LadderStep, ...]
    description: str = ""
    setup: str | None = None
    source: str = "<ladder>"

    def step(self, name: str) -> LadderStep:
        """The step called `name`; LadderError listing the names if there is none."""
        for step in self.steps:
            if step.name == name:
                return step
        names = ", ".join(s.name for s in self.steps)
        raise LadderError(self.source, f"no step named '{name}'; steps are: {names}")

    def placeholders(self) -> set[str]:
        """Names of every `${NAME}` placeholder still present in the steps."""
        found: set[str] = set()
        for step in self.steps:
            for text in _step_strings(step):
                found.update(m.group(1) for m in _PLACEHOLDER.finditer(text))
        return found


# ---------------------------------------------------------------- parsing


def load_ladder(path: str | Path) -> Ladder:
    """Read and validate a ladder file; placeholders are kept (see `resolve_ladder`)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LadderError(source, f"cannot read the ladder file: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LadderError(source, f"not valid YAML: {exc}") from exc
    return parse_ladder(data, source=source)


def parse_ladder(data: Any, source: str = "<ladder>") -> Ladder:
    """Validate an already-loaded YAML document and build a Ladder."""
    if not isinstance(data, dict):
        raise LadderError(source, "the top level must be a mapping with 'name' and 'steps'")
    _check_keys(data, _TOP_KEYS, source, step=None, section="the ladder")
    name = _text(data, "name", source, None)
    description = _optional_text(data, "description", source, None) or ""
    setup = _optional_text(data, "setup", source, None)
    if setup is not None and setup not in SETUP_CHOICES:
        raise LadderError(source, f"'setup' is '{setup}'; allowed: {', '.join(SETUP_CHOICES)}", key="setup")
    raw_steps = data["steps"]
    if not isinstance(raw_steps, list) or not raw_steps:
        raise LadderError(source, "'steps' must be a non-empty list of steps", key="steps")
    steps = tuple(_parse_step(raw, index, source) for index, raw in enumerate(raw_steps))
    _check_unique_names(steps, source)
    return Ladder(name=name, steps=steps, description=description, setup=setup, source=source)


def _parse_step(raw: Any, index: int, source: str) -> LadderStep:
    label = f"#{index + 1}"
    if not isinstance(raw, dict):
        raise LadderError(source, f"step {label} must be a mapping with name, base_url and model")
    if isinstance(raw.get("name"), str) and raw["name"].strip():
        label = raw["name"]
    _check_keys(raw, _STEP_KEYS, source, step=label, section="a step")
    name = _text(raw, "name", source, label)
    base_url = _text(raw, "base_url", source, name)
    _check_url(base_url, source, name, "base_url")
    mode = _optional_text(raw, "mode", source, name) or "chat"
    if mode not in ("chat", "completions"):
        raise LadderError(source, f"'mode' is '{mode}'; use 'chat' or 'completions'", step=name, key="mode")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise LadderError(source, "'metadata' must be a mapping (key: value)", step=name, key="metadata")
    launch = _parse_launch(raw["launch"], base_url, source, name) if raw.get("launch") is not None else None
    return LadderStep(
        name=name,
        base_url=base_url,
        model=_text(raw, "model", source, name),
        mode=mode,  # type: ignore[arg-type]
        launch=launch,
        metadata=dict(metadata),
    )


def _default_health_url(base_url: str) -> str:
    """`/v1/models` of the step's server, however its base_url is spelt (`harness.urls`)."""
    return api_url(base_url, "models")


def _parse_launch(raw: Any, base_url: str, source: str, step: str) -> LaunchSpec:
    if not isinstance(raw, dict):
        raise LadderError(source, "'launch' must be a mapping with at least 'command'", step=step, key="launch")
    _check_keys(raw, _LAUNCH_KEYS, source, step=step, section="'launch'", prefix="launch.")
    health_url = _optional_text(raw, "health_url", source, step, prefix="launch.")
    health_url = health_url or _default_health_url(base_url)
    _check_url(health_url, source, step, "launch.health_url")
    return LaunchSpec(
        command=_parse_command(raw["command"], source, step),
        health_url=health_url,
        startup_timeout_s=_parse_timeout(raw.get("startup_timeout_s"), source, step),
        env=_parse_env(raw.get("env"), source, step),
    )


def _parse_command(raw: Any, source: str, step: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        argv = shlex.split(raw)
    elif isinstance(raw, list) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in raw):
        argv = [str(a) for a in raw]
    else:
        raise LadderError(
            source, "'launch.command' must be a list of arguments or one shell-style string",
            step=step, key="launch.command",
        )
    if not argv:
        raise LadderError(source, "'launch.command' is empty; give the program to run", step=step, key="launch.command")
    return tuple(argv)


def _parse_timeout(raw: Any, source: str, step: str) -> float:
    if raw is None:
        return DEFAULT_STARTUP_TIMEOUT_S
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw <= 0:
        raise LadderError(
            source, f"'launch.startup_timeout_s' must be a positive number of seconds, not {raw!r}",
            step=step, key="launch.startup_timeout_s",
        )
    return float(raw)


def _parse_env(raw: Any, source: str, step: str) -> dict[str, str]:
    if raw is None:
        return {}
    scalar = (str, int, float)
    if not isinstance(raw, dict) or not all(isinstance(v, scalar) and not isinstance(v, bool) for v in raw.values()):
        raise LadderError(
            source, "'launch.env' must map variable names to strings or numbers",
            step=step, key="launch.env",
        )
    return {str(k): str(v) for k, v in raw.items()}


def _check_keys(
    raw: dict[str, Any], spec: dict[str, bool], source: str, step: str | None, section: str, prefix: str = ""
) -> None:
    for key in raw:
        if key not in spec:
            allowed = ", ".join(sorted(spec))
            raise LadderError(
                source, f"unknown key '{prefix}{key}' in {section}; allowed keys: {allowed}. "
                "Fix the spelling or remove it.", step=step, key=f"{prefix}{key}",
            )
    for key, required in spec.items():
        if required and key not in raw:
            raise LadderError(
                source, f"missing required key '{prefix}{key}' in {section}; add it", step=step, key=f"{prefix}{key}"
            )


def _text(raw: dict[str, Any], key: str, source: str, step: str | None, prefix: str = "") -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise LadderError(
            source, f"'{prefix}{key}' must be a non-empty string, not {value!r}", step=step, key=f"{prefix}{key}"
        )
    for match in _PLACEHOLDER.finditer(value):
        if not _PLACEHOLDER_NAME.fullmatch(match.group(1)):
            raise LadderError(
                source, f"'{prefix}{key}' has a malformed placeholder '{match.group(0)}'; use ${{NAME}}",
                step=step, key=f"{prefix}{key}",
            )
    return value


def _optional_text(raw: dict[str, Any], key: str, source: str, step: str | None, prefix: str = "") -> str | None:
    return None if raw.get(key) is None else _text(raw, key, source, step, prefix)


def _check_url(url: str, source: str, step: str, key: str) -> None:
    if _PLACEHOLDER.search(url):
        return  # checked again once resolved
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LadderError(source, f"'{key}' must be an http(s) URL, not {url!r}", step=step, key=key)


def _check_unique_names(steps: tuple[LadderStep, ...], source: str) -> None:
    seen: set[str] = set()
    for step in steps:
        if step.name in seen:
            raise LadderError(
                source, "duplicate step name; every step needs its own name (results are stored under it)",
                step=step.name, key="name",
            )
        seen.add(step.name)


# ---------------------------------------------------------------- placeholders


def resolve_ladder(ladder: Ladder, variables: Mapping[str, str]) -> Ladder:
    """Fill in `${NAME}` placeholders from `variables`; LadderError for any undefined one."""
    return replace(ladder, steps=tuple(_resolve_step(step, variables, ladder.source) for step in ladder.steps))


def _resolve_step(step: LadderStep, variables: Mapping[str, str], source: str) -> LadderStep:
    def fill(text: str, key: str) -> str:
        return _fill(text, variables, source, step.name, key)

    base_url = fill(step.base_url, "base_url")
    _check_url(base_url, source, step.name, "base_url")
    launch = step.launch
    if launch is not None:
        defaulted = launch.health_url == _default_health_url(step.base_url)  # "${URL}" gets its /v1 once filled
        health_url = _default_health_url(base_url) if defaulted else fill(launch.health_url, "launch.health_url")
        _check_url(health_url, source, step.name, "launch.health_url")
        command = tuple(fill(arg, "launch.command") for arg in launch.command)
        _check_command_secrets(launch.command, command, variables, source, step.name)
        launch = replace(
            launch,
            command=command,
            health_url=health_url,
            env={k: fill(v, f"launch.env.{k}") for k, v in launch.env.items()},
        )
    return replace(step, base_url=base_url, model=fill(step.model, "model"), launch=launch)


def _fill(text: str, variables: Mapping[str, str], source: str, step: str, key: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            hint = " (run the embedded engine setup first)" if name in ENGINE_PLACEHOLDERS else " (set it in the environment)"
            raise LadderError(source, f"'{key}' uses ${{{name}}}, which is not defined{hint}", step=step, key=key)
        return str(variables[name])

    return _PLACEHOLDER.sub(one, text)


def _check_command_secrets(
    raw: tuple[str, ...], resolved: tuple[str, ...], variables: Mapping[str, str], source: str, step: str
) -> None:
    """Refuse a launch command that would put a secret in the process list, where every local user reads it."""
    hint = "a command line is visible to every local user (ps); pass it to the server in 'launch.env' instead"
    for arg in raw:
        for name in _PLACEHOLDER.findall(arg):
            if name in SECRET_ENV or is_secret_name(name):
                raise LadderError(source, f"'launch.command' uses ${{{name}}}, a secret; {hint}",
                                  step=step, key="launch.command")
    secrets = {*url_secrets(variables.get(DB_ENV) or ""), variables.get(API_KEY_ENV) or "", *known_secrets()}
    secrets = {value for value in secrets if len(value) >= MIN_SECRET_LEN}
    if any(secret in arg for arg in resolved for secret in secrets):
        raise LadderError(source, f"'launch.command' holds the store password or the API key; {hint}",
                          step=step, key="launch.command")


# The `${NAME}`s the embedded engine provides; `evalsvc.engine.embedded.EngineInfo.placeholders`
# gives their values, in this order. Named here to give a better hint when one is missing.
ENGINE_PLACEHOLDERS = (HOME_ENV, "ENGINE_PYTHON", "SMOLLM2_GGUF", "SMOLLM2_DEEP_GGUF")


def _step_strings(step: LadderStep) -> Iterator[str]:
    yield step.base_url
    yield step.model
    if step.launch is not None:
        yield from step.launch.command
        yield step.launch.health_url
        yield from step.launch.env.values()
