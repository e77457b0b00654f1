"""Policy and reference policy: load any image-text-to-text model + processor, dtype, LoRA, frozen copies.

Reference policy for the KL term (``beta > 0``): with a fresh LoRA adapter the policy itself with
adapters disabled; when starting from an existing adapter or full fine-tuning a frozen copy of the
initial state. ``beta == 0`` loads none.
"""


import contextlib
import copy
import dataclasses
import difflib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from transformers import AutoModelForImageTextToText, PretrainedConfig
from annotated_types import Ge, Gt, Lt

from lit_grpo.families import load_processor
from lit_grpo.registry import built_group, option_slot
from lit_grpo.settings import Checked, Finite

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LANGUAGE_MODEL_ATTENTION = r".*(language_model|text_model).*\.(q_proj|k_proj|v_proj|o_proj)"
"""LoRA targets: the language model's attention projections (``text_model`` in Idefics3/SmolVLM)."""
END_OF_TURN_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<end_of_utterance>")
IMAGE_TOKEN_NAMES = ("<image>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>",
                     "<fake_token_around_image>", "<global-img>", "<video>", "<|image|>")


@dataclasses.dataclass
class LoRAConfig(Checked):
    """A PEFT LoRA adapter on the language model (the vision tower stays frozen by default)."""

    r: Annotated[int, Ge(1)] = 16
    """Rank."""
    alpha: Annotated[int, Gt(0)] = 32
    """Scaling numerator (``lora_alpha``)."""
    dropout: Annotated[float, Ge(0), Lt(1), Finite] = 0.0
    """Dropout on the adapter input (SFT only: GRPO runs the policy without dropout, see ``disable_dropout``)."""
    target_modules: str | list[str] = LANGUAGE_MODEL_ATTENTION
    """Regex (full match on module names) or list of names; the default keeps the vision tower out."""
    adapter_path: str | None = None
    """Start from an existing adapter (then the reference policy is a frozen copy of it)."""


@dataclasses.dataclass
class PolicyConfig(Checked):
    """Which model to train and how."""

    name_or_path: str = "ibm-granite/granite-vision-3.3-2b"
    """Hub id ``owner/name`` or local folder of an image-text-to-text model (``AutoModelForImageTextToText``); how
    the two are told apart: :func:`check_model_path`."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype: ``float32``, ``bfloat16`` or ``float16``."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    lora: LoRAConfig | None = None
    """LoRA adapter; ``None`` trains every language-model and projector weight (full fine-tune)."""
    freeze_vision_tower: bool = True
    """Keep the vision encoder frozen: in full fine-tuning, and with LoRA whatever ``lora.target_modules`` match
    (no adapter is put on a vision module; a loaded adapter's vision weights stay frozen)."""
    attn_implementation: str = "sdpa"
    """Attention kernel (``sdpa`` or ``eager``)."""
    embedded: Any = None  # a mapping or the embedded group's dataclass; typed on the command line (option_slot)
    """Build the offline embedded model into ``name_or_path`` first when that folder has no model (the demo task's
    option group: :class:`lit_grpo.tasks.demo.embedded.EmbeddedModelConfig`)."""
    local_files_only: bool = False
    """Never reach a hub (set ``HF_HUB_OFFLINE=1`` to the same effect)."""
    extra_stop_tokens: list[str] = dataclasses.field(default_factory=list)
    """Text that ends a completion besides EOS and the chat template's end-of-turn token; each string must encode
    to one token (``<|end|>``, ``" is"``), a string that encodes to several is refused."""


option_slot(PolicyConfig, "embedded", "embedded")  # typed by the demo task's EmbeddedModelConfig


def check_model_path(path: str, local_files_only: bool = False, name: str = "model folder",
                     roots: list[Path] | None = None) -> None:
    """Refuse a ``name_or_path`` that is neither an existing folder nor a usable hub id, before any download.

    A local folder: an existing folder, or a path starting with ``/``, ``.`` or ``~``, with more than one
    ``/``, or whose first part is a folder here (``checkpoints/x``). A relative path that is not here but is in
    one of ``roots`` (default :func:`lit_grpo.settings.paths.search_roots`: e.g. the clone, when the command runs from
    another folder) is refused saying where it looked and where to run from, with no network call
    (:func:`lit_grpo.settings.paths.wrong_folder`). Otherwise ``owner/name`` is a hub id, except that an ``owner`` that is
    a near-spelling of a folder here (``chekpoints/demo`` next to ``checkpoints/``) is refused as a misspelt
    folder; offline (``HF_HUB_OFFLINE=1`` or ``local_files_only``) a hub id must be in the local hub cache, and
    online one request without retries checks that the hub can be reached and has it
    (:func:`lit_grpo.settings.paths.check_hub`), unless it is in the cache.

    Raises:
        FileNotFoundError: naming the folder (and the folder it was probably meant to be).
    """
    from lit_grpo.settings.paths import check_hub, search_roots, wrong_folder

    p = Path(path).expanduser()
    # an existing folder wins over any hub id of the same spelling
    if p.is_dir():
        return
    # before the hub-shape test: a relative path meant for the clone is the common mistake, and needs no network
    elsewhere = wrong_folder(name, path, search_roots() if roots is None else roots)
    if elsewhere:
        raise FileNotFoundError(elsewhere)
    parts = path.split("/")
    # a first part that is a folder here makes it a local path (checkpoints/x), whatever its shape
    hub_shaped = (len(parts) == 2 and not path.startswith((".", "/", "~"))
                  and all(re.fullmatch(r"[\w.\-]+", x) for x in parts) and not Path(parts[0]).exists())
    if not hub_shaped:
        raise FileNotFoundError(f"{name} {path!r} does not exist ({p.resolve()}); give a folder saved with "
                                "save_pretrained (e.g. checkpoints/demo) or a hub id owner/name")
    here = [d.name for d in Path(".").iterdir() if d.is_dir() and not d.name.startswith(".")]
    # cutoff 0.8: only a near-spelling is taken for a typo; a real owner unlike every folder passes
    near = difflib.get_close_matches(parts[0], here, n=1, cutoff=0.8)
    if near:
        raise FileNotFoundError(f"{name} {path!r} does not exist (did you mean {near[0]}/{parts[1]}?); a hub id "
                                f"owner/name whose owner is spelt like a folder here is taken for a misspelt folder")
    from huggingface_hub import try_to_load_from_cache

    # the cache first: a cached id needs no request even online
    cached = isinstance(try_to_load_from_cache(path, "config.json"), str)
    # the spellings huggingface_hub itself reads as true for HF_HUB_OFFLINE
    if local_files_only or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        if not cached:
            raise FileNotFoundError(f"{name} {path!r} is no folder here ({p.resolve()}), and as a hub id it is not in "
                                    "the local hub cache (offline: HF_HUB_OFFLINE or local_files_only)")
    elif not cached:
        check_hub(path, "model", name)


def load_policy(cfg: PolicyConfig) -> tuple[nn.Module, object]:
    """Load ``(model, processor)``; prompts are left-padded; LoRA applied when configured.

    Raises:
        FileNotFoundError: a local model folder that does not exist.
    """
    path = cfg.name_or_path
    # a folder without config.json is no model yet: the demo's embedded group builds one there
    if cfg.embedded is not None and not (Path(path) / "config.json").is_file():
        built_group("embedded", cfg.embedded).save(path)  # the demo task builds it; a mapping gets its defaults
    check_model_path(path, cfg.local_files_only)
    kw = {"local_files_only": cfg.local_files_only}
    model = AutoModelForImageTextToText.from_pretrained(
        path, dtype=DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation, **kw
    )
    processor = load_processor(path, **kw)  # image-only rebuild for Qwen-VL / SmolVLM (no torchvision)
    tokenizer = getattr(processor, "tokenizer", processor)
    # generation appends after the last column: right padding would put pads between a short prompt and its completion
    tokenizer.padding_side = "left"
    # batching needs a pad id; the attention mask hides it, so EOS serves where the tokenizer has none
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if cfg.lora is not None:
        model = apply_lora(model, cfg.lora, cfg.freeze_vision_tower)
    if cfg.freeze_vision_tower:  # whatever LoRA targets: an adapter loaded from disk may hold vision weights too
        for name, p in model.named_parameters():
            if is_vision_parameter(name):
                p.requires_grad_(False)
    if cfg.gradient_checkpointing:
        # use_reentrant=False: the reentrant mode gives no gradient through a segment whose inputs need none (frozen
        # embeddings under LoRA); enable_input_require_grads covers models that still take the reentrant path
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    # the passes run full forwards and need no KV cache (an engine that wants one asks per call); transformers would
    # turn it off with a warning under gradient checkpointing anyway
    model.config.use_cache = False
    return model.train(), processor


DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
"""torch's dropout modules, by their public names (every subclass of torch's private ``_DropoutNd``:
``tests/test_compat.py``)."""


def disable_dropout(model: nn.Module, cfg: PolicyConfig | None = None) -> None:
    """Turn every dropout of ``model`` off: ``nn.Dropout`` modules (LoRA's included) get ``p = 0``, and float
    attributes named ``*dropout*`` of its modules (attention dropout read at forward time) and of its configs
    (sub-configs included) become 0; a LoRA dropout configured in ``cfg`` gets a one-line warning.

    GRPO needs it (as TRL does): the log-prob pass and the first update must run the same policy, so that the
    first iteration's importance ratio is exactly 1; with dropout they are two different random sub-networks.
    """
    if cfg is not None and cfg.lora is not None and cfg.lora.dropout > 0:
        rank_zero_warn(f"policy.lora.dropout {cfg.lora.dropout} is not applied: GRPO runs the policy without dropout "
                       "(the log-prob pass and the update must see the same policy)")
    for module in model.modules():
        if isinstance(module, DROPOUTS):
            # p = 0 rather than eval(): the policy stays in train mode, and transformers' checkpointing needs it
            module.p = 0.0
        # attention kernels read their dropout from a float attribute at forward time (dropout_p=self.attention_dropout)
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float):
                setattr(module, name, 0.0)
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    # some attention implementations read the config's dropout at forward time; text and vision sub-configs too
    configs = [inner.config]
    while configs:
        config = configs.pop()
        for name, value in list(vars(config).items()):
            if isinstance(value, PretrainedConfig):
                configs.append(value)
            elif "dropout" in name and isinstance(value, float):
                setattr(config, name, 0.0)


def is_vision_parameter(name: str) -> bool:
    """Parameters of the vision encoder (not the projector, which maps into the language model)."""
    # the names the families' vision encoders live under (LLaVA's vision_tower, Idefics3's vision_model, Qwen's visual)
    return any(k in name for k in ("vision_tower", "vision_model", ".visual.", "vision_encoder"))


def _targeted(name: str, targets: str | list[str]) -> bool:
    """Whether PEFT's ``target_modules`` rule picks module ``name`` (a regex: full match; a list: the name or its
    last parts)."""
    if isinstance(targets, str):
        # PEFT's own rule for a str target: a full match on the module's name
        return re.fullmatch(targets, name) is not None
    return any(name == t or name.endswith(f".{t}") for t in targets)


def apply_lora(model: nn.Module, cfg: LoRAConfig, freeze_vision_tower: bool = True) -> nn.Module:
    """Wrap ``model`` with a LoRA adapter (fresh, or loaded trainable from ``cfg.adapter_path``). With
    ``freeze_vision_tower`` a fresh adapter leaves out every vision module its targets match (one warning names how
    many), so nothing in the vision tower trains; :func:`load_policy` freezes a loaded adapter's vision weights."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if cfg.adapter_path:
        # is_trainable=True: PEFT loads an adapter frozen, for inference, by default
        return PeftModel.from_pretrained(model, cfg.adapter_path, is_trainable=True)
    # n + ".": a module name has no trailing dot, and ".visual." must match Qwen's vision module itself
    vision = [n for n, _ in model.named_modules() if n and is_vision_parameter(n + ".")] if freeze_vision_tower else []
    matched = [n for n in vision if _targeted(n, cfg.target_modules)]
    if matched:
        rank_zero_warn(f"policy.lora.target_modules matches {len(matched)} modules of the vision tower (e.g. "
                       f"{matched[0]}); they get no adapter, since policy.freeze_vision_tower is true")
    config = LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=cfg.target_modules,
                        # exclude_modules keeps the vision modules adapter-free even where the target regex matches them
                        exclude_modules=vision or None, bias="none")
    return get_peft_model(model, config)


def is_peft(model: nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


class ReferencePolicy:
    """Reference log-prob source for the KL term; ``model_context()`` yields the model to run.

    ``mode`` is ``"adapter_off"`` (fresh LoRA: the policy with adapters disabled) or ``"copy"`` (a
    frozen deep copy of the initial policy). The set of trainable parameters is restored after every
    ``adapter_off`` pass (PEFT can flip frozen adapters back to trainable when leaving the block).
    """

    def __init__(self, policy: nn.Module, from_existing_adapter: bool):
        # a fresh adapter's B matrices start at 0, so the policy with adapters off is exactly the initial policy
        if is_peft(policy) and not from_existing_adapter:
            self.mode, self.frozen = "adapter_off", None
        else:
            self.mode = "copy"
            # a loaded adapter or a full fine-tune has no such off switch: a frozen copy, at a model's memory
            self.frozen = copy.deepcopy(policy).eval().requires_grad_(False)

    @contextlib.contextmanager
    def model_context(self, policy: nn.Module) -> Iterator[nn.Module]:
        if self.mode == "copy":
            # the copy is no submodule of the LightningModule (not in its state_dict): Lightning never moves it, so it
            # follows the policy's device here
            if next(self.frozen.parameters()).device != next(policy.parameters()).device:
                self.frozen.to(next(policy.parameters()).device)
            yield self.frozen
            return
        trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
        try:
            with policy.disable_adapter():
                yield policy
        finally:
            for n, p in policy.named_parameters():
                p.requires_grad_(n in trainable)


def _token_id(tokenizer, token: str) -> int | None:
    ids = tokenizer.convert_tokens_to_ids([token])
    tid = ids[0] if ids else None
    # convert_tokens_to_ids gives the unknown token's id for a token the vocabulary lacks
    return None if tid is None or tid == tokenizer.unk_token_id else int(tid)


def stop_token_ids(model: nn.Module, processor, extra: list[str] | tuple = (), never: set[int] | None = None
                   ) -> list[int]:
    """Tokenizer EOS ∪ generation-config EOS ∪ the chat template's end-of-turn token ∪ ``extra``.

    ``extra`` holds text, each string one token where it follows other text in a completion (a special token such
    as ``<|end|>``, or a word piece such as ``" is"`` or ``"\\n"``): the sampler stops on that id. ``never``: ids the
    sampler never emits (the image tokens it suppresses).

    Raises:
        ValueError: a string of ``extra`` that is no or several tokens (it could never stop a completion:
            ``"</answer>"`` without an added token, a vocabulary spelling such as ``"Ġis"``, a lone byte piece), or
            one whose id is in ``never``.
    """
    tok = getattr(processor, "tokenizer", processor)
    ids: set[int] = {_stop_id(tok, token, never or set()) for token in extra}
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update([gen_eos] if isinstance(gen_eos, int) else list(gen_eos or []))  # an int or a list, by model
    template = getattr(processor, "chat_template", None) or getattr(tok, "chat_template", None) or ""
    for token in END_OF_TURN_TOKENS:
        tid = _token_id(tok, token)
        # only an end-of-turn token the chat template writes ends this model's turn
        if tid is not None and token in str(template):
            ids.add(tid)
    return sorted(ids)


def _text_ids(tok, text: str) -> list[int]:
    """The ids ``text`` encodes to where it follows other text: after an anchor letter, whose own ids are cut off (a
    tokenizer that puts ``▁`` before a text, as Llama-2's does, would otherwise give ``" }"`` for ``"}"``). When
    that is not one id (the anchor merged with the text, or an added token that matches only as a whole word), the
    ids of ``text`` alone, if they are one."""
    alone = tok(text, add_special_tokens=False)["input_ids"]
    anchor = tok("a", add_special_tokens=False)["input_ids"]
    joined = tok("a" + text, add_special_tokens=False)["input_ids"]
    after = joined[len(anchor):] if joined[:len(anchor)] == anchor and len(joined) > len(anchor) else alone
    return alone if len(after) != 1 and len(alone) == 1 else after


def _stop_id(tok, token: str, never: set[int]) -> int:
    """The one id the text ``token`` is (see :func:`stop_token_ids`)."""
    key = "policy.extra_stop_tokens"
    if not isinstance(token, str) or not token:
        raise ValueError(f"{key}: {token!r} is not text of one token (an empty string or not a string)")
    ids = _text_ids(tok, token)
    if len(ids) == 1 and ids[0] in never:
        raise ValueError(f"{key}: {token!r} is an image token, which the sampler never emits: it cannot stop a "
                         "completion")
    if len(ids) == 1:
        return int(ids[0])
    spelled = _token_id(tok, token)  # the vocabulary's own spelling of a token ("Ġis"): its text is what to give
    text = tok.decode([spelled]) if spelled is not None else None
    hint = f" (the vocabulary's spelling of the token whose text is {text!r}: give {text!r})" \
        if text and text != token and _text_ids(tok, text) == [spelled] else ""
    raise ValueError(f"{key}: {token!r} is not text of one token: it encodes as "
                     f"{tok.convert_ids_to_tokens(ids)}{hint}")


def image_token_ids(model: nn.Module, processor) -> list[int]:
    """Ids of every image/video placeholder or marker token; the sampler must never emit them."""
    tok = getattr(processor, "tokenizer", processor)
    ids: set[int] = set()
    cfg = model.config
    for attr in ("image_token_index", "image_token_id", "video_token_id", "vision_start_token_id",
                 "vision_end_token_id", "video_token_index"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and v >= 0:
            ids.add(v)
    names = list(IMAGE_TOKEN_NAMES) + [getattr(processor, "image_token", None) or ""]
    # Idefics3 / SmolVLM tile markers are sequence structure the processor writes, never text to sample
    names += [t for t in tok.get_vocab() if t.startswith("<row_") or t.startswith("<tile_")]
    for name in names:
        tid = _token_id(tok, name) if name else None
        if tid is not None:
            ids.add(tid)
    return sorted(ids)
