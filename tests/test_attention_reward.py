"""The attention reward in the trainer: ASM from the log-prob pass's own forward, the reward column, the
TensorBoard overlays (read back from the event file), and evaluation."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from lit_grpo import GRPOConfig, GRPOModule
from lit_grpo.tasks.attention.analysis import foreground_share, image_panel
from lit_grpo.tasks.attention.meter import AttentionConfig, AttentionMeter
from lit_grpo.tasks.attention.overlays import AttentionOverlays
from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.data.sample import render_messages
from lit_grpo.config import PerfConfig
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec, required_columns
from lit_grpo.tasks.attention.reward import attention_reward
from lit_grpo.rollout import SamplingConfig, encode_prompts

REWARDS = [RewardSpec("format", kwargs={"tags": ["think"]}), RewardSpec("binary"), RewardSpec("attention", 0.5)]


def test_attention_reward_reads_the_asm_column():
    assert attention_reward(["a", "b", "c"], asm=[0.25, math.nan, 1.0])[0::2] == [0.25, 1.0]
    assert attention_reward(["a", "b"], asm=[0.1, math.nan]) == [0.1, None]  # no valid token: does not apply
    with pytest.raises(ValueError, match="asm"):
        attention_reward(["a"])
    assert required_columns(REWARDS) == {"asm"} and required_columns(REWARDS[:2]) == set()


def _module(tiny_model_dir, rewards=REWARDS, share_prefix=True, **grpo):
    return GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir), rewards=rewards, grpo=GRPOConfig(**grpo),
                      sampling=SamplingConfig(num_generations=4, max_completion_length=10),
                      perf=PerfConfig(engine="shared" if share_prefix else "plain"))


def _batch(samples):
    return PromptBatch(samples, [render_messages(s, "visualsphinx_seed") for s in samples])


def _count_scoring_forwards(module, prompt_length):
    """Policy forwards over prompt + completion outside ``generate`` (they pass ``use_cache=False``); the shared
    prefix's capture of the prompts' language-model inputs (prompt only) and its language-model calls are not."""
    calls = []
    module.policy.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.append(1) if kwargs.get("use_cache") is False
        and kwargs["input_ids"].shape[1] > prompt_length else None, with_kwargs=True)
    return calls


@pytest.mark.parametrize("share_prefix", [True, False], ids=["shared", "plain"])
@pytest.mark.parametrize("with_attention", [True, False])
def test_training_step_scores_asm_in_the_one_scoring_forward(with_attention, share_prefix, tiny_model_dir,
                                                             puzzle_samples):
    module = _module(tiny_model_dir, REWARDS if with_attention else REWARDS[:2], share_prefix)
    module.configure_optimizers = lambda: torch.optim.SGD(module.trainable_parameters(), lr=0.0)
    opt = module.configure_optimizers()
    module.optimizers = lambda: opt
    module.lr_schedulers = lambda: None
    module.log_dict = module.log = lambda *a, **k: None
    batch = _batch(puzzle_samples[:2])
    prompt_length = encode_prompts(module.processor, batch.messages, [s.images for s in batch.samples])[
        "input_ids"].shape[1]
    calls = _count_scoring_forwards(module, prompt_length)
    torch.manual_seed(0)
    out = module.training_step(batch, 0)
    # num_iterations=1, beta=0: without the attention reward there is no log-prob pass at all (plain path: 1 = the
    # update; shared prefix: the update runs the language model on the prompts, then on the completions); with
    # it, exactly one more full-sequence forward, whose hooks give the ASM
    assert len(calls) == (1 if with_attention else 0) + (0 if share_prefix else 1)
    assert module.policy.config._attn_implementation == "sdpa"
    if not with_attention:
        assert out["measured"] == {} and module.passes.providers == {} and module.pass_columns == []
        return
    assert module.pass_columns == ["asm"] and isinstance(module.passes.providers["asm"], AttentionMeter)
    asm = out["measured"]["asm"].asm
    assert asm.shape == (8,) and ((asm >= 0) & (asm <= 1)).all()
    assert out["rewards"]["attention"] == pytest.approx(asm.tolist())
    fmt, binary = np.array(out["rewards"]["format"]), np.array(out["rewards"]["binary"])
    assert out["total"] == pytest.approx((fmt + binary + 0.5 * asm.numpy()).tolist(), abs=1e-6)


def test_attention_can_be_captured_for_logging_without_the_reward(tiny_model_dir, puzzle_samples):
    module = GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir), rewards=[RewardSpec("binary")],
                        attention=AttentionConfig(enabled=True), sampling=SamplingConfig(num_generations=2,
                                                                                        max_completion_length=6))
    batch = _batch(puzzle_samples[:2])
    rollout = module.rollout(batch, 2)
    logprobs = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    assert logprobs.old_logps is None and logprobs.measured["asm"].asm.shape == (4,)
    assert module.pass_columns == [] and logprobs.columns().keys() == {"asm"}  # no reward reads it
    with pytest.raises(ValueError, match="enabled"):
        GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir), rewards=REWARDS,
                   attention=AttentionConfig(enabled=False))


def test_micro_batched_scoring_gives_the_same_asm(tiny_model_dir, puzzle_samples):
    module = _module(tiny_model_dir, num_iterations=2)
    batch = _batch(puzzle_samples[:2])
    torch.manual_seed(0)
    rollout = module.rollout(batch, 4)
    whole = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    module.cfg.micro_batch_size = 3
    parts = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    torch.testing.assert_close(parts.measured["asm"].asm, whole.measured["asm"].asm, atol=1e-5, rtol=0)
    torch.testing.assert_close(parts.old_logps, whole.old_logps, atol=1e-5, rtol=0)


def test_validation_computes_the_attention_reward(tiny_model_dir, puzzle_samples):
    module = _module(tiny_model_dir)
    records = module._eval_step(_batch(puzzle_samples[:2]), "val")
    values = [r["rewards"]["attention"] for r in records]
    assert len(values) == 2 and all(0 <= v <= 1 for v in values)


def test_overlays_are_logged_as_the_panels_read_back_from_tensorboard(tiny_model_dir, puzzle_samples, tmp_path):
    """The event file holds the HWC panel exactly (no double scaling, no CHW mix-up) and the ASM histogram."""
    from types import SimpleNamespace

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lit_grpo.loggers import TensorBoardLogger

    module = _module(tiny_model_dir)
    batch = _batch(puzzle_samples[:2])
    torch.manual_seed(0)
    scores = module.passes.logprob_pass(module.policy, module.rollout(batch, 4),
                                        [s.images for s in batch.samples]).measured["asm"]
    logger = TensorBoardLogger(save_dir=str(tmp_path), name="", version="")  # writes into tmp_path
    AttentionOverlays(num_completions=2, side=200).log_attention(SimpleNamespace(loggers=[logger]), scores,
                                                                 batch.samples, 4, step=3)
    logger.finalize("success")
    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0, "histograms": 0})
    events.Reload()
    assert sorted(events.Tags()["images"]) == ["train/rollout/attention/overlay/0", "train/rollout/attention/overlay/1"]
    hist = events.Histograms("train/rollout/attention/asm")[0]
    assert hist.step == 3 and hist.histogram_value.num == 8
    assert hist.histogram_value.sum == pytest.approx(float(scores.asm.sum()), rel=1e-5)
    logged = events.Images("train/rollout/attention/overlay/1")[0]
    import io

    pic = np.asarray(Image.open(io.BytesIO(logged.encoded_image_string)).convert("RGB"))
    image = batch.samples[0].images[0]
    title = f"step 3, completion 1: ASM {float(scores.asm[1]):.3f} (uniform attention: {foreground_share(image):.3f})"
    expected = image_panel(image, scores.maps[1], scores.grids[1], 0, 200, title=title, columns=2, font_px=12)
    assert pic.shape == expected.shape and pic.shape[1] > pic.shape[0]  # two rows of two 200 px wide tiles
    assert np.abs(pic.astype(float) - expected * 255).max() <= 1.0
    # the first tile is the puzzle image itself (white background stays white)
    assert (pic[:, :5] == 255).mean() > 0.5
