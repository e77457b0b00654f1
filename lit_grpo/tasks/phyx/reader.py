"""PhyX reader: the three published layouts become :class:`Sample` records, in MCQ or open-ended form.

Layouts (the published PhyX files), detected from the columns (or forced with ``layout``):

- ``default``: parquet with ``id``, ``question``, ``question_description``,
  ``question_description_simplified``, ``options`` (list of ``"A: ..."``), ``answer`` (letter), ``image``
  (bytes embedded in the parquet), ``image_caption``, ``category``, ``subfield``, ``reasoning_type``.
- ``raw``: JSONL with ``index``, ``question``, ``question_simply``, ``question_description``, ``options``
  as ONE string ``A:"7.55N",B:"5.55N",...`` (split on the ``,<LETTER>:"`` boundaries, never with a
  literal parser), ``answer``, ``image`` (file name in an image folder), ``category``, ...
- ``prerendered``: the evaluation files (parquet or TSV, MC and OE) with ``index``, ``question`` (the whole
  official prompt), ``answer`` (MC: letter; OE: the correct option's text), ``image`` (base64), ...

Every item gives both forms: ``answer_format="mcq"`` (options, gold letter) or ``"open"`` (no options,
gold = the correct option's text, stripped). ``question`` is the problem text of the chosen variant,
``"{description} {question}"``, without any instruction (templates add those). Domains are
normalised to :data:`DOMAINS`; ``principle`` = ``subfield``; ``unit`` = the unit derived from the gold
text with pint (raw string; the parsed unit's canonical name is ``meta["unit_parsed"]``);
``meta["reasoning_type"]`` lists the reasoning types; ``meta["answer_raw"]`` keeps the gold exactly as
stored (175 PhyX OE answers end in a space, which the official substring rule sees); a ``solution``
column (not a PhyX column; the embedded readable set has one) goes to ``meta["solution"]``.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Any, Callable

from torch.utils.data import ConcatDataset

from lit_grpo.data.io import open_table
from lit_grpo.data.images import DEFAULT_MAX_PIXELS, dataset_folder, decode_image
from lit_grpo.data.sample import BadRowError, Sample, SampleDataset, load_rows, text_row
from lit_grpo.tasks.phyx.templates import MC_INSTRUCTION, OE_INSTRUCTION
from lit_grpo.tasks.phyx.units import derive_unit

DOMAINS = ("Mechanics", "Electromagnetism", "Thermodynamics", "Wave/Acoustics", "Optics", "Modern Physics")
"""The six PhyX domains, canonical spelling (papers print ``Wave/Acoustics``; the data says ``Waves/Acoustics``)."""
_DOMAIN_SPELLINGS = {**{d.lower(): d for d in DOMAINS},
                     "waves/acoustics": "Wave/Acoustics", "waves & acoustics": "Wave/Acoustics"}
REASONING_TYPES = ("Physical Model Grounding Reasoning", "Spatial Relation Reasoning", "Multi-Formula Reasoning",
                   "Implicit Condition Reasoning", "Numerical Reasoning", "Predictive Reasoning")
LAYOUTS = ("default", "raw", "prerendered")
QUESTION_VARIANTS = {  # variant -> its description column, by the names the published files and forks use
    "simplified": ("question_description_simplified", "question_simply", "question_simplified"),
    "full": ("question_description", "description"),
    "minimal": (),  # the question only
}
IMAGE_FOLDERS = ("images", "{split}_image", "{split}/{split}_image", "test_image", "test/test_image", ".")
"""Where the raw layout's images are looked for, relative to the JSONL's folder, in order (mirrors keep them in
``images/``, next to the file, or under ``test/test_image/``)."""
_OPTION_START = re.compile(r'\s*A\s*:\s*"')


def canonical_domain(name: Any) -> str:
    """One canonical domain for any published spelling (``Waves/Acoustics``, ``Waves & Acoustics`` ...).

    Raises:
        ValueError: unknown or missing domain (lists the valid ones).
    """
    key = re.sub(r"\s+", " ", str(name or "")).strip().lower()
    if key not in _DOMAIN_SPELLINGS:
        raise ValueError(f"unknown domain {name!r}; expected one of {', '.join(DOMAINS)}")
    return _DOMAIN_SPELLINGS[key]


def _split_at_labels(body: str, boundary: Callable[[str], str]) -> dict[str, str]:
    """Option texts from ``body`` (the text of option A onwards): cut at ``boundary(label)`` (a regex) of the
    next expected label, B, C, ..., until it is not found; ``{"A": ..., "B": ..., ...}``."""
    out, label = {}, "A"
    while True:
        nxt = chr(ord(label) + 1)
        b = re.search(boundary(nxt), body)
        if b is None:
            out[label] = body
            return out
        out[label], body, label = body[:b.start()], body[b.end():], nxt


def parse_options_string(text: str) -> dict[str, str]:
    """The raw layout's one-string options ``A:"7.55N",B:"5.55N",...`` -> ``{"A": "7.55N", ...}``.

    Splits on the ``",<LETTER>:"`` boundary of the next expected label (B, C, ...) and drops the final
    ``"``; text inside an option is kept verbatim (commas, quotes, a trailing backslash, spaces).
    Raises:
        ValueError: not starting with ``A:"``, not ending with ``"``, or fewer than two options.
    """
    m = _OPTION_START.match(text or "")
    end = text.rstrip() if text else ""
    if m is None or not end.endswith('"') or len(end) <= m.end():
        raise ValueError(f'options must look like A:"...",B:"...", got {text!r:.80}')
    out = _split_at_labels(end[m.end():-1], lambda label: rf'"\s*,\s*{label}\s*:\s*"')
    if len(out) < 2:
        raise ValueError(f"options must hold at least two options, got {text!r:.80}")
    return out


def parse_option_list(items: Any) -> dict[str, str]:
    """The default layout's ``["A: 7.55N", "B: 5.55N", ...]`` -> ``{"A": "7.55N", ...}`` (labels in order)."""
    if not isinstance(items, (list, tuple)) or len(items) < 2:
        raise ValueError(f"options must be a list of at least two 'A: ...' strings, got {items!r:.80}")
    out = {}
    for k, item in enumerate(items):
        label = chr(ord("A") + k)
        m = re.match(rf"\s*{label}\s*:\s?", str(item))
        if m is None:
            raise ValueError(f"option {k} must start with '{label}:', got {item!r:.60}")
        out[label] = str(item)[m.end():]
    return out


def parse_rendered_options(text: str) -> dict[str, str]:
    """The options part of an official MC prompt, ``"A: x B: y C: z D: w"`` -> ``{"A": "x", ...}``.

    The inverse of :func:`lit_grpo.tasks.phyx.templates.render_options` when no option text contains
    ``" <next letter>: "``.
    """
    if not text.startswith("A: "):
        raise ValueError(f"rendered options must start with 'A: ', got {text!r:.60}")
    out = _split_at_labels(text[3:], lambda label: rf"\s{label}: ")
    if len(out) < 2:
        raise ValueError(f"rendered options must hold at least two options, got {text!r:.60}")
    return out


def parse_reasoning_types(value: Any) -> list[str]:
    """A list, a list's text (``"['Numerical Reasoning']"``, as TSV files store it) or a comma list -> names."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    text = str(value).strip()
    if text.startswith("["):
        return [a or b for a, b in re.findall(r"'([^']*)'|\"([^\"]*)\"", text) if (a or b).strip()]
    return [p.strip() for p in re.split(r"[,;]", text) if p.strip()]


def detect_layout(columns: list[str]) -> str:
    """``prerendered`` without ``options``; ``default`` with ``id`` or the simplified-description column; else ``raw``."""
    if "options" not in columns:
        return "prerendered"
    return "default" if "id" in columns or "question_description_simplified" in columns else "raw"


def _text(row: dict, field: str) -> str:
    value = row.get(field)
    return "" if value is None else str(value)


def description_column(columns: Any, variant: str) -> str | None:
    """The column holding ``variant``'s description among ``columns`` (the first name of
    :data:`QUESTION_VARIANTS` present), or ``None`` (``minimal``, or no such column)."""
    return next((c for c in QUESTION_VARIANTS[variant] if c in columns), None)


def problem_text(row: dict, variant: str) -> str:
    """``"{description} {question}"`` of the chosen variant (default or raw layout; empty parts dropped)."""
    column = description_column(row, variant)
    parts = [_text(row, column).strip() if column else "", _text(row, "question").strip()]
    return " ".join(p for p in parts if p)


def _split_prompt(prompt: str) -> tuple[str, dict[str, str] | None]:
    """A pre-rendered prompt -> (problem text, options or None for an OE prompt)."""
    if MC_INSTRUCTION in prompt:
        head, tail = prompt.split(MC_INSTRUCTION, 1)
        return head, parse_rendered_options(tail)
    if prompt.endswith(OE_INSTRUCTION):
        return prompt[: -len(OE_INSTRUCTION)], None
    raise ValueError("the prompt holds neither the official MC nor the official OE instruction")


def phyx_fields(row: dict[str, Any], index: int, *, layout: str, where: str, answer_format: str | None,
                variant: str) -> dict[str, Any]:
    """Every :class:`Sample` field of one row except the images, validated.

    Raises:
        BadRowError: missing question or answer, malformed ``options``, an answer that is not an
        option, unknown domain; the message names ``where`` (file, row, id) and the field.
    """
    def bad(field: str, what: str) -> BadRowError:
        return BadRowError(f"{where}: field {field!r} {what}")

    row = text_row(row, where)
    stored = row.get("answer")
    if stored is None or str(stored).strip() == "":
        raise bad("answer", "is missing")
    stored = str(stored)
    try:
        domain = canonical_domain(row.get("category"))
    except ValueError as exc:
        raise bad("category", f"is not a PhyX domain: {exc}") from None
    try:
        if layout == "prerendered":
            question, options = _split_prompt(_text(row, "question"))
        else:
            question = problem_text(row, variant)
            raw = row.get("options")
            options = parse_option_list(raw) if layout == "default" else parse_options_string(_text(row, "options"))
    except ValueError as exc:
        raise bad("options" if layout != "prerendered" else "question", f"is malformed: {exc}") from None
    if not question.strip():
        raise bad("question", "is missing")
    fmt = answer_format or ("mcq" if options is not None else "open")
    if options is None:  # a pre-rendered OE row: the stored answer is the gold text
        if fmt == "mcq":
            raise bad("answer", "is open-ended text in an OE file; read it with answer_format: open")
        gold_text = stored
    else:
        if stored.strip() not in options:
            raise bad("answer", f"{stored!r} is not one of the options {sorted(options)}")
        gold_text = options[stored.strip()]
    if not gold_text.strip():
        raise bad("options", f"holds an empty text for the correct option {stored.strip()!r}")
    unit, parsed = derive_unit(gold_text)
    mcq = fmt == "mcq"
    return {
        "id": str(row.get("id", row.get("index", index))),
        "question": question.strip(),
        "options": dict(options) if mcq else {},
        "answer": stored.strip() if mcq else gold_text.strip(),
        "answer_format": fmt,
        "fields": {"domain": domain, "principle": _text(row, "subfield").strip() or None, "unit": unit},
        "meta": {"reasoning_type": parse_reasoning_types(row.get("reasoning_type")),
                 "unit_parsed": None if parsed is None else str(parsed),
                 "answer_raw": stored if (mcq or options is None) else gold_text,
                 **({"solution": str(row["solution"])} if row.get("solution") else {})},
    }


def _image_source(row: dict, layout: str, where: str, image_dirs: list[Path], outside_root: bool = False) -> Any:
    image = row.get("image")
    if layout == "raw" and isinstance(image, str) and image:
        if not outside_root and (Path(image).is_absolute() or ".." in Path(image).parts):
            raise BadRowError(f"{where}: field 'image' {image!r} must be a file name inside the image folder")
        folder = next((d for d in image_dirs if (d / image).is_file()), None)
        if folder is None:
            raise BadRowError(f"{where}: field 'image': image file {image!r} does not exist in "
                              f"{', '.join(str(d) for d in image_dirs)}; set reader_args.image_dir")
        if not outside_root and not (folder / image).resolve().is_relative_to(folder.resolve()):
            raise BadRowError(f"{where}: field 'image': image path {str(folder / image)!r} leads out of the image "
                              f"folder {folder.resolve()} (to {(folder / image).resolve()}): images are read inside "
                              "it (set the reader's images_outside_root: true to allow paths elsewhere)")
        return str(folder / image)
    if layout == "prerendered" and isinstance(image, str) and image:
        try:
            return base64.b64decode(image, validate=True)
        except (binascii.Error, ValueError):
            raise BadRowError(f"{where}: field 'image' is not valid base64") from None
    return image


def phyx_sample(row: dict[str, Any], index: int, *, layout: str, source: str, answer_format: str | None = None,
                variant: str = "simplified", image_dirs: list[Path] | None = None,
                max_pixels: int = DEFAULT_MAX_PIXELS, image_root: str | Path | None = None,
                images_outside_root: bool = False) -> Sample:
    """One PhyX row -> :class:`Sample` (images decoded; see :func:`phyx_fields` for the errors). The raw layout's
    image file is found in ``image_dirs``; another layout's image given as a path is read inside ``image_root`` (the
    dataset's folder) unless ``images_outside_root``."""
    rid = row.get("id", row.get("index", index))
    where = f"{source} row {index} (id {rid})"
    fields = phyx_fields(row, index, layout=layout, where=where, answer_format=answer_format, variant=variant)
    found = _image_source(row, layout, where, image_dirs or [Path(".")], images_outside_root)
    raw = layout == "raw" and isinstance(found, str)  # a file _image_source found in an image folder
    image = decode_image(found, where=f"{where}: field 'image'", max_pixels=max_pixels,
                         base_dir=None if raw else image_root, outside_root=raw or images_outside_root)
    return Sample(images=[image], **fields)


def _image_dirs(path: str, split: str) -> list[Path]:
    """The folders of :data:`IMAGE_FOLDERS` next to ``path`` that exist (its own folder at least)."""
    folder = Path(path).parent if Path(path).is_file() else Path(path)
    found = dict.fromkeys(folder / f.format(split=split) for f in IMAGE_FOLDERS)  # split "test": no repeats
    return [d for d in found if d.is_dir()] or [folder]


def read_phyx(path: str, split: str = "test", rows: str | None = None, answer_format: str | None = None,
              question_variant: str = "simplified", layout: str | None = None, image_dir: str | None = None,
              on_bad_row: str = "raise", max_pixels: int = DEFAULT_MAX_PIXELS,
              images_outside_root: bool = False) -> SampleDataset | ConcatDataset:
    """Open PhyX (a parquet/JSONL/TSV file, a folder, or the hub id ``Cloudriver/PhyX``) as lazy samples.

    Args:
        path, split, rows: source, split (``test`` or ``test_mini`` on the hub) and a row slice
            (``"1000:3000"``; the slice indexes the split, and errors name the row within it).
        answer_format: ``mcq`` or ``open``; ``None`` = ``mcq``, or the form a pre-rendered file holds;
            ``both``: every row in MCQ form, then every row in open-ended form (one SFT set for both formats).
        question_variant: ``simplified`` (PhyX's default, Text-DeRedundancy), ``full`` (full description)
            or ``minimal`` (question only); pre-rendered files hold the variant they were rendered with.
        layout: ``default`` | ``raw`` | ``prerendered``; ``None`` detects it from the columns.
        image_dir: image folder of the raw layout; ``None`` = look, for each row, in the folders of
            :data:`IMAGE_FOLDERS` next to the JSONL (``images/``, ``test/test_image/``, its own folder, ...);
            a missing image's error lists the folders looked in.
        on_bad_row: ``raise`` (text fields of every row validated up front, images decoded lazily, both
            with an error naming the row) or ``skip`` (every row decoded up front, bad ones dropped and
            counted in the log).
        max_pixels: decompression-bomb guard per image.
        images_outside_root: read an image path leading out of the dataset's folders (else a bad row).
    Raises:
        ValueError: unknown ``answer_format``, ``question_variant`` or ``layout``; a variant whose
            description column the file lacks.
        BadRowError: the first bad row (``on_bad_row: raise``).
    """
    if answer_format not in (None, "mcq", "open", "both"):
        raise ValueError(f"answer_format must be 'mcq', 'open' or 'both', got {answer_format!r}")
    if answer_format == "both":  # every row twice: first all in MCQ form, then all in open-ended form
        kw = dict(split=split, rows=rows, question_variant=question_variant, layout=layout, image_dir=image_dir,
                  on_bad_row=on_bad_row, max_pixels=max_pixels, images_outside_root=images_outside_root)
        return ConcatDataset([read_phyx(path, answer_format=f, **kw) for f in ("mcq", "open")])
    if question_variant not in QUESTION_VARIANTS:
        raise ValueError(f"question_variant must be one of {sorted(QUESTION_VARIANTS)}, got {question_variant!r}")
    table = open_table(path, split=split, rows=rows, image_columns=("image",))
    layout = layout or detect_layout(list(table.column_names))
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    names = QUESTION_VARIANTS[question_variant]
    if layout != "prerendered" and names and description_column(table.column_names, question_variant) is None:
        raise ValueError(f"{path}: question_variant {question_variant!r} reads one of the columns {list(names)}, "
                         f"which this {layout}-layout file lacks; choose another question_variant (e.g. 'minimal')")
    source = f"{path}[{split}]"
    folders = [Path(image_dir)] if image_dir else _image_dirs(path, split)
    kw = dict(layout=layout, answer_format=answer_format, variant=question_variant)
    found = dict(image_dirs=folders, image_root=dataset_folder(path), images_outside_root=images_outside_root)

    def to_sample(row: dict, i: int) -> Sample:
        return phyx_sample(row, i, source=source, max_pixels=max_pixels, **found, **kw)

    def check_text(row: dict, i: int) -> dict:
        rid = row.get("id", row.get("index", i))
        return phyx_fields(row, i, where=f"{source} row {i} (id {rid})", **kw)

    def images(row: dict, i: int) -> list:
        return [_image_source(row, kw["layout"], f"{source} row {i}", folders, images_outside_root)]

    return load_rows(table, to_sample, name=source, on_bad_row=on_bad_row,
                     check_text=check_text, text_rows=_without(table, "image"), image_sources=images)


def _without(table: Any, column: str) -> Any:
    return table.remove_columns([column]) if column in table.column_names else table

