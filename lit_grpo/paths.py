"""Where a name in a config points, checked before any model work or download: a local file or folder, or a hub id.

Relative paths (``checkpoints/demo``, ``data/embedded/...``) are read from the folder the command runs from. A
name that is not there is looked for in :func:`search_roots` (the folder of each ``--config`` file and the
folders above it, the folders above the current one, and the clone that holds the installed lit_grpo): found
there, or its first part a folder there, it is a local path given from another folder, refused in one line
naming where it looked and where to run from, with no network call (:func:`wrong_folder`). Any other name shaped
``owner/name`` is a hub id: offline (``HF_HUB_OFFLINE``) it must be in the local cache (the callers check that);
online :func:`check_hub` asks the hub once, without retries, whether it can be reached and holds that repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

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
    roots += [*Path.cwd().parents, Path(__file__).resolve().parents[1]]  # the folder holding lit_grpo/
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
