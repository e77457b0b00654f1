"""lit_grpo: GRPO for vision-language models in PyTorch Lightning.

``from lit_grpo import GRPOModule`` imports the module on first use (PEP 562), so importing one part of the
package (``lit_grpo.grpo``, the maths) does not import the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["EvalConfig", "GRPOConfig", "GRPOModule", "SFTModule"]
_WHERE = {"EvalConfig": "lit_grpo.module", "GRPOConfig": "lit_grpo.module", "GRPOModule": "lit_grpo.module",
          "SFTModule": "lit_grpo.sft"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'lit_grpo' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
