"""VisualSphinx: the reader of its puzzles, the embedded puzzle generator and its prompt templates, registered
into the core's ``READERS`` (``visualsphinx``), ``GENERATORS`` (``puzzles``) and ``TEMPLATES``
(``visualsphinx_seed``, ``visualsphinx_official``); its rewards (``binary``, ``boxed_format``) are
the core's generic answer rewards (:mod:`lit_grpo.rewards.basic`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable
from annotated_types import Ge

from lit_grpo.data.datamodule import GENERATORS, READERS
from lit_grpo.tasks.visualsphinx import templates  # noqa: F401  (registers the templates)
from lit_grpo.tasks.visualsphinx.puzzles import PuzzleConfig, write_puzzles
from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx

READERS.register("visualsphinx")(read_visualsphinx)


@GENERATORS.register("puzzles")
def _generate_puzzles(path: str, num: Annotated[int, Ge(1)] = 1000, seed: int = 0,
                      progress: Callable[[int], None] | None = None, **cfg: Any) -> Path:
    return write_puzzles(path, num=num, seed=seed, cfg=PuzzleConfig(**cfg), progress=progress)


_generate_puzzles.forwards_to = (PuzzleConfig,)
