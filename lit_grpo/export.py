"""A plain ``save_pretrained`` folder from a training checkpoint: a single file, or a sharded checkpoint's folder.

    python -m lit_grpo.export checkpoints/run/last.ckpt checkpoints/run_export [--merge]

Checkpoints hold only the trainable weights (the LoRA adapter, or the fine-tuned language model and projector) and
the run's settings (``hyper_parameters.policy``); the export loads the model the run started from
(``policy.name_or_path``, LoRA as configured), puts the checkpoint's weights in, and writes it with its processor: the
adapter with LoRA (``--merge``: merged into a whole model), else the whole model. The folder loads by path as
``model.policy.name_or_path`` (or ``lora.adapter_path``) for evaluation and in the notebooks. One process, no GPU:
a sharded checkpoint is read whole, whatever number of ranks wrote it.

The folder computes the trained policy's logits (``tests/test_export_matrix.py``, every family and tuning mode,
figures in docs/models.md): a merge unties a tied weight that an adapter changes (:func:`untie_adapted`), a merge of a
bfloat16 / float16 LoRA run is refused (:func:`check_merge`), and ``generation_config.json`` stops where the
rollouts stopped (:func:`generation_config`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lit_grpo import environment
from lit_grpo.errors import InputError
from lit_grpo.families import unwrap
from lit_grpo.policy import LoRAConfig, PolicyConfig, load_policy
from lit_grpo.runs import SHARDED_META, check_checkpoint_file


def policy_config(value: PolicyConfig | dict[str, Any]) -> PolicyConfig:
    """The run's policy settings as saved in a checkpoint's ``hyper_parameters`` (a dict from the command line)."""
    if isinstance(value, PolicyConfig):
        return value
    # ``embedded`` may stay a mapping: load_policy builds the demo task's group from it
    return PolicyConfig(**{k: LoRAConfig(**v) if k == "lora" and isinstance(v, dict) else v for k, v in value.items()})


def read_checkpoint(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any], dict[str, Any] | None]:
    """``(trainable weights by name, hyper-parameters, environment)`` of the checkpoint ``path`` (a file, or a sharded
    folder read whole in this process); the environment is what trained it (:mod:`lit_grpo.environment`; None in a
    checkpoint written before runs recorded it).

    Raises:
        InputError: a model folder, not a whole checkpoint, or one without the run's settings.
    """
    import torch.distributed.checkpoint as dcp

    path = Path(path)
    # a model folder has config.json and no meta.pt: the common mix-up, named before any checkpoint check
    if path.is_dir() and (path / "config.json").is_file() and not (path / SHARDED_META).exists():
        raise InputError(f"{path} is a model folder (save_pretrained), not a training checkpoint: it already loads as "
                         "model.init_args.policy.name_or_path; export takes a checkpoint, e.g. "
                         "checkpoints/<run>/last.ckpt")
    check_checkpoint_file(path)
    if path.is_dir():
        meta = torch.load(path / SHARDED_META, weights_only=False)
        stored = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
        # empty tensors of the recorded sizes and dtypes: dcp.load fills them in place
        weights = {k.removeprefix("state_dict."): torch.empty(v.size, dtype=v.properties.dtype)
                   for k, v in stored.items() if k.startswith("state_dict.")}
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            # no_dist: one process reads every rank's shards, so no process group is needed
            dcp.load({"state_dict": weights}, checkpoint_id=path, no_dist=True)
    else:
        meta = torch.load(path, map_location="cpu", weights_only=False)  # onto the CPU: the export needs no GPU
        weights = meta["state_dict"]
    if "policy" not in meta.get("hyper_parameters", {}):
        raise InputError(f"checkpoint {path} does not record its policy settings (hyper_parameters.policy): it was "
                         "not written by a lit_grpo policy module")
    return weights, meta["hyper_parameters"], meta.get(environment.CHECKPOINT_KEY)


def unsharded_policy(cfg: PolicyConfig, weights: dict[str, Tensor], prefix: str = "policy.") -> tuple[nn.Module, Any]:
    """``(model, processor)``: the policy ``cfg`` starts from, with ``weights`` (names under ``prefix``, the
    trainable ones of a run) loaded into it; every one must find its parameter.

    Raises:
        InputError: naming weights the model does not have.
    """
    # gradient checkpointing off: the export runs no backward, so it would only slow a forward down
    model, processor = load_policy(dataclasses.replace(cfg, gradient_checkpointing=False))
    own = {k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)}
    # non-strict: the checkpoint holds only trainable weights, the frozen rest comes from name_or_path; an unexpected
    # name is refused, a missing one is a frozen weight
    unexpected = model.load_state_dict(own, strict=False).unexpected_keys
    if unexpected:
        raise InputError(f"{len(unexpected)} checkpoint weights are not in {cfg.name_or_path}'s model, e.g. "
                         f"{unexpected[:3]}: the checkpoint was written with another model or LoRA setting")
    return model.eval(), processor


def untie_adapted(model: nn.Module) -> list[str]:
    """Give every weight that a LoRA layer adapts and that is tied to another module (Granite's ``lm_head`` and
    ``embed_tokens``, ``tie_word_embeddings``) a copy of its own, and set ``tie_word_embeddings`` false in every
    config of ``model``: merging the adapter into the shared weight would also change the module that shares it,
    which the adapter never changed during training (a LoRA on ``lm_head`` would move every input embedding).
    Returns the names of the weights given their own copy (none: ``model`` is left as it is)."""
    shared: dict[int, list[str]] = {}
    # remove_duplicate=False lists every name of a shared tensor: a tie shows as one id under several names
    for name, p in model.named_parameters(remove_duplicate=False):
        shared.setdefault(id(p), []).append(name)
    copied = []
    # only ties in which an adapted layer takes part: untying anything else would change nothing but the file size
    for names in (n for n in shared.values() if len(n) > 1 and any(".base_layer." in x for x in n)):
        for name in names[1:]:
            owner, _, attr = name.rpartition(".")
            module = model.get_submodule(owner)
            setattr(module, attr, nn.Parameter(getattr(module, attr).detach().clone(), requires_grad=False))
            copied.append(name)
    configs = [m.config for m in model.modules() if hasattr(m, "config")] if copied else []
    # the text config too: a VLM keeps tie_word_embeddings there, and a reload would tie the copies again
    for config in configs + [getattr(c, "get_text_config", lambda: None)() for c in configs]:
        if config is not None and getattr(config, "tie_word_embeddings", False):
            config.tie_word_embeddings = False
    return copied


def save_pretrained(model: nn.Module, processor, out: str | Path, merge: bool = False) -> Path:
    """Write ``model`` (a LoRA model: its adapter, or the merged model with ``merge``) and ``processor`` to ``out``.
    A merge unties the weights an adapter changes (:func:`untie_adapted`), so the merged model computes what the
    adapted one did."""
    if merge and hasattr(model, "merge_and_unload"):
        # deep-copied: merge_and_unload changes the model in place, and the callback's model may still be in use
        model = copy.deepcopy(model)
        untie_adapted(model)
        model = model.merge_and_unload()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    name_transformers_processor(out, getattr(unwrap(model).config, "model_type", None), processor)
    return out


def name_transformers_processor(out: Path, model_type: str | None, processor) -> None:
    """Name the family's ``transformers`` processor class (``Qwen2_5_VLProcessor``) in ``out``'s processor and
    tokenizer configs where ``processor`` is this project's image-only rebuild (``ImageOnlyQwenProcessor``, which
    :func:`lit_grpo.families.load_processor` makes again from the model type): under the rebuild's name
    ``AutoProcessor`` elsewhere finds no processor class and silently returns the bare tokenizer."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    real = PROCESSOR_MAPPING_NAMES.get(model_type or "")
    if not type(processor).__module__.startswith("lit_grpo.") or not isinstance(real, str):
        return
    for name in ("processor_config.json", "tokenizer_config.json"):
        file = out / name
        if file.is_file():
            content = json.loads(file.read_text())
            if content.get("processor_class") == type(processor).__name__:
                file.write_text(json.dumps({**content, "processor_class": real}, indent=2, sort_keys=True) + "\n")


def generation_config(model: nn.Module, processor, cfg: PolicyConfig, sampling: Any = None):
    """A copy of ``model``'s ``generation_config`` that samples as the run's rollouts did: it stops on every stop id
    the run used (:func:`lit_grpo.policy.stop_token_ids`: the tokenizer's and generation config's EOS, the chat
    template's end of turn, ``policy.extra_stop_tokens``), never emits an image token (``suppress_tokens``), and
    samples with the run's ``temperature``, ``top_p``, ``top_k`` and ``max_completion_length`` (``max_new_tokens``)
    when ``sampling`` (the checkpoint's) records them. ``generate`` from the exported folder then stops where the
    rollouts stopped."""
    from lit_grpo.policy import image_token_ids, stop_token_ids

    never = image_token_ids(model, processor)
    gen = copy.deepcopy(model.generation_config)
    gen.eos_token_id = stop_token_ids(model, processor, cfg.extra_stop_tokens, set(never))
    # suppress_tokens: generate from the folder never emits an image token, as the rollouts never did
    gen.suppress_tokens = list(never) or None
    if sampling is not None:
        get = (lambda k: sampling.get(k)) if isinstance(sampling, dict) else (lambda k: getattr(sampling, k, None))
        # do_sample: the rollouts sampled, so the folder's default generate does too
        gen.do_sample, gen.temperature, gen.top_p = True, get("temperature"), get("top_p")
        top_k = get("top_k")  # 0 (off, the default) written as 0: left out, transformers would sample with 50
        gen.top_k, gen.max_new_tokens = 0 if top_k is None else top_k, get("max_completion_length")
    return gen


def check_merge(cfg: PolicyConfig, merge: bool) -> None:
    """Refuse a merge that cannot give the trained policy: a LoRA adapter of a ``bfloat16`` / ``float16`` policy
    merged into its weights rounds ``W + B A`` to that dtype, where the trained policy added ``B A x`` to ``W x``
    (a logit moves by about one unit in the last place of the dtype: 0.008 in bfloat16 on the tiny test models).

    Raises:
        InputError: naming the dtype and what to do instead."""
    # float32 keeps W + BA close enough to W x + BA x; in a 16-bit dtype the rounding moves the logits
    if merge and cfg.lora is not None and cfg.dtype != "float32":
        raise InputError(f"a merged export of a policy.dtype {cfg.dtype} LoRA run is not the trained policy: "
                         f"merging rounds W + BA to {cfg.dtype}, which moves the logits (by about 0.008 in bfloat16); "
                         f"export the adapter (no merge) and load it with PEFT on the base in {cfg.dtype}, or train in float32")


def check_not_source(out: Path, cfg: PolicyConfig) -> None:
    """Refuse to export into the folder the run started from (``policy.name_or_path`` or ``lora.adapter_path`` of
    ``cfg``, through any path to it): that model would be replaced, and every checkpoint of the run would then
    resume on another one.

    Raises:
        InputError: naming the folder."""
    sources = [cfg.name_or_path, cfg.lora.adapter_path if cfg.lora else None]
    for source in filter(None, sources):
        # resolved paths: a symlink or a relative spelling of the source folder is still the source folder
        if Path(source).exists() and Path(out).exists() and Path(out).resolve() == Path(source).resolve():
            raise InputError(f"{out} is the folder the run started from (its policy's {source}): exporting there "
                             "would replace that model, and every checkpoint of the run would then resume on "
                             "another one; export into a new folder")


def check_export(path: Path, out: Path, cfg: PolicyConfig, weights: dict[str, Tensor], merge: bool = False) -> None:
    """Refuse an export that would not be what the user means: an ``out`` that holds files already (an earlier
    export, or the folder the run started from: ``policy.name_or_path`` or ``lora.adapter_path`` of ``cfg``, whose
    every other checkpoint would then resume on another model), weights of ``path`` that are not all finite, a
    merge that would not be the trained policy (:func:`check_merge`).

    Raises:
        InputError: naming the folder or the weight, and what to do."""
    check_merge(cfg, merge)
    check_not_source(out, cfg)
    if out.is_symlink() and not out.exists():  # a link to nowhere: writing through it would create its target
        raise InputError(f"{out} is a symbolic link to {os.readlink(out)}, which does not exist: export into a new "
                         "or empty folder (nothing was written)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out} is not an empty folder: export into a new or empty folder (nothing was written)")
    # a NaN or inf weight means the run diverged: an export of it would only fail later, on its first generate
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            bad = int((~torch.isfinite(tensor)).sum())
            raise InputError(f"{path}: weight {name} has {bad} of {tensor.numel()} values that are NaN or infinite: "
                             "the run diverged before this checkpoint; export an earlier one")


def export_checkpoint(path: str | Path, out: str | Path, merge: bool = False) -> Path:
    """Write the policy of the checkpoint ``path`` as a ``save_pretrained`` folder ``out`` (see the module): refused
    by :func:`check_export` first, then written with the files readable as the user's umask allows.

    Raises:
        InputError: :func:`check_export`'s, :func:`read_checkpoint`'s and :func:`unsharded_policy`'s."""
    path, out = Path(path), Path(out)
    weights, hparams, trained_in = read_checkpoint(path)
    cfg = policy_config(hparams["policy"])
    check_export(path, out, cfg, weights, merge)
    model, processor = unsharded_policy(cfg, weights)
    written = save_pretrained(model, processor, out, merge)
    # a generation config is written beside an adapter too
    generation_config(model, processor, cfg, hparams.get("sampling")).save_pretrained(written)  # beside an adapter too
    if trained_in is not None:  # what trained these weights, for whoever cites them
        (written / "environment.json").write_text(json.dumps(trained_in, indent=1) + "\n")
    return readable(written)


def readable(folder: Path) -> Path:
    """Give the files under ``folder`` the modes the user's umask allows: some writers make private files (0600),
    and a model folder is for others to read. Returns ``folder``."""
    # os.umask can only be read by setting it: set to 0 and restored at once
    umask = os.umask(0)
    os.umask(umask)
    for file in Path(folder).rglob("*"):
        if file.is_file():
            file.chmod(0o666 & ~umask)  # no execute bits: a model folder holds data files only
    return Path(folder)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lit_grpo.export", description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", help="a checkpoint file, or a sharded checkpoint's folder")
    parser.add_argument("out", help="the folder to write")
    parser.add_argument("--merge", action="store_true", help="merge a LoRA adapter into a whole model")
    args = parser.parse_args(argv)
    try:
        out = export_checkpoint(args.checkpoint, args.out, args.merge)
    except (InputError, FileNotFoundError) as exc:
        parser.exit(1, f"error: {exc}\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
