"""The attention reward r_attn: the ASM the log-prob pass computed from the policy's own attention.

Source: the physics reward-design paper (Granite Vision on PhyX), "attention-weight reward": the
fraction of the final layer's image attention that falls on foreground pixels, averaged over the
generated tokens (the Attention Score Mask). It needs no annotation and no external model; the
score itself is computed in :mod:`lit_grpo.tasks.attention.meter` during the trainer's no-grad log-prob pass and
reaches rewards as the ``asm`` column. ``Fmt + Acc + ASM`` is the reward list
``[{name: format}, {name: accuracy}, {name: attention, weight: w}]``.
"""

from __future__ import annotations

import math

from lit_grpo.rewards.registry import register_reward


@register_reward("attention", columns=("asm",))
def attention_reward(completions: list[str], asm: list[float] | None = None, **_) -> list[float]:
    """ASM of each completion, in [0, 1]; ``None`` (the term does not apply) where the completion has no valid
    token, so an empty completion keeps the total of its other terms (e.g. format 0).

    Raises:
        ValueError: no ``asm`` column, i.e. the reward runs outside a trainer that captures attention.

    >>> attention_reward(["a", "b"], asm=[0.25, float("nan")])
    [0.25, None]
    """
    if asm is None:
        raise ValueError("the attention reward needs the log-prob pass's 'asm' column; run it in GRPOModule, "
                         "which captures the final layer's attention whenever this reward is configured")
    if len(asm) != len(completions):
        raise ValueError(f"'asm' has {len(asm)} values for {len(completions)} completions")
    return [None if a is None or math.isnan(a) else float(a) for a in asm]
