"""PromptStats reports each key as it was given, with the mean and SE over prompts of the per-prompt means."""

import math

import torch

from lit_grpo.metrics import PromptStats


def test_keys_come_back_as_given_and_figures_are_over_prompt_means():
    stats = PromptStats()
    # two prompts of 2 completions: prompt means 0.5 and 1.0 -> mean 0.75, SE = sd([0.5, 1]) / sqrt(2) = 0.25
    stats.update("val/sampled/reward/my_rewards.exact", torch.tensor([0.0, 1.0, 1.0, 1.0]), per_prompt=2)
    stats.update("val/sampled/reward/my_rewards_exact2", torch.tensor([1.0, 1.0]), per_prompt=1)
    out = stats.compute("val/sampled/")
    assert set(out) == {"val/sampled/reward/my_rewards.exact", "val/sampled/reward/my_rewards_exact2"}
    mean, se, n = out["val/sampled/reward/my_rewards.exact"]
    assert (mean, n) == (0.75, 2) and math.isclose(se, 0.25)
    assert stats.compute("val/sampled/") == {}  # compute resets what it reported
