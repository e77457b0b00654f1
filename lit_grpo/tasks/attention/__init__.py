"""The attention reward (ASM) and its analysis: the meter that measures it from the final layer's attention,
the reward, heatmaps and the helpers the notebook imports."""
