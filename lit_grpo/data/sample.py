"""The one record type every dataset yields, image decoding with clear errors, and lazy datasets."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any, Callable, Sequence

from PIL import Image
from torch.utils.data import Dataset

ANSWER_FORMATS = ("mcq", "open")
DEFAULT_MAX_PIXELS = 50_000_000
"""Decompression-bomb guard: images with more pixels are rejected (the largest PhyX image has ~28M)."""


class BadRowError(ValueError):
    """A dataset row that cannot become a :class:`Sample`; the message names the source, row and field."""


@dataclasses.dataclass
class Sample:
    """One prompt's worth of data, whatever the dataset.

    ``options`` maps label -> text (empty for open-ended); ``answer`` is the gold letter (``mcq``) or the
    gold text (``open``); ``domain``/``principle``/``unit`` are the physics labels (``None`` for puzzles).
    """

    id: str
    images: list[Image.Image]
    question: str
    options: dict[str, str]
    answer: str
    answer_format: str = "mcq"
    domain: str | None = None
    principle: str | None = None
    unit: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def columns(self) -> dict[str, Any]:
        """Fields as reward columns (everything, images included)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def decode_image(obj: Any, *, where: str, base_dir: str | Path | None = None,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Decode an image given as PIL, raw bytes, an HF ``{"bytes", "path"}`` dict or a file path, to RGB.

    The format is detected from the bytes (never from the file name). ``where`` names the row for errors.
    Raises:
        BadRowError: missing, unreadable or undecodable image, or more than ``max_pixels`` pixels.
    """
    if isinstance(obj, Image.Image):
        img = obj
    else:
        if isinstance(obj, dict):
            obj = obj.get("bytes") or obj.get("path")
        if obj is None or obj == b"" or obj == "":
            raise BadRowError(f"{where}: image is missing")
        if isinstance(obj, (bytes, bytearray)):
            src: Any = io.BytesIO(obj)
        else:
            path = Path(base_dir or ".") / str(obj)
            if not path.is_file():
                raise BadRowError(f"{where}: image file {path} does not exist")
            src = path
        try:
            img = Image.open(src)
            if img.width * img.height > max_pixels:
                raise BadRowError(
                    f"{where}: image of {img.width}x{img.height} pixels is over the limit of {max_pixels} "
                    "(raise data max_pixels if it is genuine)"
                )
            img.load()
        except BadRowError:
            raise
        except Exception as exc:  # PIL raises many types for corrupt data
            raise BadRowError(f"{where}: image cannot be decoded ({type(exc).__name__}: {exc})") from exc
    return img.convert("RGB") if img.mode != "RGB" else img


class SampleDataset(Dataset):
    """Rows turned into :class:`Sample` on access (images decoded lazily, one row at a time)."""

    def __init__(self, rows: Sequence[Any], to_sample: Callable[[Any, int], Sample], name: str = "dataset"):
        self.rows, self.to_sample, self.name = rows, to_sample, name

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Sample:
        return self.to_sample(self.rows[i], i)


def collate_samples(batch: list[Sample]) -> list[Sample]:
    """Batches are lists of samples; tokenisation happens in the module with the policy's processor."""
    return list(batch)
