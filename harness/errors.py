"""The one base class of errors a user can fix, and the exit codes the command line documents.

Domain exceptions (a bad file, an unknown endpoint, a server that does not
answer) subclass `UserError` next to the code that raises them and carry the
context in their message; only the CLI turns one into a single line on stderr
and `exit_code`.
"""

from __future__ import annotations

from typing import ClassVar

from harness.redact import MaskedError

EXIT_OK = 0
EXIT_FAILED = 1  # a run failed (too many item errors, a ladder step did not start), a --fail-on gate tripped,
# or doctor found something a run needs missing
EXIT_USAGE = 2  # something given is wrong: an option, a file, a name, the store
EXIT_UNREACHABLE = 3  # an endpoint does not answer
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); what finished is stored
EXIT_HANGUP = 129  # 128 + SIGHUP: stopped as by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped as by Ctrl-C

RESUME_HINT = "finished items are stored, run the same command to resume"  # said on every interrupt
ERROR_LABEL = "error"  # a command that fails ends with one line on stderr: "error: <what happened and what to do>"

EXIT_CODES = {
    EXIT_OK: "ok",
    EXIT_FAILED: "a run failed, a --fail-on gate tripped, or doctor found something missing",
    EXIT_USAGE: "usage error: an option, file, name or store to fix",
    EXIT_UNREACHABLE: "an endpoint is unreachable",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); finished items are stored, the same command resumes",
    EXIT_HANGUP: "stopped by SIGHUP (terminal closed), as by Ctrl-C",
    EXIT_TERMINATED: "stopped by SIGTERM (kill, timeout, CI cancel), as by Ctrl-C",
}


class UserError(MaskedError):
    """Something the user must change; the message says what and how (masked when made: no URL password or key)."""

    exit_code: ClassVar[int] = EXIT_USAGE
    label: ClassVar[str] = "error"  # the word the command line's one line starts with


class UnreachableError(UserError):
    """A server that should answer does not (connection refused, timed out, name unknown)."""

    exit_code: ClassVar[int] = EXIT_UNREACHABLE
