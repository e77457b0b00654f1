"""The attention reward (ASM) and its analysis: the meter that measures it from the final layer's attention,
the reward, heatmaps and the helpers the notebook imports. Importing it registers the ``attention`` reward, the
``asm`` column's provider (the meter) and the overlay callback's drawing."""

from lit_grpo.tasks.attention import meter, reward  # noqa: F401  (register the asm column and the attention reward)
