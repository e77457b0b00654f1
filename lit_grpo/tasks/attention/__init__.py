"""The attention reward (ASM) and its analysis: the meter that measures it from the final layer's attention,
the reward, heatmaps and the helpers the notebook imports. Importing it registers the ``attention`` reward."""

from lit_grpo.tasks.attention import reward  # noqa: F401  (registers the attention reward)
