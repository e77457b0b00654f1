"""Images decoded as a viewer shows them: every mode PIL opens becomes that RGB picture, or the row is refused.

PIL's ``convert("RGB")`` is right for most modes (``1``, ``L``, ``P``, ``CMYK``, ``YCbCr``, ``LAB``, ``HSV``,
``RGBX``) and is used for them. It is wrong for two kinds, which are handled here:

- **Transparency** (``RGBA``, ``LA``, ``PA``, premultiplied ``RGBa`` / ``La``, and ``P`` / ``L`` / ``RGB`` with a
  transparent colour): ``convert("RGB")`` drops the alpha and shows what the transparent pixels happen to store
  (black, mostly); a viewer shows the background through them. They are composited on white
  (``Image.alpha_composite``), the page a figure is drawn on, which the attention reward reads as background.
- **High bit depths**: ``convert`` clips 16-bit values (``I;16`` and its byte orders, ``I`` holding 16-bit data) at
  255, so a 16-bit grayscale PNG becomes all white, and reads float (``F``) as 0..255. They are scaled: 16-bit
  values by 255 / 65535, floats in [0, 1] by 255. Values with no such convention (``I`` outside 0..65535, ``F``
  outside [0, 1] or not finite) are refused by name, never clipped.

The EXIF orientation a camera records is applied (a viewer shows the photo upright). Embedded ICC colour profiles
are not applied.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from lit_grpo.data.sample import BadRowError

DEFAULT_MAX_PIXELS = 50_000_000
"""Decompression-bomb guard: images with more pixels are rejected (the largest PhyX image has ~28M)."""
SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")
ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
EXIF_ORIENTATION = 0x0112


def dataset_folder(path: str | Path) -> Path | None:
    """The folder a dataset's image paths are read inside: ``path`` itself when it is a folder, a local file's
    folder, ``None`` for a hub id (the working folder then)."""
    local = Path(path)
    return local if local.is_dir() else local.parent if local.exists() else None


def decode_image(obj: Any, *, where: str, base_dir: str | Path | None = None,
                 max_pixels: int = DEFAULT_MAX_PIXELS, outside_root: bool = False) -> Image.Image:
    """Decode an image given as PIL, raw bytes, an HF ``{"bytes", "path"}`` dict or a file path, to the RGB a viewer
    shows (:func:`viewer_rgb`).

    A path is read relative to ``base_dir`` (the dataset's folder; default: the working folder) and must stay inside
    it once resolved (``..``, an absolute path and a symbolic link leading out are refused) unless ``outside_root``.
    The format is detected from the bytes (never from the file name). ``where`` names the row for errors.
    Raises:
        BadRowError: missing, unreadable or undecodable image, a path leading out of ``base_dir``, more than
        ``max_pixels`` pixels, or pixel values with no viewer convention.
    """
    if isinstance(obj, Image.Image):
        img = obj
    else:
        img = _open(obj, where, base_dir, max_pixels, outside_root)
    return viewer_rgb(img, where)


def _open(obj: Any, where: str, base_dir: str | Path | None, max_pixels: int,
          outside_root: bool = False) -> Image.Image:
    if isinstance(obj, dict):
        obj = obj.get("bytes") or obj.get("path")
    if obj is None or obj == b"" or obj == "":
        raise BadRowError(f"{where}: image is missing")
    if isinstance(obj, (bytes, bytearray)):
        src: Any = io.BytesIO(obj)
    else:
        root = Path(base_dir or ".")
        path = root / str(obj)
        if not outside_root and not path.resolve().is_relative_to(root.resolve()):
            raise BadRowError(f"{where}: image path {str(obj)!r} leads out of the dataset's folder {root.resolve()}: "
                              "images are read inside it (set the reader's images_outside_root: true to allow "
                              "paths elsewhere)")
        if not path.is_file():
            raise BadRowError(f"{where}: image file {path} does not exist")
        src = path
    try:
        img = Image.open(src)
        if img.width * img.height > max_pixels:
            raise BadRowError(f"{where}: image of {img.width}x{img.height} pixels is over the limit of {max_pixels} "
                              "(raise data max_pixels if it is genuine)")
        img.load()
    except BadRowError:
        raise
    except Image.DecompressionBombError as exc:
        raise BadRowError(f"{where}: image is over PIL's decompression-bomb limit ({exc})") from exc
    except Exception as exc:  # PIL raises many types for corrupt data
        what = f"image file {src}" if isinstance(src, Path) else "image"
        raise BadRowError(f"{where}: {what} cannot be decoded ({type(exc).__name__}: {exc})") from exc
    return img


def viewer_rgb(img: Image.Image, where: str = "image") -> Image.Image:
    """``img`` as the RGB picture a viewer shows: upright (EXIF orientation), transparency composited on white,
    high bit depths scaled (see the module docstring).

    Raises:
        BadRowError: a mode PIL cannot convert, or values with no viewer convention (named with ``where``).
    """
    if img.getexif().get(EXIF_ORIENTATION, 1) != 1:
        img = ImageOps.exif_transpose(img)
    if img.mode in SIXTEEN_BIT or img.mode in ("I", "F"):
        img = Image.fromarray(_eight_bit(img, where))  # uint8, 2-D: mode L
    if img.mode in ALPHA_MODES or (img.mode in ("P", "L", "RGB") and "transparency" in img.info):
        rgba = (img.convert("LA") if img.mode == "La" else img).convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    if img.mode == "RGB":
        return img
    try:
        return img.convert("RGB")
    except (ValueError, OSError) as exc:
        raise BadRowError(f"{where}: image mode {img.mode!r} cannot be shown as RGB ({exc}); convert the file to "
                          "8-bit RGB, grayscale or RGBA") from None


def _eight_bit(img: Image.Image, where: str) -> np.ndarray:
    """The 8-bit grayscale of a 16-bit, 32-bit integer or float image: 16-bit values (0..65535) times 255 / 65535,
    rounded; floats in [0, 1] times 255, rounded.

    Raises:
        BadRowError: integers outside 0..65535, or floats outside [0, 1] or not finite.
    """
    values = np.asarray(img)
    if img.mode == "F":
        finite = bool(np.isfinite(values).all())
        if not finite or values.min() < 0 or values.max() > 1:
            span = f"{values.min():g}..{values.max():g}" if finite else "values that are not finite"
            raise BadRowError(f"{where}: 32-bit float image with {span}: only floats in [0, 1] have a viewer "
                              "convention (1 = white); rescale it, or save it as 8- or 16-bit")
        return np.floor(values.astype(np.float64) * 255 + 0.5).astype(np.uint8)
    values = values.astype(np.int64)
    if values.min() < 0 or values.max() > 65535:
        raise BadRowError(f"{where}: 32-bit integer image with values {values.min()}..{values.max()}: only 0..65535 "
                          "(16-bit) has a viewer convention; save it as 8- or 16-bit")
    return ((values * 255 + 32767) // 65535).astype(np.uint8)
