"""The one record type every dataset yields, lazy datasets with the bad-row policy, and the prompt templates that
turn a sample into chat messages (system turn + a user turn with image and text parts). Images are decoded by
:mod:`lit_grpo.data.images`.

The model's processor turns the messages into tokens with its own chat template. Templates (``TEMPLATES``):
each task registers its own (VisualSphinx's ``visualsphinx_seed``, the data module's default, and
``visualsphinx_official``: :mod:`lit_grpo.tasks.visualsphinx.templates`; the PhyX task's ``physics_rubric`` and
``phyx_official``: :mod:`lit_grpo.tasks.phyx.templates`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path
from typing import Any, Callable, Sequence

from PIL import Image
from torch.utils.data import Dataset

from lit_grpo.errors import InputError
from lit_grpo.registry import Registry

log = logging.getLogger(__name__)

ANSWER_FORMATS = ("mcq", "open")
BAD_ROW_POLICIES = ("raise", "skip")


class BadRowError(InputError):
    """A dataset row that cannot become a :class:`Sample`; the message names the source, row and field."""


@dataclasses.dataclass
class Sample:
    """One prompt's worth of data, whatever the dataset.

    ``options`` maps label -> text (empty for open-ended); ``answer`` is the gold letter (``mcq``) or the
    gold text (``open``). ``fields``: the task's own gold fields, each a reward column of its name (PhyX's
    ``domain``, ``principle``, ``unit``; as TRL passes every dataset column to a reward and verl keeps
    ``extra_info``): a reader that returns a new field makes it readable by a reward with no other change.
    ``meta``: what else a row carries (explanations, reasoning types, the stored answer), one column ``meta``.

    Raises:
        ValueError: a task field named like one of the record's own columns (it would hide it).
    """

    id: str
    images: list[Image.Image]
    question: str
    options: dict[str, str]
    answer: str
    answer_format: str = "mcq"
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        # a task field named like a record column would silently replace it in columns(): refused at construction
        clash = sorted(set(self.fields) & set(RECORD_COLUMNS))
        if clash:
            raise ValueError(f"sample {self.id!r}: task field(s) {clash} are named like the record's own columns "
                             f"{list(RECORD_COLUMNS)}; rename them")

    def columns(self) -> dict[str, Any]:
        """The sample as reward columns: the record's own (images included) and each task field by its name."""
        # task fields last: the clash check above keeps them from hiding a record column
        return {**{name: getattr(self, name) for name in RECORD_COLUMNS}, **self.fields}


RECORD_COLUMNS = ("id", "images", "question", "options", "answer", "answer_format", "meta")
"""The columns every sample gives, whatever its task (:meth:`Sample.columns`)."""


def dataset_columns(ds: Any) -> set[str] | None:
    """The reward columns a dataset's samples give (:meth:`Sample.columns`), read from the first sample of each of its
    parts (a ``ConcatDataset``'s datasets, a ``Subset``'s dataset); ``None`` when a part's items are not samples or its
    first row is bad (then nothing can be said)."""
    # a ConcatDataset: the union of its parts' columns, or nothing when any part cannot say
    parts = getattr(ds, "datasets", None)
    if parts is not None:
        found = [dataset_columns(p) for p in parts]
        return None if any(f is None for f in found) else set().union(*found)
    inner = getattr(ds, "dataset", None)
    # a Subset (after the overlap or length filters) is looked through; a SampleDataset's own .dataset is no wrapper
    if inner is not None and not isinstance(ds, SampleDataset):
        return dataset_columns(inner)
    if not len(ds):  # an empty part adds no column and hides none
        return set()
    try:
        first = ds[0]
    except BadRowError:  # a bad first row is named when its batch is read (or was skipped): nothing to say here
        return None
    return set(first.columns()) if isinstance(first, Sample) else None


BAD_BYTES_COLUMN = "__bad_row__"
"""A row the table opener could not read (e.g. non-UTF-8 bytes) holds its reason here; readers raise it as a
:class:`BadRowError` under the bad-row policy, so the rows after it keep their numbers."""


def check_unreadable(row: Any, where: str) -> None:
    """Raise :class:`BadRowError` for a row marked unreadable by the table opener (``BAD_BYTES_COLUMN``)."""
    reason = row.get(BAD_BYTES_COLUMN) if isinstance(row, dict) else None
    if reason:
        raise BadRowError(f"{where}: {reason}")


class SampleDataset(Dataset):
    """Rows turned into :class:`Sample` on access (images decoded lazily, one row at a time).

    ``indices`` keeps a subset of the rows (after skipping bad ones); errors still name the original row.
    ``text_fields(row, j)``, when given, returns the text fields of row ``j`` without decoding images, and
    ``image_sources(row, j)`` its images as stored (bytes, a file path, an HF image dict): :meth:`fields` and
    :meth:`image_digest` use them, e.g. for the train/evaluation overlap check. ``known`` maps a row to its
    ``id`` and ``question`` when the loader has read them already.
    """

    def __init__(self, rows: Sequence[Any], to_sample: Callable[[Any, int], Sample], name: str = "dataset",
                 indices: list[int] | None = None, text_rows: Sequence[Any] | None = None,
                 text_fields: Callable[[Any, int], dict] | None = None,
                 image_sources: Callable[[Any, int], list] | None = None, known: dict[int, dict] | None = None):
        self.rows, self.to_sample, self.name = rows, to_sample, name
        self.indices = indices
        # reported by readers as the rows the bad-row policy dropped
        self.skipped = 0 if indices is None else len(rows) - len(indices)
        self.text_rows, self.text_fields = text_rows if text_rows is not None else rows, text_fields
        self.image_sources, self.known = image_sources, known or {}

    def __len__(self) -> int:
        return len(self.rows) if self.indices is None else len(self.indices)

    def __getitem__(self, i: int) -> Sample:
        # errors name the original row j, not the position i after skipped rows
        j = i if self.indices is None else self.indices[i]
        return self.to_sample(self.rows[j], j)

    def fields(self, i: int) -> dict[str, Any]:
        """The text fields of sample ``i`` (``id``, ``question``, ...), images left undecoded when possible."""
        j = i if self.indices is None else self.indices[i]
        # the loader read this row's id and question already: no second read of the file
        if j in self.known:
            return self.known[j]
        return self.text_fields(self.text_rows[j], j) if self.text_fields else self[i].columns()

    def image_digest(self, i: int) -> str:
        """sha1 of sample ``i``'s images as stored (their bytes), or of the decoded pixels when the reader does not
        say where its images are stored."""
        j = i if self.indices is None else self.indices[i]
        h = hashlib.sha1()
        for src in self.image_sources(self.rows[j], j) if self.image_sources else self[i].images:
            if isinstance(src, dict):
                # an HF image dict: its bytes when stored inline, else the file it points at
                src = src.get("bytes") or src.get("path")
            if isinstance(src, Image.Image):
                # the size is hashed too: equal pixel bytes at another shape are another image
                h.update(f"{src.size}".encode() + src.convert("RGB").tobytes())
            else:
                h.update(bytes(src) if isinstance(src, (bytes, bytearray)) else Path(str(src)).read_bytes())
        return h.hexdigest()


IMAGE_COLUMNS = ("image", "images")
"""Columns whose bytes are images (:func:`text_row` leaves them as they are)."""


def text_row(row: dict[str, Any], where: str, images: Sequence[str] = IMAGE_COLUMNS) -> dict[str, Any]:
    """``row`` with every field stored as bytes (a parquet ``binary`` column, an Arrow ``large_binary``) decoded as
    UTF-8 text, the image columns (``images``) left as stored: a reader then never trains on ``"b'...'"``.

    Raises:
        BadRowError: a bytes field that is not UTF-8, naming ``where`` (source, row, id) and the field."""
    out = dict(row)
    for key, value in row.items():
        # memoryview too: Arrow's large_binary can arrive as one
        if key in images or not isinstance(value, (bytes, bytearray, memoryview)):
            continue
        try:
            out[key] = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRowError(f"{where}: field {key!r} is binary and not UTF-8 text (byte {exc.start}); store it as "
                              "a string column, encoded as UTF-8") from None
    return out


def load_rows(rows: Sequence[Any], to_sample: Callable[[Any, int], Sample], *, name: str,
              on_bad_row: str = "raise", check_text: Callable[[Any, int], dict | None] | None = None,
              text_rows: Sequence[Any] | None = None,
              image_sources: Callable[[Any, int], list] | None = None) -> SampleDataset:
    """A :class:`SampleDataset` over ``rows`` under a bad-row policy.

    ``raise``: ``check_text`` runs on every row of ``text_rows`` (the rows without their image columns,
    cheap to read) so a bad text field fails at setup; images are decoded lazily and a bad one raises
    :class:`BadRowError` naming the row when it is first read. ``skip``: every row is turned into a
    sample up front (images decoded), rows raising :class:`BadRowError` are dropped, and the count
    with the first few reasons is logged. ``image_sources`` is passed to the dataset. Under both, a row the
    table opener could not read (``BAD_BYTES_COLUMN``) and a row repeating an earlier row's ``id`` are bad rows.
    Raises:
        ValueError: unknown ``on_bad_row``.
        BadRowError: the first bad text field (``raise``); every row bad (``skip``).
    """
    if on_bad_row not in BAD_ROW_POLICIES:
        raise ValueError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {on_bad_row!r}")
    seen: dict[str, int] = {}

    def unique(row_id: str, i: int) -> None:
        first = seen.setdefault(row_id, i)
        if first != i:
            raise BadRowError(f"{name} row {i} (id {row_id}): field 'id' repeats row {first}; ids must be unique")

    def checked(row: Any, i: int) -> Sample:
        check_unreadable(row, f"{name} row {i}")
        return to_sample(row, i)

    def text(row: Any, i: int) -> dict | None:
        check_unreadable(row, f"{name} row {i}")
        return check_text(row, i) if check_text is not None else None

    fields = text if check_text is not None else None
    known: dict[int, dict] = {}
    # raise: only the cheap text rows are read now, so setup stays fast; a bad image fails on its first read
    if on_bad_row == "raise":
        for i, row in enumerate(text_rows if text_rows is not None else rows):
            found = text(row, i)
            if found is not None and found.get("id") is not None:
                unique(str(found["id"]), i)
                known[i] = {"id": str(found["id"]), "question": found.get("question", "")}
        return SampleDataset(rows, checked, name, text_rows=text_rows, text_fields=fields, image_sources=image_sources,
                             known=known)
    keep, reasons = [], []
    for i in range(len(rows)):
        try:
            sample = checked(rows[i], i)
            unique(sample.id, i)
            keep.append(i)
            known[i] = {"id": sample.id, "question": sample.question}
        except BadRowError as exc:
            reasons.append(str(exc))
    if rows and not keep:  # nothing left to train or evaluate on: the file as a whole is unreadable
        raise BadRowError(f"{name}: all {len(rows)} rows are bad, so on_bad_row: skip leaves none; first: {reasons[0]}")
    if reasons:
        log.warning("%s: skipped %d of %d bad rows (on_bad_row: skip); first: %s", name, len(reasons),
                    len(rows), " | ".join(reasons[:3]))
    return SampleDataset(rows, checked, name, indices=keep, text_rows=text_rows, text_fields=fields,
                         image_sources=image_sources, known=known)


def encode_samples(encode: Callable[[list, list], Any], messages: list, samples: Sequence[Sample]) -> Any:
    """``encode(messages, images)`` of a batch; when the model's processor refuses it (an image it cannot take: an
    extreme aspect ratio, smaller than its patch, over its pixel limit), the sample it refuses is found by encoding
    each alone and named, a bad row like any other.

    Raises:
        BadRowError: naming the sample's id, its image sizes and the processor's reason."""
    try:
        return encode(messages, [s.images for s in samples])
    # an InputError (a bad row already named) is passed on as is: no second encoding
    except InputError:
        raise
    except Exception as exc:  # a processor raises ValueError, IndexError, RuntimeError... for what it cannot take
        # the batch's error does not say which sample: each is encoded alone until one fails
        for m, sample in zip(messages, samples):
            try:
                encode([m], [sample.images])
            except Exception as one:
                exc = one
                sizes = ", ".join(f"{im.width}x{im.height}" for im in sample.images) or "no image"
                reason = (str(exc).strip().splitlines() or [""])[0][:300]
                raise BadRowError(f"sample {sample.id}: the model's processor refuses it (image {sizes}; "
                                  f"{type(exc).__name__}: {reason}); drop the row, or set data.on_bad_row: skip to "
                                  "drop every such row before training") from None
        # every sample passes alone: the batch's failure is not any one row's, so it is raised as it was
        raise


def prompt_limit(policy: Any, sampling: Any = None) -> int | None:
    """The prompt tokens a model takes: its text config's ``max_position_embeddings``, less the sampling settings'
    ``max_completion_length`` when that leaves room (a completion is written after the prompt); ``None`` when the
    config gives no limit."""
    config = policy.config
    # a VLM keeps its position limit in the text config; get_text_config finds it in either layout
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    positions = getattr(text, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        return None
    completion = getattr(sampling, "max_completion_length", 0) or 0
    # a context no longer than the completion length: subtracting would leave no room, so the whole context is the limit
    return positions - completion if positions > completion else positions


def check_prompt_lengths(encoded: dict[str, Any], samples: Sequence[Sample], limit: int | None) -> None:
    """Refuse a prompt longer than the model's context (:func:`prompt_limit`) before any forward over it (a prompt
    of 19,355 tokens against 4,096 positions would otherwise grow the process by gigabytes, or index past the
    position table).

    ``encoded``: the processor's output for ``samples`` (its ``attention_mask``, ``[B, L]``, gives each length).

    Raises:
        BadRowError: the first such sample, with its id, its length and the limit.
    """
    # attention_mask counts real tokens: left padding excluded
    for n, sample in zip(encoded["attention_mask"].sum(1).tolist(), samples):
        if limit is not None and n > limit:
            raise BadRowError(f"row id {sample.id}: its prompt is {n} tokens (image tokens included), longer than the "
                              f"model's context allows ({limit} tokens: max_position_embeddings less the completion's "
                              "max_completion_length); shorten it, or set data.on_bad_row: skip (or "
                              "data.max_prompt_length) to drop such rows up front")


# ----------------------------------------------------------------- prompt templates
Messages = list[dict]
TEMPLATES: Registry[Callable[[Sample], tuple[str | None, str]]] = Registry("prompt template", tasks=True)
"""Template name -> function returning ``(default system prompt or None, user text)``."""
REFERENCES: Registry[Callable[[Sample], str]] = Registry("reference response", tasks=True)
"""Name -> the reference response (SFT target) of a sample, in the format a template asks for
(:class:`lit_grpo.sft.SFTModule`'s ``reference``)."""

def render_messages(sample: Sample, template: str | Callable[[Sample], tuple[str | None, str]],
                    system_prompt: str | None = None) -> Messages:
    """Chat messages for ``sample`` by ``template`` (a registered name, or the function it names, as the DataModule
    looks it up once): ``system_prompt`` (if given) replaces the template's default."""
    default_system, text = (TEMPLATES.get(template) if isinstance(template, str) else template)(sample)
    system = system_prompt if system_prompt is not None else default_system
    # "" removes the system turn (data.system_prompt), rather than sending an empty one
    messages: Messages = [{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []
    # one image part per image, before the text: the chat template turns each into the processor's image placeholder
    content = [{"type": "image"} for _ in sample.images] + [{"type": "text", "text": text}]
    messages.append({"role": "user", "content": content})
    return messages
