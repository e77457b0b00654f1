"""``lit_grpo/compat.py`` against the installed libraries: each private name it uses exists on the real objects and
does what compat.py says it does, on the versions listed in :data:`CHECKED`; outside them a test skips, saying which
range was checked, until someone re-checks the names and widens it."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import threading
from importlib import metadata

import pytest
import torch
from packaging.version import Version

from lit_grpo import compat

CHECKED = {
    # distribution: (lowest, below) checked. Each range's lower end: the names (and the code using them) read in
    # that release's wheel; its upper end: just above the version this file ran on.
    "lightning": ("2.4", "2.7"),       # ran on 2.6.6; read in 2.4.0
    "tensorboard": ("2.15", "2.22"),   # ran on 2.21.0; _AsyncWriterThread read in 2.15.0
    "jsonargparse": ("4.32", "4.54"),  # ran on 4.53.0; 4.32.0 walks the same argparse lists itself
    # the names of the functions that raise its errors and of their locals (the key, the value, the unrecognised
    # arguments, the class path): read in 4.53.0 only
    "jsonargparse:errors": ("4.53", "4.54"),
    # adapt_typehints merging a list item by item into an earlier list of its length: read in 4.53.0 only
    "jsonargparse:lists": ("4.53", "4.54"),
    "torchdata": ("0.11", "0.12"),     # ran on 0.11.0
    "torch": ("2.13", "2.14"),         # ran on 2.13.0+cpu
    "torchvision": ("0.28", "0.29"),   # _has_ops read in 0.28.0's wheel (not installed where this was written)
}
PYTHON = ((3, 10), (3, 14))  # argparse's private lists and factory: unchanged since argparse; ran on 3.11


def checked(name: str) -> None:
    """Skip unless the distribution ``name`` (or ``dist:part``, a part of it with a range of its own) is installed
    at a version in :data:`CHECKED`."""
    dist = name.split(":")[0]
    try:
        found = Version(metadata.version(dist))
    except metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed")
    low, below = CHECKED[name]
    if not Version(low) <= found < Version(below):
        pytest.skip(f"compat.py's private names of {name} were checked on {low} <= {dist} < {below}, not {found}: "
                    f"check them against {found} and widen tests/test_compat.py's CHECKED")


def test_the_version_gate_skips_outside_the_checked_range(monkeypatch):
    monkeypatch.setitem(CHECKED, "torch", ("0.1", "0.2"))
    with pytest.raises(pytest.skip.Exception, match=r"checked on 0.1 <= torch < 0.2, not 2\."):
        checked("torch")
    monkeypatch.setitem(CHECKED, "torch:part", ("0.1", "0.2"))  # a part's own range, of its distribution's version
    with pytest.raises(pytest.skip.Exception, match=r"names of torch:part were checked on 0.1 <= torch < 0.2"):
        checked("torch:part")


def test_tensorboard_logger_version_and_purge_step(tmp_path):
    """An unset version is told apart without choosing one; a continued version is that folder, and its writer purges
    the folder's events from ``purge_step`` (TensorBoard's purge marker: an event at that step opening a session)."""
    checked("lightning"), checked("torch"), checked("tensorboard")
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    logger = TensorBoardLogger(tmp_path, name="t")
    assert compat.tensorboard_version_unset(logger)
    assert not (tmp_path / "t").exists()  # asking did not pick (or make) a version folder
    compat.continue_tensorboard_version(logger, 7, purge_step=5)
    assert not compat.tensorboard_version_unset(logger)
    assert logger.version == 7 and logger.log_dir == str(tmp_path / "t" / "version_7")
    logger.experiment.flush()
    (events,) = (tmp_path / "t" / "version_7").glob("events.out.tfevents.*")
    starts = [e.step for e in EventFileLoader(str(events)).Load() if e.HasField("session_log")]
    assert starts == [5]


def test_summary_file_writer_and_its_thread(tmp_path):
    checked("torch"), checked("tensorboard")
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.writer import FileWriter

    writer = SummaryWriter(str(tmp_path))
    file_writer = compat.summary_file_writer(writer)
    assert isinstance(file_writer, FileWriter) and file_writer.get_logdir() == str(tmp_path)
    assert [t for t in threading.enumerate() if compat.is_tensorboard_writer_thread(t)]  # the writer's thread
    assert not compat.is_tensorboard_writer_thread(threading.current_thread())
    writer.close()
    again = compat.summary_file_writer(writer)  # made again after close, as the HPARAMS tab needs
    assert isinstance(again, FileWriter) and again is not file_writer
    writer.close()
    assert compat.summary_file_writer(object()) is None


def test_wandb_logger_names(tmp_path):
    """W&B's own private names are not used: these are Lightning's ``WandbLogger``'s (building one needs wandb)."""
    checked("lightning")
    pytest.importorskip("wandb")
    from lightning.pytorch.loggers import WandbLogger

    logger = WandbLogger(name="display", project="proj", offline=True, save_dir=str(tmp_path))
    assert compat.wandb_display_name(logger) == "display" and logger.name == "proj"
    assert compat.started_wandb_run(logger) is None and compat.wandb_logger_offline(logger)
    assert logger.version is None
    compat.resume_wandb_run(logger, "abc123")
    assert logger.version == "abc123" and logger._wandb_init["id"] == "abc123"  # what wandb.init will be given
    assert compat.started_wandb_run(logger) is None  # nothing started


def test_graceful_stop_and_last_saved_checkpoint(tmp_path):
    """The request reaches the trainer's public ``received_sigterm``; after a 2-step fit, the checkpoint callback's
    last written file is ``epoch=0-step=2.ckpt`` at step 2 (Lightning's default name)."""
    checked("lightning")
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.demos.boring_classes import BoringModel

    cb = ModelCheckpoint(dirpath=tmp_path)
    trainer = L.Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[cb], default_root_dir=tmp_path)
    assert not trainer.received_sigterm
    compat.request_graceful_stop(trainer)
    assert trainer.received_sigterm
    trainer._signal_connector.received_sigterm = False  # a fresh start for the fit below
    trainer.fit(BoringModel())
    assert compat.last_saved_checkpoint(cb) == (2, str(tmp_path / "epoch=0-step=2.ckpt"))
    assert compat.last_saved_checkpoint(L.Callback()) == (None, None)


def test_rich_available_is_lightnings_own_check():
    checked("lightning")
    from lightning.pytorch.callbacks import RichProgressBar

    assert compat.rich_available() is (importlib.util.find_spec("rich") is not None)  # rich 10.2.2+ or none here
    if compat.rich_available():
        RichProgressBar()  # builds


def test_stateful_loader_finished_key():
    checked("torchdata")
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.stateful_dataloader import _ITERATOR_FINISHED

    assert _ITERATOR_FINISHED == compat.LOADER_FINISHED_KEY
    loader = StatefulDataLoader(list(range(4)), batch_size=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert state[compat.LOADER_FINISHED_KEY] is False
    compat.mark_loader_finished(state)
    assert state[compat.LOADER_FINISHED_KEY] is True
    list(it)
    assert loader.state_dict()[compat.LOADER_FINISHED_KEY] is True  # what torchdata itself writes at the end
    other = {"x": 1}
    compat.mark_loader_finished(other)
    assert other == {"x": 1}


def test_torch_names():
    checked("torch")
    from torch.nn.modules.dropout import _DropoutNd

    from lit_grpo.policy import DROPOUTS

    x = torch.arange(4.0)
    assert compat.is_view(x[1:]) and not compat.is_view(x) and not compat.is_view(x[1:].clone())
    out = compat.tree_map(lambda t: t * 2 if isinstance(t, torch.Tensor) else t, {"a": [x, (x[:1], "s")]})
    assert out["a"][0].tolist() == [0.0, 2.0, 4.0, 6.0] and out["a"][1][0].tolist() == [0.0] and out["a"][1][1] == "s"
    assert compat.dispatch_has_kernel("aten::add.Tensor")
    assert not compat.dispatch_has_kernel("lit_grpo_compat_test::nothing")
    # policy.DROPOUTS names torch's dropouts publicly: every torch subclass of the private base is among them
    assert {c for c in _DropoutNd.__subclasses__() if c.__module__.startswith("torch.")} == set(DROPOUTS)


def test_torchvision_ops_loaded():
    checked("torchvision")
    try:
        import torchvision.extension
    except Exception as exc:  # a CUDA torchvision beside a CPU torch fails at import (lit_grpo.torchvision_cpu)
        pytest.skip(f"torchvision does not import here: {exc}")
    assert compat.torchvision_ops_loaded() is bool(torchvision.extension._has_ops())


def test_argparse_names_on_jsonargparse():
    checked("jsonargparse")
    if not PYTHON[0] <= sys.version_info[:2] < PYTHON[1]:
        pytest.skip(f"argparse's private names were checked on Python {PYTHON[0]} to below {PYTHON[1]}")
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(prog="p")
    group = parser.add_argument_group("Group G")
    group.add_argument("--alpha", type=int, default=3, help="the alpha")
    titles = [title for title, _ in compat.argument_groups(parser)]
    assert titles == [None, None, "Group G"]  # argparse's positionals and options: untitled, whatever their words
    groups = dict(compat.argument_groups(parser))
    assert [a.option_strings for a in groups["Group G"]] == [["--alpha"]]
    assert compat.has_option(parser, "--alpha") and not compat.has_option(parser, "--beta")
    formatter = compat.help_formatter(parser)  # cli_help formats actions with it inside jsonargparse's help
    assert isinstance(formatter, parser.formatter_class)
    formatter.start_section("Section S")
    formatter.add_text("some text")
    formatter.end_section()
    assert formatter.format_help() == "Section S:\n  some text\n"


class _Inner:
    def __init__(self, r: int = 1):
        self.r = r


def _refused(parser, args):
    from jsonargparse import ArgumentError

    with pytest.raises(ArgumentError) as err:
        parser.parse_args(args)
    chain, ex = [], err.value
    while ex is not None:
        chain.append(ex)
        ex = ex.__cause__ or ex.__context__
    return chain


def test_jsonargparse_refusal_reads_keys_and_values_where_they_were_raised():
    """The key parts and the refused value of real jsonargparse errors (a plain option, an option of a class given
    by class_path, whose own parser names the inner key), and the class path of a failed import: each a value this
    test chose, found without reading jsonargparse's words."""
    checked("jsonargparse:errors")
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--n", type=int)
    parser.add_argument("--inner", type=_Inner)
    chain = _refused(parser, ["--n=seven"])
    keys, values = compat.jsonargparse_refusal(chain)
    assert keys == ["n"] and values[-1] == "seven"
    assert compat.raised_by_jsonargparse(chain[0]) and not compat.raised_by_jsonargparse(ValueError("x"))

    chain = _refused(parser, [f"--inner={__name__}._Inner", "--inner.r=many"])
    keys, values = compat.jsonargparse_refusal(chain)
    assert keys[0] == "inner" and keys[-1] == "r" and values[-1] == "many"

    chain = _refused(parser, [f"--inner={__name__}._Nowhere"])
    assert compat.jsonargparse_unknown_key(chain) is None  # a failed import names no unknown key
    assert isinstance(chain[-1], (ImportError, AttributeError))
    assert compat.jsonargparse_import_path(chain[-1]) == f"{__name__}._Nowhere"
    assert compat.jsonargparse_import_path(ValueError("x")) is None


def test_jsonargparse_unknown_key_reads_the_key_it_found_no_option_for():
    """A key of a config (raised by its ``check_values``), a flag of a class's own parser (its ``parse_args``'s
    unrecognised arguments) and a flag of the parser itself (no error to chain: read from the stack while its
    ``error`` runs): each the key this test gave, relative to the parser that refused it."""
    checked("jsonargparse:errors")
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--n", type=int)
    parser.add_argument("--inner", type=_Inner)
    given = f"--inner={{class_path: {__name__}._Inner, init_args: {{r: 2, rr: 3}}}}"
    assert compat.jsonargparse_unknown_key(_refused(parser, [given])) == "rr"
    assert compat.jsonargparse_unknown_key(_refused(parser, [f"--inner={__name__}._Inner", "--inner.q=3"])) == "q"

    seen = []

    class Recording(ArgumentParser):
        def error(self, message, ex=None):
            seen.append(compat.jsonargparse_unknown_key([]))
            raise SystemExit(2)

    root = Recording()
    root.add_argument("--n", type=int)
    with pytest.raises(SystemExit):
        root.parse_args(["--n=1", "--nn=2"])
    assert seen == ["nn"]


def test_jsonargparse_list_indices_reads_the_item_it_was_reading():
    """The index of the refused item of a list option, and of an item of a list inside it, outermost first."""
    checked("jsonargparse:errors")
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--items", type=list[int])
    parser.add_argument("--rows", type=list[list[int]])
    assert compat.jsonargparse_list_indices(_refused(parser, ["--items=[1, 2, x]"])) == [2]
    assert compat.jsonargparse_list_indices(_refused(parser, ["--rows=[[1], [2, 3, x]]"])) == [1, 2]
    assert compat.jsonargparse_list_indices([ValueError("x")]) == []


class _Outer:
    def __init__(self, inner: _Inner | None = None, q: int = 0):
        self.inner, self.q = inner, q


def test_jsonargparse_class_reads_the_class_it_was_reading():
    """The class given by class_path whose init_args jsonargparse refused: the innermost, for a class inside
    another's init_args; None for an error outside any class."""
    checked("jsonargparse:errors")
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--n", type=int)
    parser.add_argument("--outer", type=_Outer)
    given = f"--outer={{class_path: {__name__}._Outer, init_args: {{q: 1, qq: 2}}}}"
    assert compat.jsonargparse_class(_refused(parser, [given])) is _Outer
    given = (f"--outer={{class_path: {__name__}._Outer, init_args: {{inner: {{class_path: {__name__}._Inner, "
             "init_args: {rr: 3}}}}")
    assert compat.jsonargparse_class(_refused(parser, [given])) is _Inner
    assert compat.jsonargparse_class(_refused(parser, ["--n=x"])) is None


@dataclasses.dataclass
class _Item:
    name: str
    weight: float = 1.0


def test_lists_replace_drops_the_earlier_items_of_a_list_given_whole():
    """jsonargparse merges a later list into an earlier one of its length, item by item; inside ``lists_replace``
    the later list is taken as given, and the module's function is its own again after it."""
    checked("jsonargparse:lists")
    from jsonargparse import ActionConfigFile, ArgumentParser, _typehints

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument("--specs", type=list[_Item], default=[])
    given = ["--config", "{specs: [{name: a, weight: 0.5}]}", "--config", "{specs: [{name: b}]}"]
    assert [vars(i) for i in parser.parse_args(given).specs] == [{"name": "b", "weight": 0.5}]  # merged
    adapt = _typehints.adapt_typehints
    with compat.lists_replace(), compat.lists_replace():  # nested: one wrapper
        assert _typehints.adapt_typehints.__wrapped__ is adapt
        assert [vars(i) for i in parser.parse_args(given).specs] == [{"name": "b", "weight": 1.0}]
        appended = parser.parse_args([*given[:2], "--specs+={name: c}"]).specs
        assert [(i.name, i.weight) for i in appended] == [("a", 0.5), ("c", 1.0)]
    assert _typehints.adapt_typehints is adapt
