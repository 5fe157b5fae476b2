"""Record the launch flags of one SGLang release as data: evalsvc/ladder/builtin/sglang_server_args.json.

The GPU ladder's test checks every flag and value of every step against this
file, so a ladder cannot name a flag or a choice the named SGLang does not
have. The flags come from SGLang's own argument parser (`ServerArgs.add_cli_args`
building an `argparse.ArgumentParser`), not from reading its source by eye.

SGLang's import chain pulls in torch, triton and CUDA-only packages that a CPU
machine does not have; none of them decide a flag's name or its choices, so
they are replaced by inert stand-ins while the parser is built. Run it in a
throwaway venv, from the unpacked wheel of the release:

    pip download sglang==0.5.23 --no-deps -d /tmp/sgl && cd /tmp/sgl && unzip -q sglang-*.whl
    python -m venv /tmp/sgl/venv
    /tmp/sgl/venv/bin/pip install msgspec orjson psutil pybase64 requests pydantic pyyaml numpy
    SGLANG_USE_CPU_ENGINE=1 PYTHONPATH=/tmp/sgl /tmp/sgl/venv/bin/python tools/record_sglang_server_args.py \\
        --wheel /tmp/sgl/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl > evalsvc/ladder/builtin/sglang_server_args.json

Choices that SGLang checks only after parsing (the speculative algorithm, the
draft attention backend) are read from the lists it checks them against and
recorded under `resolution_choices`.
"""

from __future__ import annotations

import abc
import argparse
import hashlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path
from typing import Any

# Modules that SGLang imports but that do not shape the argument parser.
DEFAULT_STUBS = ("torch", "triton", "packaging", "PIL", "starlette", "zmq", "tqdm", "IPython", "aiohttp")
# Device probes answer "absent", so no accelerator code path runs at import time.
ABSENT_ATTRIBUTES = {"npu", "hpu", "xpu", "musa", "mlu", "sail"}


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _StubMeta(abc.ABCMeta):
    """Classes standing in for any attribute of a stubbed module: subclassable, callable, inert."""

    def __getattr__(cls, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return stub_class(name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]  # used as a decorator: keep the decorated function
        return super().__call__()

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__

    def __int__(cls) -> int:
        return 0

    def __index__(cls) -> int:
        return 0

    def __float__(cls) -> float:
        return 0.0

    def __bool__(cls) -> bool:
        return False

    def __iter__(cls) -> Any:
        return iter(())

    def __lt__(cls, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __add__(cls, other: Any) -> Any:
        return cls

    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __and__ = __add__


class _StubInstance(metaclass=_StubMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return stub_class(name)()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return stub_class("call")()

    def __getitem__(self, item: Any) -> Any:
        return self

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.0

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


def stub_class(name: str) -> type:
    return _StubMeta(str(name), (_StubInstance,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if _dunder(name) or name in ABSENT_ATTRIBUTES:
            raise AttributeError(name)
        value = stub_class(name)
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, tops: set[str]) -> None:
        self.tops = tops

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] not in self.tops:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _type_name(action: argparse.Action) -> str | None:
    kind = action.type
    if kind is None:
        return None if action.nargs == 0 else "str"
    return getattr(kind, "__name__", type(kind).__name__)


def record_flags(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """Every option string of the parser with what it accepts."""
    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        for option in action.option_strings:
            flags[option] = {
                "dest": action.dest,
                "takes_value": action.nargs != 0,
                "nargs": action.nargs if isinstance(action.nargs, (str, int)) else None,
                "type": _type_name(action),
                "choices": sorted(str(c) for c in action.choices) if action.choices is not None else None,
                "deprecated": "Deprecated" in type(action).__name__,
            }
    return dict(sorted(flags.items()))


def record(wheel: Path | None, stubs: set[str]) -> dict[str, Any]:
    sys.meta_path.append(_StubFinder(stubs))
    import sglang.version
    from sglang.srt.arg_groups.choices import DRAFT_ATTENTION_BACKEND_CHOICES
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import _RESERVED_ALIASES, SpeculativeAlgorithm

    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    algorithms = sorted({a.name for a in SpeculativeAlgorithm if a.name != "NONE"} | set(_RESERVED_ALIASES))
    return {
        "sglang_version": sglang.version.__version__,
        "source": {
            "wheel": wheel.name if wheel else None,
            "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest() if wheel else None,
            "how": "argparse.ArgumentParser filled by sglang.srt.server_args.ServerArgs.add_cli_args, "
            f"third-party imports stubbed ({', '.join(sorted(stubs))}); tools/record_sglang_server_args.py",
        },
        "resolution_choices": {
            "--speculative-algorithm": {
                "choices": algorithms,
                "checked_by": "sglang.srt.speculative.spec_info.SpeculativeAlgorithm.from_string (upper-cased)",
            },
            "--speculative-draft-attention-backend": {
                "choices": sorted(DRAFT_ATTENTION_BACKEND_CHOICES),
                "checked_by": "sglang.srt.speculative.draft_worker_common.resolve_draft_worker_attention_backend "
                "(any other name falls back to flashinfer with only a log warning)",
            },
        },
        "flags": record_flags(parser),
    }


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--wheel", type=Path, help="the wheel the sources were unpacked from, for its name and sha256")
    cli.add_argument("--stub", default=",".join(DEFAULT_STUBS), help="top-level modules to stand in for")
    args = cli.parse_args()
    data = record(args.wheel, set(filter(None, args.stub.split(","))))
    sys.stdout.write(to_json(data))


def to_json(data: dict[str, Any]) -> str:
    """Indented JSON with one line per flag, so a version bump reads as a short diff."""
    flags = data["flags"]
    head = json.dumps({k: v for k, v in data.items() if k != "flags"}, indent=1)
    lines = [f" {json.dumps(name)}: {json.dumps(spec)}" for name, spec in flags.items()]
    return head[:-2] + ',\n "flags": {\n' + ",\n".join(" " + line for line in lines) + "\n }\n}\n"


if __name__ == "__main__":
    main()
