"""Every image mode PIL opens is decoded to the RGB a viewer shows (transparency on white, high bit depths scaled,
EXIF orientation applied), or the row is refused by name. Expected pixels are worked out by hand in each row."""

import io

import numpy as np
import pytest
from PIL import Image

from lit_grpo.tasks.attention.meter import foreground_mask
from lit_grpo.data.images import decode_image
from lit_grpo.data.sample import BadRowError

WHITE, BLACK = (255, 255, 255), (0, 0, 0)


def _png(img: Image.Image, **save) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", **save)
    return buf.getvalue()


def _row(mode: str, pixels: list) -> Image.Image:
    img = Image.new(mode, (len(pixels), 1))
    for x, p in enumerate(pixels):
        img.putpixel((x, 0), p)
    return img


def _palette(mode: str, pixels: list) -> Image.Image:
    img = _row(mode, pixels)
    img.putpalette([10, 20, 30, 200, 100, 50] + [0] * 762)
    return img


def _raw16(mode: str, values: list[int]) -> Image.Image:
    order = ">u2" if mode == "I;16B" else "<u2"
    return Image.frombytes(mode, (len(values), 1), np.array(values, dtype=order).tobytes())


# (case, image or encoded bytes, expected RGB of each pixel, tolerance)
CASES = [
    ("1", _png(_row("1", [1, 0])), [WHITE, BLACK], 0),
    ("L", _png(_row("L", [100, 0])), [(100, 100, 100), BLACK], 0),
    # tRNS of a grayscale PNG: value 7 is transparent -> the white page; 100 is opaque
    ("L_transparent_value", _png(_row("L", [7, 100]), transparency=7), [WHITE, (100, 100, 100)], 0),
    # LA on white: v * a/255 + 255 * (1 - a/255); (100, 128) -> 50.196 + 127 = 177.2
    ("LA", _png(_row("LA", [(100, 0), (100, 255), (100, 128)])), [WHITE, (100, 100, 100), (177, 177, 177)], 0),
    # premultiplied: stored 50 = v * a/255, so on white 50 + 255 * (1 - 128/255) = 177
    ("La", _row("La", [(50, 128), (0, 0)]), [(177, 177, 177), WHITE], 1),
    ("P", _png(_palette("P", [0, 1])), [(10, 20, 30), (200, 100, 50)], 0),
    ("P_transparent_index", _png(_palette("P", [0, 1]), transparency=0), [WHITE, (200, 100, 50)], 0),
    ("PA", _palette("PA", [(1, 0), (1, 255)]), [WHITE, (200, 100, 50)], 0),
    ("RGB_transparent_colour", _png(_row("RGB", [(10, 20, 30), (1, 2, 3)]), transparency=(10, 20, 30)),
     [WHITE, (1, 2, 3)], 0),
    # (0, 0, 0, 128) on white: 255 * 127/255 = 127
    ("RGBA", _png(_row("RGBA", [(0, 0, 0, 0), (200, 100, 50, 255), (0, 0, 0, 128)])),
     [WHITE, (200, 100, 50), (127, 127, 127)], 0),
    ("RGBa", _row("RGBa", [(50, 50, 50, 128)]), [(177, 177, 177)], 1),
    ("RGBX", _row("RGBX", [(10, 20, 30, 0)]), [(10, 20, 30)], 0),  # X is padding, not alpha
    # 16-bit: v * 255 / 65535 = v / 257: 771 -> 3, 65535 -> 255, 32896 -> 128
    ("I;16_png", _png(Image.fromarray(np.array([[771, 65535, 32896, 0]], dtype=np.uint16))),
     [(3, 3, 3), WHITE, (128, 128, 128), BLACK], 0),
    *[(f"{m}_raw", _raw16(m, [771, 65535, 32896]), [(3, 3, 3), WHITE, (128, 128, 128)], 0)
      for m in ("I;16", "I;16L", "I;16B", "I;16N")],
    ("I_16bit_values", Image.fromarray(np.array([[65535, 25700]], dtype=np.int32)), [WHITE, (100, 100, 100)], 0),
    # float in [0, 1]: 0.25 * 255 = 63.75 -> 64
    ("F_unit_range", Image.fromarray(np.array([[0.25, 1.0, 0.0]], dtype=np.float32)),
     [(64, 64, 64), WHITE, BLACK], 0),
    # CMYK: (255 - K) * (1 - C/255): C=255 -> R 0; K=128 -> 127
    ("CMYK", _row("CMYK", [(0, 0, 0, 0), (255, 0, 0, 0), (0, 0, 0, 255), (0, 0, 0, 128)]),
     [WHITE, (0, 255, 255), BLACK, (127, 127, 127)], 0),
    # JFIF: R = Y + 1.402 (Cr - 128) = 254.05; G = Y - 0.344 (Cb - 128) - 0.714 (Cr - 128) = 0.1; B = Y + 1.772 (Cb -
    # 128) = -0.2
    ("YCbCr", _row("YCbCr", [(128, 128, 128), (76, 85, 255)]), [(128, 128, 128), (254, 0, 0)], 1),
    # hue 85/255 of the circle = 120 degrees: green; 170/255 = 240: blue; saturation 0: grey of the value
    ("HSV", _row("HSV", [(0, 255, 255), (85, 255, 255), (170, 255, 255), (0, 0, 128)]),
     [(255, 0, 0), (0, 255, 0), (0, 0, 255), (128, 128, 128)], 1),
    # CIELAB (D50 white, as ICC and TIFF define it), L* scaled to 0..255, a* and b* offset by 128: L* 100 -> white;
    # sRGB red is L* 54.29, a* 80.81, b* 69.89 under D50 (Lindbloom's tables) -> (138, 209, 198) in 8 bits
    ("LAB", _row("LAB", [(255, 128, 128), (138, 209, 198), (0, 128, 128)]), [WHITE, (255, 0, 0), BLACK], 6),
]


@pytest.mark.parametrize("image,expected,tol", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_mode_decodes_to_what_a_viewer_shows(image, expected, tol):
    rgb = decode_image(image, where="t row 0")
    assert rgb.mode == "RGB" and rgb.size == (len(expected), 1)
    got = [rgb.getpixel((x, 0)) for x in range(len(expected))]
    assert np.abs(np.array(got, dtype=int) - np.array(expected)).max() <= tol, got


@pytest.mark.parametrize("orientation,size,pixels", [
    (1, (2, 1), [(255, 0, 0), (0, 0, 255)]),
    (3, (2, 1), [(0, 0, 255), (255, 0, 0)]),  # upside down: left and right swap
    (6, (1, 2), [(255, 0, 0), (0, 0, 255)]),  # shown turned 90 degrees clockwise: the left end goes up
    (8, (1, 2), [(0, 0, 255), (255, 0, 0)]),  # 90 degrees counter-clockwise: the left end goes down
])
def test_the_exif_orientation_is_applied(orientation, size, pixels):
    """A 2x1 picture (red, blue) whose EXIF says how the camera was held."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    rgb = decode_image(_png(_row("RGB", [(255, 0, 0), (0, 0, 255)]), exif=exif), where="t row 0")
    assert rgb.size == size
    assert [rgb.getpixel(xy) for xy in ([(0, 0), (1, 0)] if size == (2, 1) else [(0, 0), (0, 1)])] == pixels


@pytest.mark.parametrize("image,message", [
    (Image.fromarray(np.array([[70000, 3]], dtype=np.int32)),
     "t row 3 (id p): field 'images': 32-bit integer image with values 3..70000: only 0..65535 (16-bit) has a "
     "viewer convention"),
    (Image.fromarray(np.array([[-1, 0]], dtype=np.int32)), "32-bit integer image with values -1..0"),
    (Image.fromarray(np.array([[0.5, 2.5]], dtype=np.float32)),
     "t row 3 (id p): field 'images': 32-bit float image with 0.5..2.5: only floats in [0, 1] have a viewer "
     "convention"),
    (Image.fromarray(np.array([[0.5, np.nan]], dtype=np.float32)),
     "32-bit float image with values that are not finite"),
], ids=["int_over_16_bit", "negative_int", "float_over_1", "float_nan"])
def test_values_with_no_viewer_convention_are_refused_by_name(image, message):
    with pytest.raises(BadRowError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)").replace(".", r"\.")):
        decode_image(image, where="t row 3 (id p): field 'images'")


def test_a_transparent_background_is_background_for_the_attention_reward():
    """An RGBA figure: a dark 4x4 square (opaque) on a 8x8 transparent background stored as black. A viewer shows
    it on white: 48 of 64 pixels are background (all channels >= 230)."""
    img = Image.new("RGBA", (8, 8), (0, 0, 0, 0))
    img.paste((40, 40, 40, 255), (2, 2, 6, 6))
    rgb = decode_image(_png(img), where="t")
    assert int((~foreground_mask(rgb)).sum()) == 48
    assert int((~foreground_mask(img.convert("RGB"))).sum()) == 0  # what a plain convert gave: no background at all


def test_a_16_bit_png_in_a_dataset_reads_as_its_grey_levels(tmp_path):
    """A VisualSphinx parquet whose image is a 16-bit grayscale PNG (values 771..65535) reads as 3..255."""
    import pandas as pd

    from lit_grpo.tasks.visualsphinx.reader import read_visualsphinx

    png = _png(Image.fromarray(np.array([[771, 65535], [32896, 12850]], dtype=np.uint16)))
    pd.DataFrame([{"id": "a", "images": [{"bytes": png, "path": None}], "problem": "Which?", "choice":
                   '{"A": "A", "B": "B"}', "answer": "A"}]).to_parquet(tmp_path / "t.parquet")
    image = read_visualsphinx(str(tmp_path / "t.parquet"))[0].images[0]
    assert np.asarray(image)[:, :, 0].tolist() == [[3, 255], [128, 50]]  # 12850 / 257 = 50
