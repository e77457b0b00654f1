"""lit_grpo: GRPO for vision-language models in PyTorch Lightning."""

from lit_grpo.module import EvalConfig, GRPOConfig, GRPOModule
from lit_grpo.sft import SFTModule

__version__ = "0.1.0"
__all__ = ["EvalConfig", "GRPOConfig", "GRPOModule", "SFTModule"]
