"""Where a name in a config points, checked before any model work or download: a local file or folder, or a hub id.

Relative paths (``checkpoints/demo``, ``data/embedded/...``) are read from the folder the command runs from. A
name that is not there is looked for in :func:`search_roots` (the folder of each ``--config`` file and the
folders above it, the folders above the current one, and the clone that holds the installed lit_grpo): found
there, or its first part a folder there, it is a local path given from another folder, refused in one line
naming where it looked and where to run from, with no network call (:func:`wrong_folder`). Any other name shaped
``owner/name`` is a hub id: offline (``HF_HUB_OFFLINE``) it must be in the local cache (the callers check that);
online :func:`check_hub` asks the hub once, without retries, whether it can be reached and holds that repository.

:func:`refuse_before_imports` gives the wrong-folder errors from the command line and the config files alone, before
``python -m lit_grpo`` imports Lightning, torch and transformers (about 5 s on 2 cores): the commonest first mistake,
README's command run from another folder, is one line in a fraction of a second.

:func:`read_config` is the one reader of config files (and config text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import yaml

from lit_grpo.settings import ConfigError

HUB_TIMEOUT_S = 10.0
"""Seconds the one request of :func:`check_hub` may take."""


def search_roots(config_files: Iterable[str] = ()) -> list[Path]:
    """Folders a relative path may have been meant from: each config file's folder and the folders above it (the
    last file first: it overrides the others), the folders above the current one, and the folder holding the
    ``lit_grpo`` package (a clone's root); not the current folder itself (the one a relative path is read from)
    nor the filesystem's root."""
    roots: list[Path] = []
    for f in reversed(list(config_files)):
        folder = Path(f).expanduser().resolve().parent
        roots += [folder, *folder.parents]
    roots += [*Path.cwd().parents, Path(__file__).resolve().parents[2]]  # the folder holding lit_grpo/
    here, seen, out = Path.cwd().resolve(), set(), []
    for root in roots:
        if root not in seen and root != here and root != Path(root.anchor):
            seen.add(root)
            out.append(root)
    return out


def wrong_folder(name: str, path: str, roots: Iterable[Path]) -> str | None:
    """The one-line error for a relative ``path`` that is not in the current folder but is (or whose first folder
    is) in one of ``roots``; None when it is neither (then it may be a hub id)."""
    rel = Path(path)
    if not path or rel.is_absolute() or path.startswith("~") or (Path.cwd() / rel).exists():
        return None
    roots = list(roots)
    here = Path.cwd()
    found = next((r for r in roots if (r / rel).exists()), None)
    if found is not None:
        return (f"{name} {path!r} is not in {here}, the folder this command runs from (relative paths in configs "
                f"and on the command line are read from there), but {found / rel} exists: run the command from "
                f"{found} (cd {found}), or give the path from here")
    head = rel.parts[0] if len(rel.parts) > 1 else None
    found = next((r for r in roots if (r / head).is_dir()), None) if head else None
    if found is not None:
        return (f"{name} {path!r} does not exist: looked in {here} (where this command runs) and in {found}, "
                f"which has {head}/; relative paths are read from the folder the command runs from")
    return None


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key given twice in one mapping of a config (YAML or JSON)."""


def _twice(key: Any, first: str = "") -> DuplicateKeyError:
    return DuplicateKeyError(None, None, f"key {key!r} given twice in one mapping{first}")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """``json.loads``'s ``object_pairs_hook``: a JSON object, refusing a key given twice (JSON keeps the last)."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _twice(key)
        seen[key] = value
    return seen


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: YAML requires unique keys, and PyYAML keeps
    the last one silently, so a second ``lr:`` further down a config would win unseen."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: keys given beside it override its keys
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                mark = first.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the constructor below refuses it
                continue
            if mark is not key_node.start_mark:
                exc = _twice(key, f", first on line {mark.line + 1}")
                exc.problem_mark = key_node.start_mark
                raise exc
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """``text`` read as YAML, or as JSON where it is no YAML, refusing a key given twice in one mapping.

    Raises:
        DuplicateKeyError: a key given twice in one mapping.
        yaml.YAMLError: neither valid YAML nor JSON (the YAML error).
    """
    try:
        return yaml.load(text, Loader=_UniqueKeys)
    except DuplicateKeyError:
        raise
    except yaml.YAMLError:
        try:  # JSON that is no YAML (a tab before a key, as json.dump(indent="\t") writes), as jsonargparse reads it
            return json.loads(text, object_pairs_hook=_unique_pairs)
        except ValueError:
            pass
        raise


def read_config(path: str, text: bool = False) -> Any:
    """What a config file (``~`` expanded) holds, or config text given inline as jsonargparse allows it
    (``--config "{model: ...}"``; with ``text``, any value that names no file, as ``--trainer="a: 1"``), read as YAML:
    the one reader of config files.

    Raises:
        ConfigError: the file is missing or not valid YAML (naming line and column; a key given twice in one
            mapping is not valid), or not UTF-8 (naming the line).
    """
    file = Path(path).expanduser()
    # text that starts with "{" and names no file is inline YAML, as jsonargparse accepts it
    inline = not file.is_file() and (text or path.lstrip().startswith("{")) or "\n" in path
    try:
        return load_yaml(path if inline else file.read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError):
        raise ConfigError(wrong_folder("config file", path, search_roots())
                          or f"config file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        # the line of the bad byte: counted from the raw bytes, the text never decoded
        line = file.read_bytes()[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {line}: byte {exc.object[exc.start:exc.start + 1]!r} is not UTF-8; "
                          "save the config as UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem if isinstance(exc, DuplicateKeyError) else \
            f"not valid YAML ({getattr(exc, 'problem', None) or exc})"
        raise ConfigError(f"{path}{at}: {what}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None


def config_tree(path: str) -> dict:
    """The mapping :func:`read_config` finds; ``{}`` when there is none
    (:func:`lit_grpo.settings.args.check_config_file` says why)."""
    try:
        tree = read_config(path, text=True)
    except ConfigError:
        return {}
    return tree if isinstance(tree, dict) else {}


def check_hub(repo_id: str, repo_type: str, name: str, here: Path | None = None) -> None:
    """Ask the hub once (no retries, :data:`HUB_TIMEOUT_S`) whether it holds ``repo_id`` (``repo_type``: ``model``
    or ``dataset``).

    Raises:
        FileNotFoundError: one line naming ``name``, where it looked here (``here / repo_id``) and what the hub
            said: unreachable (and the way to run offline), or no such repository (or a private one without a
            token). A server error is not raised here: the download will say what it is.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    local = (here or Path.cwd()) / repo_id
    info = HfApi().dataset_info if repo_type == "dataset" else HfApi().model_info
    try:
        info(repo_id, timeout=HUB_TIMEOUT_S)
    except RepositoryNotFoundError:
        raise FileNotFoundError(f"{name} {repo_id!r} is no {'file or ' if repo_type == 'dataset' else ''}folder here "
                                f"({local}), and the hub has no {repo_type} {repo_id} (or it is private: log in "
                                "with `hf auth login` or set HF_TOKEN)") from None
    except HfHubHTTPError:
        return
    except Exception as exc:  # no answer at all: DNS, refused connection, timeout, proxy
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise FileNotFoundError(f"{name} {repo_id!r} is no {'file or ' if repo_type == 'dataset' else ''}folder here "
                                f"({local}), and the hub cannot be reached to look for it as a hub id ({reason}); "
                                "give a local path, or download it first and set HF_HUB_OFFLINE=1") from None


SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}
"""The splits each subcommand reads (``test`` falls back to ``val``, ``predict`` to ``test`` then ``val``)."""
_POLICY = ("model", "init_args", "policy", "name_or_path")
SPECIAL_CKPT = ("last", "best", "hpc", "registry")
"""``ckpt_path`` values Lightning resolves itself (not files)."""


def refuse_before_imports(args: list[str]) -> str | None:
    """The one-line error for a ``--config`` file, model folder, checkpoint or data file given by a relative path
    from another folder than the one it is in (:func:`wrong_folder`), read from ``args`` (``python -m lit_grpo``'s
    arguments) and the config files alone: the message the full check (:mod:`lit_grpo.settings.preflight`) gives later,
    found before the imports it needs.

    None (the full check decides) when there is no such path; when the arguments set a checked key in a form
    this does not read (a whole ``--model`` or ``--data.val`` block, a ``class_path`` change, an interpolation,
    an unreadable config file); when they ask for help or ``--print_config``; and when a checked path is not here
    and not in :func:`search_roots` either (it may be a hub id). Several such paths: the first, and how many more
    (as the full check counts them, when nothing else is wrong).
    """
    from lit_grpo.settings.argv import iter_options

    if not args or args[0] not in SPLITS:
        return None
    subcommand, tree, files, opaque = args[0], {}, [], set()
    for key, value, _ in iter_options(args[1:]):
        if key in ("h", "help", "print_config") or key.startswith("print_config") or key.endswith(".help"):
            return None
        if key in ("config", "c"):
            if not value or value.lstrip().startswith("{") or "\n" in value:
                return None  # inline YAML: left to the full check
            if not Path(value).expanduser().is_file():
                return wrong_folder("config file", value, search_roots())
            try:
                loaded = read_config(value) or {}
            except ConfigError:  # the full check names the problem
                return None
            if not isinstance(loaded, dict):
                return None
            loaded = loaded.get(subcommand) if isinstance(loaded.get(subcommand), dict) else loaded
            model = loaded.get("model")
            if isinstance(model, dict) and set(model) - {"class_path", "init_args", "dict_kwargs"}:
                return None  # a subclass's options without init_args: left to the full check
            if _class_path(loaded) not in (None, _class_path(tree)) and _class_path(tree) is not None:
                return None  # another model class: jsonargparse may drop the earlier init_args
            _merge(tree, loaded)
            files.append(value)
            continue
        parts = key.split(".")
        if parts in (["model"], ["model", "class_path"]):
            return None  # another model class: its options are read otherwise
        if parts[:2] == ["model", "policy"]:  # the short form of a subclass's option
            parts = ["model", "init_args", *parts[1:]]
        if value is not None and tuple(parts) in (_POLICY, ("ckpt_path",)) or \
                (value is not None and len(parts) == 3 and parts[0] == "data" and parts[2] == "path"):
            _set(tree, parts, value)
        else:
            opaque.add(tuple(parts))
    roots = search_roots(files)
    problems = [wrong_folder(name, path, roots) for name, path in _checked_paths(tree, subcommand, opaque)]
    if not problems or None in problems:  # a path found nowhere may be a hub id: the full check asks the hub
        return None
    from lit_grpo.errors import first_and_more

    return first_and_more(problems)


def _checked_paths(tree: dict[str, Any], subcommand: str, opaque: set[tuple[str, ...]]) -> list[tuple[str, str]]:
    """``(name, path)`` of each relative path in ``tree`` that is not here and that the full check reads, in its
    order (the checkpoint, the data splits, the model folder); a key that an argument not read here may set
    (``opaque``: a block above it, or what decides whether it is used) is skipped."""
    def set_otherwise(key: tuple[str, ...], *deciding: tuple[str, ...]) -> bool:
        return any(key[:len(o)] == o or any(o[:len(d)] == d for d in deciding) for o in opaque)

    def missing(path: Any) -> bool:
        return isinstance(path, str) and "${" not in path and bool(path) and not Path(path).expanduser().exists()

    out = []
    ckpt = tree.get("ckpt_path")
    if ckpt not in SPECIAL_CKPT and not set_otherwise(("ckpt_path",)) and missing(ckpt):
        out.append(("ckpt_path", ckpt))
    data = tree.get("data") if isinstance(tree.get("data"), dict) else {}
    specs = {k: (data.get(k), k) if isinstance(data.get(k), dict) else None for k in ("train", "val", "test",
                                                                                         "predict")}
    for split, fallback in (("test", "val"), ("predict", "test")):
        specs[split] = specs[split] or specs[fallback]
    for split in SPLITS[subcommand]:
        if specs[split] is None:
            continue
        spec, source = specs[split]
        if set_otherwise(("data", source, "path"), ("data", source, "generate")):
            continue
        generate = spec.get("generate")
        if isinstance(generate, dict) and generate.get("path") is not None and \
                (spec.get("path") is None or Path(str(spec["path"])) == Path(str(generate["path"]))):
            continue  # the split reads the file its generate block writes
        if missing(spec.get("path")):
            out.append((f"data.{split}.path", spec["path"]))
    policy = _get(tree, _POLICY[:3])
    if isinstance(policy, dict) and policy.get("embedded") is None and \
            not set_otherwise(_POLICY, _POLICY[:3] + ("embedded",)) and missing(policy.get("name_or_path")):
        out.append((".".join(_POLICY), policy["name_or_path"]))
    return out


def _class_path(tree: dict[str, Any]) -> Any:
    model = tree.get("model")
    return model.get("class_path") if isinstance(model, dict) else model


def _merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _get(tree: dict[str, Any], parts: Iterable[str]) -> Any:
    for part in parts:
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _set(tree: dict[str, Any], parts: list[str], value: str) -> None:
    for part in parts[:-1]:
        tree = tree.setdefault(part, {}) if isinstance(tree.get(part, {}), dict) else {}
    tree[parts[-1]] = value
