"""An exported model is the trained policy, for every family and tuning mode.

Each case loads a tiny model of a family (:mod:`lit_grpo.testing.zoo`) as a run does (``load_policy``), moves every
trainable weight (a LoRA adapter's B included, so the adapter is not the identity), writes the checkpoint the run
writes (``PolicyModule.on_save_checkpoint``: the trainable weights only), exports it with ``python -m
lit_grpo.export`` (adapter, and ``--merge``) and loads the folder with ``AutoModelForImageTextToText.from_pretrained``
(an adapter folder too: transformers loads its base). The logits of two prompts with an image each (left-padded)
must equal the policy's: exactly for a full fine-tune and a kept adapter, within :data:`MERGED` for a merged adapter
(float32 rounding of ``W + B A``). The processor read back encodes the prompts as the run's did, with its chat
template; greedy ``generate`` from the folder stops on the stop id the rollout engine stopped on.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
from pathlib import Path

import lightning
import pytest
import torch
from conftest import FAMILIES
from PIL import Image, ImageDraw

from lit_grpo.export import main as export
from lit_grpo.policy import DTYPES, LoRAConfig, PolicyConfig, disable_dropout, load_policy
from lit_grpo.rollout import encode_prompts

MERGED = 2e-6
"""Most |logit difference| of a merged float32 export (measured at most 4.8e-7 over the matrix: docs/models.md)."""
ATTENTION = LoRAConfig(r=4, alpha=8)
"""The default targets: the language model's attention projections."""
TARGETS = {
    "all-linear, vision too": LoRAConfig(r=4, alpha=8, target_modules="all-linear"),
    "lm_head": LoRAConfig(r=4, alpha=8, target_modules=["q_proj", "lm_head"]),
    "embed_tokens": LoRAConfig(r=4, alpha=8, target_modules=["v_proj", "embed_tokens"]),
}
"""LoRA target sets a user can set; ``all-linear`` runs with ``freeze_vision_tower: false`` (adapters in the
vision tower). ``llava_next`` (Granite) ties ``lm_head`` to ``embed_tokens``."""


def _prompts(processor):
    red = Image.new("RGB", (60, 44), "white")
    ImageDraw.Draw(red).rectangle([5, 5, 30, 30], fill=(200, 0, 0))
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
                for text in ("Which option? A B", "Count the shapes in the panel, then answer")]
    return encode_prompts(processor, messages, [[red], [Image.new("RGB", (50, 70), (20, 90, 200))]])


def _trained(cfg: PolicyConfig, folder: Path, sampling: dict | None = None):
    """``(policy, processor, checkpoint)``: the policy of ``cfg`` with every trainable weight moved (seeded), and
    the checkpoint file a run writes of it."""
    from lit_grpo.module import PolicyModule

    model, processor = load_policy(cfg)
    disable_dropout(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_((0.05 * torch.randn(p.shape, generator=g)).to(p.dtype))
    run = types.SimpleNamespace(policy=model)
    run._trainable_names = lambda: PolicyModule._trainable_names(run)
    ckpt = {"state_dict": {f"policy.{k}": v for k, v in model.state_dict().items()},
            "hyper_parameters": {"policy": cfg, "sampling": sampling},
            "pytorch-lightning_version": lightning.__version__}
    PolicyModule.on_save_checkpoint(run, ckpt)
    torch.save(ckpt, folder / "last.ckpt")
    return model.eval(), processor, folder / "last.ckpt"


def _logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**dict(inputs)).logits.float()


def _exported(ckpt: Path, out: Path, merge: bool, dtype: str = "float32"):
    """The folder ``python -m lit_grpo.export`` writes, loaded with ``from_pretrained``. A float32 adapter folder
    loads as a whole model (transformers loads its base); a bfloat16 one with ``PeftModel.from_pretrained`` on the
    base loaded in bfloat16, which keeps the adapter's weights in float32 as PEFT trained them (transformers' own
    adapter loading casts them to bfloat16)."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    export([str(ckpt), str(out), *(["--merge"] if merge else [])])
    if not (out / "adapter_config.json").exists() or dtype == "float32":
        return AutoModelForImageTextToText.from_pretrained(out).eval()
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    return PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(base, dtype=DTYPES[dtype]), out).eval()


def _check_processor(run_processor, out: Path, model_type: str) -> None:
    """The exported processor (read back as the project reads one) encodes as the run's, with its chat template;
    its config names the transformers processor class of the family."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    from lit_grpo.families import load_processor

    back = load_processor(str(out))
    assert type(back) is type(run_processor) and back.chat_template == run_processor.chat_template
    ours, theirs = _prompts(run_processor), _prompts(back)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert json.loads((out / "processor_config.json").read_text())["processor_class"] == \
        PROCESSOR_MAPPING_NAMES[model_type]


def _matrix_case(tmp_path, source: str, lora: LoRAConfig | None, freeze_vision: bool = True) -> dict[bool, float]:
    """``{merge: max |Δlogit|}`` of the exports of one trained policy (full fine-tune: one export)."""
    cfg = PolicyConfig(name_or_path=source, lora=lora, freeze_vision_tower=freeze_vision)
    policy, processor, ckpt = _trained(cfg, tmp_path)
    inputs = _prompts(processor)
    want = _logits(policy, inputs)
    found = {}
    for merge in ([False, True] if lora else [False]):
        out = tmp_path / f"export_{merge}"
        found[merge] = float((_logits(_exported(ckpt, out, merge), inputs) - want).abs().max())
    _check_processor(processor, out, policy.config.model_type if lora is None else
                     policy.get_base_model().config.model_type)
    return found


@pytest.mark.parametrize("lora", [None, ATTENTION], ids=["full", "lora"])
@pytest.mark.parametrize("family", FAMILIES)
def test_an_export_has_the_trained_policys_logits_and_processor(zoo_dir, tmp_path, family, lora):
    """Every family, full fine-tune and LoRA (kept as an adapter, merged): the exported folder's logits on two
    prompts with images are the policy's (exactly; a merge within MERGED)."""
    found = _matrix_case(tmp_path, zoo_dir(family), lora)
    assert found[False] == 0.0
    assert found.get(True, 0.0) <= MERGED, found


@pytest.mark.parametrize("family", ["llava_next", "qwen2_vl"])
@pytest.mark.parametrize("targets", sorted(TARGETS), ids=lambda t: t.replace(" ", "_").replace(",", ""))
def test_every_lora_target_set_exports_the_trained_policy(zoo_dir, tmp_path, family, targets):
    """Every target set on a model with tied embeddings (llava_next: Granite) and one without (qwen2_vl): an adapter
    on lm_head or embed_tokens merged into Granite's tied weight moved both modules (max |Δlogit| 2.0 and 27 before
    the export untied them); all-linear with the vision tower trainable."""
    found = _matrix_case(tmp_path, zoo_dir(family), TARGETS[targets], freeze_vision=not targets.startswith("all"))
    assert found[False] == 0.0 and found[True] <= MERGED, found
    if family == "llava_next" and targets in ("lm_head", "embed_tokens"):
        config = json.loads((tmp_path / "export_True" / "config.json").read_text())
        assert config["tie_word_embeddings"] is False


def test_a_vision_tower_fine_tune_exports_the_trained_policy(zoo_dir, tmp_path):
    """Full fine-tune with ``freeze_vision_tower: false``: the vision weights are in the checkpoint and the export."""
    assert _matrix_case(tmp_path, zoo_dir("idefics3"), None, freeze_vision=False) == {False: 0.0}


@pytest.mark.parametrize("lora", [None, ATTENTION], ids=["full", "lora adapter"])
def test_a_bfloat16_export_is_the_trained_policy_and_a_bfloat16_merge_is_refused(zoo_dir, tmp_path, capsys, lora):
    """policy.dtype bfloat16: a full fine-tune exports in bfloat16 and its logits are the policy's exactly; a kept
    adapter too, loaded with PeftModel on the base in bfloat16 (see :func:`_exported`); ``--merge`` would round
    W + BA to bfloat16 (0.0078 on llava_next): refused in one line, nothing written."""
    cfg = PolicyConfig(name_or_path=zoo_dir("llava_next"), lora=lora, dtype="bfloat16")
    policy, processor, ckpt = _trained(cfg, tmp_path)
    inputs = _prompts(processor)
    got = _exported(ckpt, tmp_path / "out", merge=False, dtype="bfloat16")
    assert {p.dtype for n, p in got.named_parameters() if "lora_" not in n} == {torch.bfloat16}
    assert torch.equal(_logits(got, inputs), _logits(policy, inputs))
    if lora is not None:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            export([str(ckpt), str(tmp_path / "merged"), "--merge"])
        assert exc.value.code == 1 and not (tmp_path / "merged").exists()
        assert capsys.readouterr().err == (
            "error: a merged export of a policy.dtype bfloat16 LoRA run is not the trained policy: merging rounds "
            "W + BA to bfloat16, which moves the logits (by about 0.008 in bfloat16); export the adapter (no merge) "
            "and load it with PEFT on the base in bfloat16, or train in float32\n")


def test_the_export_callback_refuses_a_bfloat16_merge_before_training():
    """``ExportPretrained(merge=True)`` on a bfloat16 LoRA run: refused at setup (before the first step), not after
    the run; float32 and full fine-tunes pass."""
    from lit_grpo.callbacks import ExportPretrained
    from lit_grpo.errors import InputError

    def setup(**policy):
        module = types.SimpleNamespace(hparams={"policy": PolicyConfig(**policy)})
        ExportPretrained(merge=True).setup(None, module, "fit")

    with pytest.raises(InputError, match="^a merged export of a policy.dtype bfloat16 LoRA run"):
        setup(lora=ATTENTION, dtype="bfloat16")
    setup(lora=ATTENTION)
    setup(dtype="bfloat16")


def test_the_export_callback_refuses_the_runs_own_model_folder_before_training(tmp_path):
    """``ExportPretrained(dirpath=<the policy's name_or_path>)``, reached by another path too: refused at setup in
    one line naming the folder (it rewrote the warm start's files at the end of fit); another folder passes."""
    from lit_grpo.callbacks import ExportPretrained
    from lit_grpo.errors import InputError

    source = tmp_path / "warm_start"
    source.mkdir()
    (tmp_path / "x").mkdir()
    module = types.SimpleNamespace(hparams={"policy": PolicyConfig(name_or_path=str(source))})
    for dirpath in (source, tmp_path / "x" / ".." / "warm_start"):
        with pytest.raises(InputError, match=rf"^{re.escape(str(dirpath))} is the folder the run started from"):
            ExportPretrained(dirpath=str(dirpath)).setup(None, module, "fit")
    ExportPretrained(dirpath=str(tmp_path / "export")).setup(None, module, "fit")


def _greedy(policy, processor, inputs, stop_ids: list[int], steps: int):
    """The run's rollout engine's greedy completions ``(ids, mask)`` of ``inputs`` (stops ``stop_ids``)."""
    from lit_grpo.config import PerfConfig
    from lit_grpo.families import row_layout
    from lit_grpo.policy import image_token_ids
    from lit_grpo.rollout import SamplingConfig, build_engine

    engine = build_engine(processor, row_layout(policy, processor), SamplingConfig(max_completion_length=steps),
                          stop_ids, image_token_ids(policy, processor), PerfConfig())
    rollout = engine.sample(policy, inputs.to("cpu"), 1, greedy=True)
    return rollout.completion_ids, rollout.completion_mask


def _stop_token(processor, rows: list[list[int]], never: set[int]) -> tuple[str, int]:
    """Text and id of a token of the greedy completions ``rows`` that is text of one token, as
    ``policy.extra_stop_tokens`` takes it: the first one new in its row after the row's first token (so that the
    completion has tokens before it and would go on after it), else any."""
    from lit_grpo.policy import _stop_id

    tok = processor.tokenizer
    order = sorted(((ids[i] in ids[:i], i == 0, i, r) for r, ids in enumerate(rows) for i in range(len(ids))))
    for _, _, i, r in order:
        text = tok.decode([rows[r][i]])
        try:
            if _stop_id(tok, text, never) == rows[r][i]:
                return text, rows[r][i]
        except ValueError:
            continue
    raise AssertionError(f"no token of {rows} is text of one token")


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_from_an_export_stops_where_the_rollouts_stopped(zoo_dir, tmp_path, family):
    """A run whose ``policy.extra_stop_tokens`` is a token its greedy completion of a prompt emits: the rollout
    engine stops on it; HF ``generate`` (greedy) with the exported folder's generation_config gives the same tokens
    and stops on the same id, with nothing after it; the config's stop ids are the run's."""
    from transformers import AutoModelForImageTextToText

    from lit_grpo.policy import image_token_ids, stop_token_ids

    base = PolicyConfig(name_or_path=zoo_dir(family))
    policy, processor, _ = _trained(base, tmp_path)
    inputs, never = _prompts(processor), set(image_token_ids(policy, processor))
    default = stop_token_ids(policy, processor, [], never)
    ids, mask = _greedy(policy, processor, inputs, default, 10)
    text, stop = _stop_token(processor, [[t for t in row[m].tolist() if t not in default] for row, m in zip(ids, mask)],
                             never)
    cfg = dataclasses.replace(base, extra_stop_tokens=[text])
    policy, processor, ckpt = _trained(cfg, tmp_path, {"temperature": 1.0, "top_p": 1.0, "top_k": 0,
                                                        "max_completion_length": 10})
    run_stops = stop_token_ids(policy, processor, [text], never)
    ids, mask = _greedy(policy, processor, inputs, run_stops, 10)
    assert stop in run_stops and stop not in default
    assert any(row[m].tolist()[-1] == stop and m.sum() < 10 for row, m in zip(ids, mask))  # stopped before the limit
    export([str(ckpt), str(tmp_path / "out")])
    exported = AutoModelForImageTextToText.from_pretrained(tmp_path / "out").eval()
    assert sorted(exported.generation_config.eos_token_id) == run_stops
    with torch.no_grad():
        out = exported.generate(**dict(inputs), do_sample=False)[:, inputs["input_ids"].shape[1]:]
    for row in range(len(out)):
        want = ids[row][mask[row]].tolist()
        assert out[row, :len(want)].tolist() == want
        assert set(out[row, len(want):].tolist()) <= {processor.tokenizer.pad_token_id}


def test_a_run_that_started_from_an_adapter_exports_the_trained_policy(zoo_dir, tmp_path):
    """``lora.adapter_path``: a run continuing an exported adapter (llava_next) exports, kept and merged, the policy
    it trained from there."""
    _, _, ckpt = _trained(PolicyConfig(name_or_path=zoo_dir("llava_next"), lora=ATTENTION), tmp_path)
    export([str(ckpt), str(tmp_path / "first")])
    (tmp_path / "second").mkdir()
    found = _matrix_case(tmp_path / "second", zoo_dir("llava_next"),
                         dataclasses.replace(ATTENTION, adapter_path=str(tmp_path / "first")))
    assert found[False] == 0.0 and found[True] <= MERGED, found
