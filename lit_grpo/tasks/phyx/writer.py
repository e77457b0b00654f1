"""Writing PhyX items in the three published layouts (the embedded physics set and test fixtures use it).

An item is a dict in the default layout's schema: ``id``, ``question``, ``question_description``,
``question_description_simplified``, ``options`` (list of ``"A: ..."``), ``answer`` (letter), ``image``
(encoded image bytes, PNG or JPEG), ``image_caption``, ``category``, ``subfield``, ``reasoning_type``
(list), and optionally ``solution`` (a worked reasoning; not a PhyX column, the readable set has it).
:func:`write_phyx` turns a list of them into one layout; :func:`~lit_grpo.tasks.phyx.reader.read_phyx`
reads every layout back into the same samples.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from lit_grpo.tasks.phyx.reader import parse_option_list, problem_text
from lit_grpo.tasks.phyx.templates import MC_INSTRUCTION, OE_INSTRUCTION, render_options

PRERENDERED = ("mc", "oe")


def options_string(options: dict[str, str]) -> str:
    """``{"A": "7.55N", "B": "5.55N"}`` -> ``A:"7.55N",B:"5.55N"`` (the raw layout's one-string field)."""
    return ",".join(f'{k}:"{v}"' for k, v in options.items())


def raw_row(item: dict[str, Any]) -> dict[str, Any]:
    """The raw JSONL row of an item (its image goes to ``<index>.png`` in the image folder)."""
    index = int(item["id"])
    return {"index": index, "question": item["question"], "question_simply": item["question_description_simplified"],
            "question_description": item["question_description"],
            "options": options_string(parse_option_list(item["options"])), "answer": item["answer"],
            "image": f"{index}.png", "image_caption": item.get("image_caption", ""), "category": item["category"],
            "subfield": item["subfield"], "reasoning_type": list(item["reasoning_type"]),
            **({"solution": item["solution"]} if "solution" in item else {})}


def prerendered_row(item: dict[str, Any], form: str, variant: str = "simplified") -> dict[str, Any]:
    """The pre-rendered MC (``form="mc"``) or OE (``"oe"``) evaluation row of an item (base64 image)."""
    options = parse_option_list(item["options"])
    problem = problem_text(item, variant)
    if form == "mc":
        question, answer = f"{problem}{MC_INSTRUCTION}{render_options(options)}", item["answer"]
    else:
        question, answer = f"{problem}{OE_INSTRUCTION}", options[item["answer"]]
    return {"index": str(item["id"]), "question": question, "answer": answer,
            "image": base64.b64encode(item["image"]).decode("ascii"), "category": item["category"],
            "subfield": item["subfield"], "reasoning_type": str(list(item["reasoning_type"]))}


def write_phyx(items: list[dict[str, Any]], path: str | Path, layout: str = "default",
               image_dir: str | Path | None = None) -> Path:
    """Write ``items`` to ``path`` in ``layout``.

    Layouts: ``default`` (parquet, images embedded), ``raw`` (JSONL, images written as ``<index>.png``
    into ``image_dir``, default ``images/`` next to the file; the bytes keep their own format),
    ``mc`` / ``oe`` (pre-rendered evaluation files; parquet or TSV by the suffix of ``path``).
    Raises:
        ValueError: unknown layout, or a suffix the layout cannot write.
    """
    import datasets

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout == "default":
        features = datasets.Features({
            "id": datasets.Value("string"), "question": datasets.Value("string"),
            "question_description": datasets.Value("string"),
            "question_description_simplified": datasets.Value("string"),
            "options": datasets.List(datasets.Value("string")), "answer": datasets.Value("string"),
            "image": datasets.Image(), "image_caption": datasets.Value("string"),
            "category": datasets.Value("string"), "subfield": datasets.Value("string"),
            "reasoning_type": datasets.List(datasets.Value("string"))})
        if any("solution" in it for it in items):  # the readable set's worked reasoning (not a PhyX column)
            features["solution"] = datasets.Value("string")
        rows = [{**it, "image": {"bytes": it["image"], "path": None}} for it in items]
        datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    elif layout == "raw":
        folder = Path(image_dir) if image_dir else path.parent / "images"
        folder.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for it in items:
                row = raw_row(it)
                (folder / row["image"]).write_bytes(it["image"])
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif layout in PRERENDERED:
        table = datasets.Dataset.from_list([prerendered_row(it, layout) for it in items])
        if path.suffix == ".tsv":
            table.to_pandas().to_csv(path, sep="\t", index=False)
        elif path.suffix == ".parquet":
            table.to_parquet(str(path))
        else:
            raise ValueError(f"{path}: pre-rendered files are .parquet or .tsv")
    else:
        raise ValueError(f"layout must be default, raw, mc or oe, got {layout!r}")
    return path
