"""DataModule: datasets from readers (generated first where a ``generate`` block asks), prompt rendering,
over-long filtering."""


import dataclasses
import inspect
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

import lightning as L
import torch
from torch.utils.data import Dataset, DistributedSampler, Subset
from torchdata.stateful_dataloader import StatefulDataLoader
from annotated_types import Ge

from lit_grpo.data import overlap
from lit_grpo.data.io import hub_dataset_cached, is_local, offline, parse_slice
from lit_grpo.data.sample import TEMPLATES, BadRowError, Sample, render_messages
from lit_grpo.errors import InputError
from lit_grpo.progress import CountProgress
from lit_grpo.settings import Checked, SettingError, argument_types, check_arguments
from lit_grpo.registry import Registry, did_you_mean
from lit_grpo.rng import run_seed

log = logging.getLogger(__name__)
# torchdata's StatefulDataLoader calls a torch function deprecated in torch 2.13, on every loader Lightning makes
warnings.filterwarnings("ignore", message=".*'set_vital' is deprecated.*", category=UserWarning)

READERS: Registry[Callable[..., Dataset]] = Registry("dataset reader", tasks=True)
"""Dataset readers by name: ``fn(path, split=, rows=, **reader_args) -> Dataset`` of :class:`Sample` rows."""
GENERATORS: Registry[Callable[..., Path]] = Registry("data generator", tasks=True)
"""Data generators by name: ``fn(path, num=, seed=, progress=, **settings) -> Path`` (a ``forwards_to`` attribute
names the callables whose keywords it passes on, for the settings a ``generate`` block may set)."""
DEFAULT_GENERATOR = "puzzles"
"""The ``kind`` of a ``generate`` block that names none."""
NOT_SETTINGS = ("progress",)
"""Generator keywords a ``generate`` block does not set (:func:`ensure_generated` passes them)."""


def generator_options(kind: str) -> list[str]:
    """The settings a ``generate`` block of ``kind`` takes: ``path``, ``kind``, the generator's keywords and those
    it passes on (its ``forwards_to``), read from their signatures."""
    fn = GENERATORS.get(kind)
    names = {"path", "kind"}
    for target in (fn, *getattr(fn, "forwards_to", ())):
        names |= {p.name for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in NOT_SETTINGS}
    return sorted(names)


def generator_option_types(kind: str | None) -> dict[str, Any]:
    """Setting -> declared type of a ``generate`` block of ``kind`` (None: :data:`DEFAULT_GENERATOR`): ``kind`` a
    registered name, the settings of the generator and those it passes on."""
    kind = DEFAULT_GENERATOR if kind is None else kind
    types: dict[str, Any] = {"kind": GENERATORS.name_type()}
    if kind not in GENERATORS:
        return types
    fn = GENERATORS.get(kind)
    for target in (*getattr(fn, "forwards_to", ()), fn):
        types.update(argument_types(target))
    return types


@dataclasses.dataclass
class DatasetSpec(Checked):
    """Where one split comes from: a dataset the user has (``path``), or one generated on purpose (``generate``).

    Only ``generate.path`` is ever generated, so a mistyped ``path`` is an error naming it, never a synthetic
    set made at the typo: ``path`` defaults to ``generate.path``; a ``path`` that differs from it is the user's
    own data, which must exist (the ``generate`` block is then not used). The generated file records its
    settings beside it (``<file>.generate.json``) and is written again when they change.
    """

    path: str | None = None
    """Local file or folder, or a hub id ``owner/name``; default: ``generate.path``."""
    reader: READERS.name_type() = "visualsphinx"
    """Registered reader: ``visualsphinx`` or ``phyx``."""
    split: str = "train"
    """Split of the source to read."""
    rows: str | None = None
    """Python slice of rows to keep, e.g. ``"1000:3000"``."""
    generate: dict[str, Any] | None = None
    """Generate a synthetic set into ``generate.path``: ``{"path": "data/embedded/x.parquet", "kind": "puzzles",
    "num": 2000, "seed": 0, ...}`` (kinds: ``puzzles``, ``physics``); written when missing or made with other
    settings."""
    reader_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Extra keyword arguments of the reader (phyx: ``answer_format``, ``question_variant``, ``layout``,
    ``image_dir``; both: ``max_pixels``, ``on_bad_row``)."""

    @staticmethod
    def option_types(value) -> dict[str, Any]:
        """``generate`` and ``reader_args`` are typed by the generator's and the reader's options."""
        reader = value.get("reader")
        return {"generate": generator_option_types((value.get("generate") or {}).get("kind")),
                "reader_args": argument_types(READERS.get(reader)) if reader in READERS else {}}

    def generated(self) -> bool:
        """Whether this split reads the file its ``generate`` block writes."""
        target = (self.generate or {}).get("path")
        # compared as paths, so "./data/x" and "data/x" are the same file
        return target is not None and (self.path is None or Path(self.path) == Path(target))

    def check(self, name: str = "data", roots: list[Path] | None = None) -> None:
        """Refuse what would fail or mislead at load time, before any model work (``name``: e.g. ``data.train``).

        Raises:
            ValueError: no path, a ``generate`` block without ``path`` or of an unknown kind, an unknown reader.
            FileNotFoundError: a local ``path`` (see :func:`~lit_grpo.data.io.is_local`) that does not exist (from
                another folder than the one it is in: where it looked, :func:`lit_grpo.settings.paths.wrong_folder` in
                ``roots``, default :func:`lit_grpo.settings.paths.search_roots`); a hub id that is not in the local cache
                offline, or that the hub does not have or cannot be asked about online (one request, no retries).
        """
        from lit_grpo.settings.paths import check_hub, search_roots, wrong_folder

        if self.generate is not None:
            _check_generate(self.generate, f"{name}.generate")
        if self.rows is not None:
            try:
                rows = parse_slice(str(self.rows))
            except ValueError as exc:
                raise ValueError(f"{name}.{exc}") from None
            # step 0 would raise only when the rows are sliced, after loading: refused here, with an example
            if rows.step == 0:
                raise ValueError(f"{name}.rows {self.rows!r} has step 0; e.g. '1000:3000' or '::2'")
            start, stop = rows.start or 0, rows.stop
            # only non-negative bounds can be judged now: a negative one counts from an end not known before loading
            if stop is not None and start >= 0 and stop >= 0 and stop <= start:
                raise ValueError(f"{name}.rows {self.rows!r} keeps no row (stop <= start); e.g. '1000:3000'")
        if self.path is None and self.generate is None:
            raise ValueError(f"{name}.path is not set (a file, a folder or a hub id)")
        # a generated file need not exist yet: load writes it first
        if self.generated() or Path(self.path).expanduser().exists():
            return
        elsewhere = wrong_folder(f"{name}.path", self.path, search_roots() if roots is None else roots)
        if elsewhere:
            raise FileNotFoundError(elsewhere)
        # a missing path shaped like a local one is never tried as a hub id: the typo is named, no network call
        if is_local(self.path):
            made = f" (this config generates only {self.generate['path']}, its generate.path)" if self.generate else ""
            raise FileNotFoundError(f"{name}.path {self.path} does not exist{made}")
        if hub_dataset_cached(self.path):  # a cached dataset needs no request, even online
            return
        if offline():
            raise FileNotFoundError(f"{name}.path {self.path!r} is no file or folder here, and as a hub dataset id it "
                                    "is not in the local cache (HF_HUB_OFFLINE is set): download it first or give a "
                                    "local path")
        check_hub(self.path, "dataset", f"{name}.path")

    def load(self, on_bad_row: str = "raise") -> Dataset:
        """The reader's dataset; ``on_bad_row`` (``raise`` | ``skip``) unless ``reader_args`` sets it. The
        generated file is written first when missing or stale (:func:`ensure_generated`)."""
        # checked again: load is also called outside the CLI, which ran the startup check
        self.check()
        path = self.path or self.generate["path"]
        if self.generated():
            ensure_generated(self.generate)
        args = {"on_bad_row": on_bad_row, **self.reader_args}  # reader_args may set on_bad_row for its split
        return READERS.get(self.reader)(path, split=self.split, rows=self.rows, **args)


def _check_generate(generate: dict[str, Any], where: str) -> None:
    """A ``generate`` block names its ``path`` and only settings its generator takes (its ``kind`` and their types
    are declared: :func:`generator_option_types`)."""
    if not generate.get("path"):
        raise ValueError(f"{where} needs path: the file it writes (e.g. data/embedded/x.parquet)")
    kind = generate.get("kind", DEFAULT_GENERATOR)
    valid = generator_options(kind)
    unknown = sorted(set(generate) - set(valid))
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: not a setting of the {kind!r} generator"
                         f"{did_you_mean(unknown[0], valid)}; "
                         f"its settings: {', '.join(valid)}")


def check_datasets(specs: dict[str, DatasetSpec | None], roots: list[Path] | None = None) -> None:
    """Check every split (``name -> spec``) before any model work (:meth:`DatasetSpec.check`), and that splits
    generating the same file ask for the same settings (else each would rewrite it for the other).

    Raises:
        ValueError, FileNotFoundError, KeyError: naming the split (``data.<name>``) and the problem.
    """
    made: dict[str, tuple[str, dict]] = {}
    for name, spec in specs.items():
        if spec is None:
            continue
        spec.check(f"data.{name}", roots)
        if spec.generated():
            target, record = str(Path(spec.generate["path"])), generation_record(spec.generate)
            first = made.setdefault(target, (name, record))
            if first[1] != record:
                raise ValueError(f"data.{first[0]} and data.{name} generate {target} with different settings; "
                                 "give them the same generate block or different paths")


def generation_record(generate: dict[str, Any]) -> dict[str, Any]:
    """The settings a generated file is made from (its ``generate`` block without ``path``, kind filled in)."""
    return {"kind": DEFAULT_GENERATOR, **{k: v for k, v in generate.items() if k != "path"}}


def ensure_generated(generate: dict[str, Any]) -> Path:
    """Write ``generate["path"]`` unless it exists with a record (``<file>.generate.json``) of the same settings.

    A file without a record, or made with other settings, is written again (the record goes last, so an
    interrupted write is redone); what changed is logged.
    """
    path, want = Path(generate["path"]), generation_record(generate)
    record = path.with_name(path.name + ".generate.json")
    have = json.loads(record.read_text()) if record.is_file() else None
    # compared after a JSON round trip: the record on disk has lists for tuples and str keys
    if path.exists() and have == json.loads(json.dumps(want)):
        return path
    if path.exists():
        changed = sorted(k for k in set(want) | set(have or {}) if (have or {}).get(k) != want.get(k))
        log.warning("%s was generated with other settings (%s): generating it again",
                    path, ", ".join(changed) if have is not None else "no record of them")
    args = dict(want)
    # the pid in the name: ranks that generate at once each write their own file and swap it in
    partial = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")  # the suffix picks the layout
    kind = args.pop("kind")
    # the generator's default num, for the progress line
    num = int(args.get("num", inspect.signature(GENERATORS.get(kind)).parameters["num"].default))
    settings = ", ".join(f"{k}: {v}" for k, v in sorted(args.items()) if k != "num")
    progress = CountProgress(f"generating {num:,} rows ({kind} generator) into {path}", num, settings, write=log.info)
    try:
        GENERATORS.get(kind)(str(partial), progress=progress, **args)
        record.unlink(missing_ok=True)  # only now: a failed generation leaves the old file and its record
        os.replace(partial, path)  # readers (other ranks) never see a half-written file
    finally:
        partial.unlink(missing_ok=True)
    partial_record = record.with_name(f".{record.name}.{os.getpid()}.partial")
    partial_record.write_text(json.dumps(want, sort_keys=True, indent=1))
    os.replace(partial_record, record)  # another process generating the same file reads a whole record or none
    progress.done()
    return path


def resumed_epoch(trainer: L.Trainer | None) -> int:
    """The epoch whose batches a train loader made now serves: Lightning makes the first iterator of a resumed run
    before it sets the sampler's epoch (``FitLoop.setup_data``), and does not make another for the epoch it
    resumes, so a ``DistributedSampler`` left at epoch 0 would shuffle that epoch as the first one.

    Resumed inside an epoch (or after :func:`lit_grpo.runs.resume_where_stopped` reopened it): that epoch. Resumed
    from a checkpoint written at an epoch's last batch: the next one (the saved iterator is finished, so the loader
    makes a fresh one, and Lightning counts the epoch as ended). Not resuming: the epoch Lightning counts (it sets
    the sampler's epoch itself before every later iterator).
    """
    if trainer is None:
        return 0
    loop = trainer.fit_loop
    batches = loop.epoch_loop.batch_progress
    # a checkpoint at an epoch's last batch resumes into the next epoch: its saved iterator is finished
    ended = loop.restarting and batches.is_last_batch
    return loop.epoch_progress.current.processed + int(ended)


@dataclasses.dataclass
class PromptBatch:
    """B samples and their rendered chat messages."""

    samples: list[Sample]
    messages: list[list[dict]]

    def __len__(self) -> int:
        return len(self.samples)


class VLMDataModule(L.LightningDataModule):
    """Train/val/test/predict splits of :class:`Sample` rows, batched as :class:`PromptBatch`.

    Prompts are never truncated: when ``max_prompt_length`` is set and a prompt-length measure is given
    (:attr:`prompt_length`: the CLI passes the model's), longer samples are dropped at setup and the count is logged.
    """

    def __init__(
        self,
        train: DatasetSpec | None = None,
        val: DatasetSpec | None = None,
        test: DatasetSpec | None = None,
        predict: DatasetSpec | None = None,
        batch_size: Annotated[int, Ge(1)] = 4,
        eval_batch_size: Annotated[int, Ge(1)] = 8,
        template: TEMPLATES.name_type() = "visualsphinx_seed",
        system_prompt: str | None = None,
        max_prompt_length: Annotated[int, Ge(1)] | None = None,
        num_workers: Annotated[int, Ge(0)] = 0,
        on_bad_row: Literal["raise", "skip"] = "raise",
        on_overlap: Literal["refuse", "drop", "allow"] = "refuse",
    ):
        """
        Args:
            train, val, test, predict: dataset of each stage (``val`` doubles as ``test`` when unset).
            batch_size: prompts per training step (B); each gets G completions.
            eval_batch_size: prompts per validation/test/predict step.
            template: registered prompt template (``visualsphinx_seed``, ``visualsphinx_official``, ...).
            system_prompt: replaces the template's system prompt ("" removes it).
            max_prompt_length: drop samples whose prompt (image tokens included) is longer.
            num_workers: DataLoader workers.
            on_bad_row: ``raise``: a bad row (missing/undecodable/over-large image, missing answer, answer
                not among the options, unknown domain, malformed options) stops with an error naming the
                file, row id and field; ``skip``: bad rows are dropped up front and counted in the log.
            on_overlap: training rows that are the same problem as a validation or test row (same normalised
                question text and same image, :mod:`lit_grpo.data.overlap`), checked at ``fit``: ``refuse``
                stops with an error naming the first pairs; ``drop`` removes them from training and logs the count;
                ``allow`` keeps them and logs the count (deliberate: a check that a policy fits its own eval set).
        """
        super().__init__()
        found = check_arguments(VLMDataModule, locals(), "data")  # Python callers: the types the parser checks
        if found:
            raise SettingError(found)
        self.template_fn = TEMPLATES.get(template)  # looked up once: a typo fails here, no sample looks it up again
        # test falls back to val, predict to test then val: a config with one evaluation split serves every stage
        self.specs = {"train": train, "val": val, "test": test or val, "predict": predict or test or val}
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.template, self.system_prompt = template, system_prompt
        self.max_prompt_length, self.num_workers = max_prompt_length, num_workers
        self.on_bad_row = on_bad_row  # it and on_overlap are one of their Literal's choices (check_arguments above)
        self.on_overlap, self.overlap_dropped = on_overlap, 0
        self.datasets: dict[str, Dataset] = {}
        self.prompt_length: Callable[[list[dict], Sample], int] | None = None
        """``fn(messages, sample)``: prompt tokens of a sample, image tokens included (the policy module's
        :meth:`~lit_grpo.module.PolicyModule.prompt_length`); ``None``: nothing is measured or dropped."""
        self.prompt_limit: int | None = None
        """The longest prompt the model takes (its context less the completion length; the CLI sets it): with
        ``on_bad_row: skip`` longer rows are dropped up front like other bad rows (with ``raise`` the model refuses
        such a row when its batch is encoded)."""

    def setup(self, stage: str | None = None) -> None:
        # an unknown stage (None) loads every split
        wanted = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}
        loaded = {split: self.specs[split].load(self.on_bad_row) for split in wanted.get(stage, self.specs)
                  # setup runs per stage (fit, then test): a split is read once
                  if self.specs[split] is not None and split not in self.datasets}
        if "train" in loaded:
            loaded["train"] = self._without_overlap(loaded["train"], loaded)
        for split, ds in loaded.items():
            self.datasets[split] = self._filter(split, ds)

    def _without_overlap(self, train: Dataset, loaded: dict[str, Dataset]) -> Dataset:
        """``train`` checked against the validation and test rows under ``on_overlap`` (the test split is
        loaded here too when it is not the validation split)."""
        evals = {}
        for split in ("val", "test"):
            spec = self.specs[split]
            # the same spec object as val (test falls back to it): one check covers both
            if spec is None or (split == "test" and spec is self.specs["val"]):
                continue
            if split not in loaded and split not in self.datasets:
                loaded[split] = spec.load(self.on_bad_row)
            evals[split] = loaded[split] if split in loaded else self.datasets[split]
        found = overlap.find_overlap(train, evals) if evals else {}
        if not found:
            return train
        what = (f"{len(found)} of {len(train)} training rows are the same problem (normalised question text and "
                f"image) as a {'/'.join(evals)} row: {overlap.describe(train, found)}")
        if self.on_overlap == "refuse":
            raise InputError(f"{what}. Choose disjoint rows, or set data.on_overlap: drop to train without them")
        if self.on_overlap == "allow":
            log.warning("%s; kept for training (on_overlap: allow)", what)
            return train
        # dropping every row would leave an empty loader, which would only fail later and less clearly
        if len(found) == len(train):
            raise InputError(f"{what}: nothing is left to train on (on_overlap: drop); choose other training rows")
        log.warning("%s; dropped from training (on_overlap: drop)", what)
        self.overlap_dropped = len(found)
        return overlap.without(train, found)

    def render(self, sample: Sample) -> list[dict]:
        return render_messages(sample, self.template_fn, self.system_prompt)

    def _filter(self, split: str, ds: Dataset) -> Dataset:
        """``ds`` without the samples longer than ``max_prompt_length`` or (``on_bad_row: skip``) than the model's
        context (:attr:`prompt_limit`), each sample measured once up front; the count is logged."""
        limits = [(n, label) for n, label in (
            (self.max_prompt_length, f"max_prompt_length={self.max_prompt_length} tokens"),
            (self.prompt_limit if self.on_bad_row == "skip" else None,
             f"the model's context ({self.prompt_limit} tokens: max_position_embeddings less max_completion_length)"),
        ) if n is not None]
        measure = self.prompt_length
        if not limits or measure is None:
            return ds
        limit, label = min(limits)  # the tighter limit decides, and is named
        keep, refused = [], []
        for i in range(len(ds)):
            try:
                # measured on the rendered messages, as the rollout encodes them: image tokens and template included
                if measure(self.render(ds[i]), ds[i]) <= limit:
                    keep.append(i)
            except BadRowError as exc:  # the processor refuses the sample: under skip, a bad row like the others
                if self.on_bad_row != "skip":
                    raise
                refused.append(str(exc))
        if refused:
            log.warning("%s: skipped %d of %d rows the model's processor refuses (on_bad_row: skip); first: %s",
                        split, len(refused), len(ds), " | ".join(refused[:3]))
        if not keep and len(ds):
            raise ValueError(f"{split}: all {len(ds)} samples are longer than {label} (image tokens included); raise "
                             "data.max_prompt_length or use a model with a longer context")
        if len(keep) + len(refused) < len(ds):
            log.warning("%s: dropped %d of %d samples longer than %s (image tokens included)",
                        split, len(ds) - len(keep) - len(refused), len(ds), label)
        return Subset(ds, keep) if len(keep) < len(ds) else ds

    def collate(self, samples: list[Sample]) -> PromptBatch:
        return PromptBatch(samples=samples, messages=[self.render(s) for s in samples])

    def _loader(self, split: str, batch_size: int, shuffle: bool) -> StatefulDataLoader:
        """A ``StatefulDataLoader``: Lightning saves its position and shuffle state in every checkpoint, so
        a resumed run sees the prompts an uninterrupted run would have seen, this epoch and the next.

        Making an iterator never draws from the global RNG that sampling uses: the loader's worker seeds
        and the shuffle each have a generator of their own, seeded from the run's seed
        (:func:`lit_grpo.rng.run_seed`: the same on every rank, unlike the per-rank sampling stream, so the
        ranks' shares of the data stay disjoint). They must be two generators: the loader restores the shuffle
        generator as it was before the epoch's permutation, which would miss the worker-seed draw made after it
        from a shared generator (the next epoch's order would differ from the uninterrupted run's).
        """
        if split not in self.datasets:
            raise RuntimeError(f"no {split} dataset configured: set data.{split} in the config")
        seed, ranks = run_seed(), self._ranks()
        sampler = DistributedSampler(self.datasets[split], shuffle=True, seed=seed, **ranks) if shuffle and ranks \
            else None
        loader = StatefulDataLoader(self.datasets[split], batch_size=batch_size, shuffle=shuffle and sampler is None,
                                    sampler=sampler, collate_fn=self.collate, num_workers=self.num_workers,
                                    generator=torch.Generator().manual_seed(seed))  # the worker seeds' generator
        if shuffle and sampler is None:
            # the shuffle's generator, not the loader's: one generator for both would replay the wrong draws on resume
            loader.sampler.generator = torch.Generator().manual_seed(seed)
        if sampler is not None:
            # the loader of a resumed run is made before Lightning
            # sets the epoch: set it here (resumed_epoch's docstring)
            sampler.set_epoch(resumed_epoch(self.trainer))
        return loader

    def _ranks(self) -> dict[str, int]:
        """``num_replicas`` and ``rank`` of this process's share of the training data when it is one of several
        (the strategy's data-parallel ranks), else empty.

        Several ranks shuffle with a ``DistributedSampler`` built here: its order is a function of the seed and the
        epoch alone, so a resumed run (the loader fast-forwarded to its saved position, the epoch set as
        :func:`resumed_epoch` says) sees what the uninterrupted run saw. Left to Lightning, the loader's own stateful sampler (not torch's
        ``RandomSampler``) would be wrapped, and the wrapped sampler's generator, saved by no one, would restart on
        resume: other prompts on every rank.
        """
        trainer = getattr(self, "trainer", None)
        ranks = getattr(trainer.strategy, "distributed_sampler_kwargs", None) if trainer is not None else None
        # one rank: the loader shuffles on its own; a DistributedSampler would only add a wrapper
        return dict(ranks) if ranks and ranks.get("num_replicas", 1) > 1 else {}

    def train_dataloader(self) -> StatefulDataLoader:
        return self._loader("train", self.batch_size, shuffle=True)

    def val_dataloader(self) -> StatefulDataLoader | list:
        if "val" not in self.datasets and self.specs["val"] is None:
            return []  # no validation configured: Lightning skips it
        return self._loader("val", self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> StatefulDataLoader:
        return self._loader("test", self.eval_batch_size, shuffle=False)

    def predict_dataloader(self) -> StatefulDataLoader:
        return self._loader("predict", self.eval_batch_size, shuffle=False)
