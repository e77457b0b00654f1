"""The physical-reasoning paper on PhyX: reader and writer, physics generators, rewards (format, accuracy,
rubric, judge, PhyX's official scorer), units and the experiments that make its table. Importing it registers
the ``phyx`` reader, the ``physics`` generator, the accuracy table's fields, the templates ``physics_rubric`` and
``phyx_official``, the SFT reference ``physics_tags`` and the rewards ``open_accuracy``, ``rubric`` and
``phyx_official`` (``format`` and ``accuracy`` are the core's, :mod:`lit_grpo.rewards.basic`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from annotated_types import Ge

from lit_grpo.data.datamodule import GENERATORS, READERS
from lit_grpo.evaluation import TABLE_GROUPS
from lit_grpo.tasks.phyx import equivalence, judged, official  # noqa: F401  (they register the rewards)
from lit_grpo.tasks.phyx import templates  # noqa: F401  (registers the templates and the SFT reference)
from lit_grpo.tasks.phyx.physics import write_physics
from lit_grpo.tasks.phyx.reader import DOMAINS, REASONING_TYPES, read_phyx

READERS.register("phyx")(read_phyx)
TABLE_GROUPS.register("domain")(DOMAINS)  # the paper's table: accuracy per domain, then per reasoning type
TABLE_GROUPS.register("reasoning_type")(REASONING_TYPES)


@GENERATORS.register("physics")
def _generate_physics(path: str, num: Annotated[int, Ge(1)] = 256, seed: int = 0, **cfg: Any) -> Path:
    """Embedded PhyX-like physics problems; the layout follows the file name (``.parquet`` default
    layout, ``.jsonl`` raw layout with ``images/`` beside it)."""
    return write_physics(path, num=num, seed=seed, **cfg)


_generate_physics.forwards_to = (write_physics,)
