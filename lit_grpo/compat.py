"""Every private attribute or module of another library that lit_grpo's core uses, each behind one named function.

A private name can change in any release; kept here, one file shows what an upgrade must re-check, and
``tests/test_compat.py`` checks each name against the installed libraries (the versions it was checked on are
stated there). Each function says why no public API serves. Libraries are imported inside the functions: the
``.pth`` hook of :mod:`lit_grpo.torchvision_cpu` imports this module while torchvision is still importing.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

# -- Lightning's loggers --------------------------------------------------------------------------------------


def tensorboard_version_unset(logger: Any) -> bool:
    """Whether a Lightning ``TensorBoardLogger`` was given no ``version``: the public ``version`` property picks the
    next free folder on first read and stores it, so it cannot tell "not set" apart."""
    return logger._version is None


def continue_tensorboard_version(logger: Any, version: Any, purge_step: int) -> None:
    """Point a TensorBoard logger that has not written yet at an earlier run's folder ``version``, its writer purging
    that folder's events from ``purge_step`` on. Lightning takes both only as constructor arguments (no setter); the
    writer is made from ``_kwargs`` on first use."""
    logger._version = version
    logger._kwargs["purge_step"] = purge_step


def resume_wandb_run(logger: Any, run_id: str) -> None:
    """Make a W&B logger that has not started its run resume the run ``run_id`` (Lightning passes ``resume="allow"``
    to ``wandb.init``). Lightning takes the id only as a constructor argument: ``version`` has no setter and
    ``wandb.init``'s arguments are kept in ``_wandb_init``."""
    logger._id = logger._wandb_init["id"] = run_id


def started_wandb_run(logger: Any) -> Any:
    """The W&B run a Lightning ``WandbLogger`` has started, or None: the public ``experiment`` starts one."""
    return logger._experiment


def wandb_logger_offline(logger: Any) -> bool:
    """Whether the W&B logger was built with ``offline=True`` (Lightning keeps the argument only privately)."""
    return bool(logger._offline)


def wandb_display_name(logger: Any) -> str | None:
    """The run's display name given to a W&B logger (its ``name`` argument): the public ``name`` is the project."""
    return logger._name


# -- Lightning's trainer and callbacks --------------------------------------------------------------------------


def request_graceful_stop(trainer: Any) -> None:
    """Make the trainer stop after this step as it does on SIGTERM (the loops read ``trainer.received_sigterm``, a
    read-only property over its signal connector; Lightning has no public way to ask for that stop)."""
    trainer._signal_connector.received_sigterm = True


def last_saved_checkpoint(callback: Any) -> tuple[int | None, str | None]:
    """``(step, path)`` of the last checkpoint file a ``ModelCheckpoint`` wrote, whatever its kind (top-k or last);
    ``(None, None)`` for another checkpoint callback. The public ``last_model_path`` / ``best_model_path`` name
    only one kind each, and neither says its step."""
    return getattr(callback, "_last_global_step_saved", None), getattr(callback, "_last_checkpoint_saved", None)


def rich_available() -> bool:
    """Whether Lightning's ``RichProgressBar`` can be built (``rich`` installed, at the version Lightning needs):
    Lightning's own check, so that the two never disagree."""
    from lightning.pytorch.callbacks.progress.rich_progress import _RICH_AVAILABLE

    return bool(_RICH_AVAILABLE)


LOADER_FINISHED_KEY = "_iterator_finished"
"""The entry of a torchdata ``StatefulDataLoader``'s state that says its epoch's iterator is exhausted (torchdata's
``_ITERATOR_FINISHED``). Lightning saves the loader's state at its length, before the ``StopIteration`` that sets it;
the loader has no public way to say so."""


def mark_loader_finished(state: dict) -> None:
    """Mark a saved ``StatefulDataLoader`` state as exhausted (no-op for another loader's state)."""
    if LOADER_FINISHED_KEY in state:
        state[LOADER_FINISHED_KEY] = True


# -- TensorBoard ------------------------------------------------------------------------------------------------


def summary_file_writer(writer: Any) -> Any:
    """The ``FileWriter`` behind a ``SummaryWriter`` (made again when closed), or None for another writer. A ready
    ``Summary`` protocol buffer (the HPARAMS tab's, a Custom Scalars layout) can only be written through it: the
    public ``add_hparams`` writes into a sub-folder, and ``add_custom_scalars`` takes no step."""
    get = getattr(writer, "_get_file_writer", None)
    return get() if get is not None else None


def is_tensorboard_writer_thread(thread: Any) -> bool:
    """Whether ``thread`` is TensorBoard's event-file writer thread (its class is private to TensorBoard and
    reachable only by name: the write failures it raises are the logger's to report)."""
    return type(thread).__name__ == "_AsyncWriterThread"


# -- torch and torchvision ----------------------------------------------------------------------------------------


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``fn`` applied to every leaf of a nest of containers (lists, tuples, dicts and those registered with torch's
    pytree, as transformers' ``ModelOutput``); torch has no public pytree module yet."""
    from torch.utils._pytree import tree_map as _tree_map

    return _tree_map(fn, tree)


def is_view(tensor: Any) -> bool:
    """Whether ``tensor`` is a view of another tensor (torch exposes a view's base only as ``_base``)."""
    return tensor._base is not None


def dispatch_has_kernel(op: str) -> bool:
    """Whether the operator ``op`` (``"namespace::name"``) has a kernel registered with the dispatcher; torch has no
    public query of its dispatcher's table."""
    import torch

    return torch._C._dispatch_has_kernel(op)


def torchvision_ops_loaded() -> bool:
    """Whether torchvision's C++ operators loaded (torchvision says so only through ``extension._has_ops``)."""
    # ``import ... as`` binds the submodule itself: this runs from an import hook while ``torchvision`` is still
    # importing, when ``torchvision.extension`` is not yet an attribute of the half-made package
    import torchvision.extension as ext

    return ext._has_ops()


# -- argparse (jsonargparse's parsers are argparse parsers) --------------------------------------------------------


def help_formatter(parser: Any) -> Any:
    """The formatter the parser's ``--help`` uses; argparse builds help only through this private factory."""
    return parser._get_formatter()


def argument_groups(parser: Any) -> list[tuple[str | None, list]]:
    """``(title, actions)`` of each argument group, in ``--help``'s order, the title None for argparse's two default
    groups (positionals, options: titled by argparse's own words); argparse keeps its groups and their actions only
    in private lists (``format_help`` walks the same ones)."""
    default = (parser._positionals, parser._optionals)
    return [(None if any(group is d for d in default) else group.title, list(group._group_actions))
            for group in parser._action_groups]


def has_option(parser: Any, option: str) -> bool:
    """Whether ``parser`` defines the option string ``option`` (``"--model"``): argparse has no public lookup."""
    return option in parser._option_string_actions


# -- jsonargparse's parsing --------------------------------------------------------------------------------------


@contextlib.contextmanager
def lists_replace() -> Iterator[None]:
    """While open: a list that a later config file or flag gives whole replaces the earlier list of that option.
    jsonargparse (4.32-4.53) adapts a list of the earlier one's length item by item with the earlier item as
    ``prev_val``, in its private ``adapt_typehints``, which every level of its parsing calls through the module: a
    dataclass item or a ``class_path`` item is merged into the earlier one (``rewards: [{name: format}]`` over
    ``[{name: binary, weight: 0.5}]`` kept the weight 0.5). No public setting turns that off; the wrapper drops
    ``prev_val`` for a whole list. A list extended with ``+=`` and a flag into a list's last item
    (``--trainer.callbacks.init_args.monitor=x``, a nested key, not a list) still build on the earlier one."""
    import jsonargparse

    _typehints = getattr(jsonargparse, "_typehints", None)
    adapt = getattr(_typehints, "adapt_typehints", None)
    # already open (a parse inside a parse), or a jsonargparse without the name (its own merging then applies)
    if adapt is None or getattr(adapt, "replaces_lists", False):
        yield
        return

    @functools.wraps(adapt)
    def replacing(val: Any, typehint: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(val, list) and not kwargs.get("append"):
            kwargs["prev_val"] = None
        return adapt(val, typehint, *args, **kwargs)

    replacing.replaces_lists = True
    _typehints.adapt_typehints = replacing
    try:
        yield
    finally:
        _typehints.adapt_typehints = adapt


# -- jsonargparse's errors ---------------------------------------------------------------------------------------

_KEY_LOCALS = {"_check_type": "self", "_load_config": "self", "_check_value_key": "key", "apply_config": "dest"}
"""jsonargparse's functions that raise an error for one key -> the local that holds it (``self``: the action, whose
public argparse ``dest`` is the key)."""
_VALUE_RAISERS = ("raise_unexpected_value", "raise_union_unexpected_value")
"""jsonargparse's functions that raise for a refused value, holding it in their local ``val``."""


def _raising_frame(exc: BaseException) -> Any:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame if tb is not None else None


def _in_jsonargparse(frame: Any) -> bool:
    return frame is not None and str(frame.f_globals.get("__name__", "")).startswith("jsonargparse")


def raised_by_jsonargparse(exc: BaseException) -> bool:
    """Whether jsonargparse's own code raised ``exc`` (a report it wraps around a cause), not a constructor it
    called: read from where the error was raised, not from its words."""
    return type(exc).__module__.startswith("jsonargparse") or _in_jsonargparse(_raising_frame(exc))


def jsonargparse_refusal(chain: list[BaseException]) -> tuple[list[str], list[Any]]:
    """What jsonargparse refused, from its chain of errors (outermost first): the key of each error that names one
    (``model``, then ``grpo.beta`` of the model's own parser) and every refused value (innermost last; a nested
    override's own value). jsonargparse's errors carry neither as attributes, only in their wording; the frames that
    raised them hold both as locals (:data:`_KEY_LOCALS`, :data:`_VALUE_RAISERS`)."""
    import argparse
    import inspect

    keys: list[str] = []
    values: list[Any] = []
    for exc in chain:
        frame = _raising_frame(exc)
        if not _in_jsonargparse(frame):
            continue
        name, local = frame.f_code.co_name, frame.f_locals
        holder = local.get(_KEY_LOCALS.get(name, ""), None)
        key = holder.dest if isinstance(holder, argparse.Action) else holder
        if isinstance(key, str) and key and (not keys or keys[-1] != key):
            keys.append(key)
        if name in _VALUE_RAISERS and local.get("val", inspect.Parameter.empty) is not inspect.Parameter.empty:
            val = local["val"]
            values.append(getattr(val, "val", val) if type(val).__name__ == "NestedArg" else val)
    return keys, values


def jsonargparse_unknown_key(chain: list[BaseException]) -> str | None:
    """The key jsonargparse found no option for, relative to the parser that refused it (``grpo.betta`` of the
    model's parser, ``data.batch_sise`` of the root's), or None: the ``key`` of the ``check_values`` that raised one
    of ``chain`` (a config's key), else the first unrecognised argument of a ``parse_args`` in the chain or on the
    stack (a flag's: the root parser calls its ``error`` from there, with no error to chain)."""
    import inspect

    def unrecognised(frame: Any) -> str | None:
        unk = frame.f_locals.get("unk") if frame.f_code.co_name == "parse_args" and _in_jsonargparse(frame) else None
        return str(unk[0]).lstrip("-").split("=")[0].rstrip("+") if isinstance(unk, list) and unk else None

    for exc in reversed(chain):  # innermost first
        tb = exc.__traceback__
        while tb is not None:
            frame, local = tb.tb_frame, tb.tb_frame.f_locals
            if frame.f_code.co_name == "check_values" and _in_jsonargparse(frame) and tb.tb_next is None \
                    and isinstance(local.get("key"), str):
                return local["key"]
            if unrecognised(frame):
                return unrecognised(frame)
            tb = tb.tb_next
    frame = inspect.currentframe()
    while frame is not None and not unrecognised(frame):
        frame = frame.f_back
    return unrecognised(frame) if frame is not None else None


def jsonargparse_class(chain: list[BaseException]) -> type | None:
    """The class of the innermost ``class_path`` jsonargparse was reading when it raised (the ``val_class`` of its
    ``adapt_typehints``: an optimizer, a callback, a logger), or None: its parameters are the valid init_args."""
    import inspect

    found = None
    for exc in chain:  # outermost first, each traceback outer frame first: the last class seen is the innermost
        tb = exc.__traceback__
        while tb is not None:
            frame, cls = tb.tb_frame, tb.tb_frame.f_locals.get("val_class")
            if frame.f_code.co_name == "adapt_typehints" and _in_jsonargparse(frame) and inspect.isclass(cls):
                found = cls
            tb = tb.tb_next
    return found


def jsonargparse_list_indices(chain: list[BaseException]) -> list[int]:
    """The index of the list item jsonargparse was reading when it raised, for each list on the way (outermost
    first): the ``n`` of its ``adapt_typehints``'s loop over a list, which its keys leave out."""
    frames: dict[int, int] = {}
    for exc in chain:
        tb = exc.__traceback__
        while tb is not None:
            frame, n = tb.tb_frame, tb.tb_frame.f_locals.get("n")
            if frame.f_code.co_name == "adapt_typehints" and _in_jsonargparse(frame) and type(n) is int:
                frames.setdefault(id(frame), n)
            tb = tb.tb_next
    return list(frames.values())


def jsonargparse_import_path(exc: BaseException) -> str | None:
    """The class path jsonargparse failed to import when it raised ``exc`` (an ``ImportError`` or
    ``AttributeError``), or None: its importer's ``name`` argument, which its error holds only in words."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "import_object" and _in_jsonargparse(frame):
            name = frame.f_locals.get("name")
            return name if isinstance(name, str) else None
        tb = tb.tb_next
    return None


# -- jsonargparse's help -----------------------------------------------------------------------------------------


from jsonargparse import DefaultHelpFormatter  # noqa: E402


class HelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help formatter with one seam: :meth:`type_text` words an option's type, or returns None to
    keep jsonargparse's wording. A subclass outside this module overrides it (``lit_grpo.settings``), so that the
    private method stays here and this module imports nothing of the package's."""

    def type_text(self, hint: Any) -> str | None:
        return None

    def _get_type_str(self, action) -> str | None:
        # jsonargparse words an option's type only in this private method, from the private ``_typehint`` it keeps
        # on the action; no public hook shows a type without its Annotated bounds
        hint = getattr(action, "_typehint", None)
        text = None if hint is None else self.type_text(hint)
        return text if text is not None else super()._get_type_str(action)
