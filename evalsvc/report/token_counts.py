"""Unknown token counts: which runs have too many to be read without a warning.

An endpoint's token count that is not a plausible integer is stored as
unknown (NULL, with the reason in `items.response_issue`; `harness.response`
decides what is plausible). Unknown is not zero: every length and task-time
figure leaves such items out and says how many (`timing` drops pairs without
a count and counts them), and a run where more than `WARN_SHARE` of the
answered items have no count is named at the top of `show`, `report` and the
dashboard, because its length figures rest on a chosen subset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from db import queries

WARN_SHARE = 0.05


@dataclass(frozen=True)
class TokenWarning:
    """Run `run_id` has `unknown` answered items of `answered` without a valid completion token count."""

    run_id: int
    endpoint: str
    task: str
    unknown: int
    answered: int

    @property
    def share(self) -> float:
        return self.unknown / self.answered

    def describe(self) -> str:
        return (f"warning: run {self.run_id} ({self.endpoint} {self.task}): {self.unknown} of {self.answered} "
                f"answered items ({self.share:.0%}) have no valid token count from the endpoint; they are left out "
                f"of output-length and task-time figures (`evalsvc show {self.run_id}` says why)")

    def to_dict(self) -> dict[str, int | str | float]:
        return {"run_id": self.run_id, "endpoint": self.endpoint, "task": self.task, "unknown": self.unknown,
                "answered": self.answered, "share": self.share}


def token_warning(summary: queries.RunSummary) -> TokenWarning | None:
    """A warning when more than WARN_SHARE of the run's answered items have an unknown token count."""
    answered = summary.n - summary.errors
    if not answered or summary.unknown_tokens / answered <= WARN_SHARE:
        return None
    return TokenWarning(summary.run_id, summary.endpoint, summary.task, summary.unknown_tokens, answered)


def token_warnings(session: Session, run_ids: Sequence[int]) -> list[TokenWarning]:
    """The warnings of these runs, in run order."""
    summaries = queries.summarize_runs(session, sorted(set(run_ids)))
    return [w for w in map(token_warning, summaries) if w is not None]
