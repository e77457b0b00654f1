"""Errors the user fixes, not the code: ``python -m lit_grpo`` prints them as one ``error:`` line (exit status 1)
instead of a traceback, since their message already names the file, row, folder or endpoint and what to do."""

from __future__ import annotations

import sys


class UserError(Exception):
    """A problem in the run's inputs or surroundings whose message says what is wrong and how to fix it."""


class InputError(UserError, ValueError):
    """A file, row, checkpoint or split the run was given is wrong (names it and what is wrong)."""


class UnwritableFolderError(UserError, PermissionError):
    """A folder the run must write into cannot be written (names it and the reason)."""


class EarlierRunError(UserError, FileExistsError):
    """A new run would overwrite an earlier run's checkpoints (names the folder and how to continue that run)."""


class CheckpointWriteError(UserError, OSError):
    """A checkpoint could not be written (names the file, the reason and the room left in its folder)."""


def fail(message: str, status: int = 2) -> None:
    """Print ``error: <message>`` (API keys masked) as one line on stderr and exit with ``status``."""
    from lit_grpo.api_keys import redact

    line = " ".join(redact(message).split())
    sys.stderr.write(f"error: {line}\n")
    sys.exit(status)


def first_and_more(problems: list[str]) -> str:
    """Several problems as one line: the first in full, then the key each other one names (its first word), e.g.
    ``data.batch_size must be >= 1, got 0 (and 2 more problems: data.num_workers, model.init_args.grpo.beta)``."""
    rest = [p.split(maxsplit=1)[0].rstrip(":") for p in problems[1:] if p.strip()]
    if not rest:
        return problems[0]
    return f"{problems[0]} (and {len(rest)} more problem{'s' * (len(rest) > 1)}: {', '.join(rest)})"
