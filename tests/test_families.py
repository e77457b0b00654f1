"""Model families: tiny offline builders, adapters resolved by attribute, image grids, rollouts on every family."""

import pytest
import torch
from conftest import FAMILIES
from PIL import Image, ImageDraw

from lit_grpo.testing.zoo import build_vlm
from lit_grpo.families import FAMILIES as REGISTRY
from lit_grpo.families import QwenVLFamily, family_for, row_layout, runs, unwrap
from lit_grpo.policy import LoRAConfig, PolicyConfig, image_token_ids, is_vision_parameter, load_policy, stop_token_ids
from lit_grpo.rollout import (Rollout, completion_logps, completion_mask, encode_prompts,
                              model_inputs, repeat_rows)

WIDE, TALL = (132, 88), (60, 100)


def _images():
    a = Image.new("RGB", WIDE, "white")
    ImageDraw.Draw(a).rectangle([10, 10, 40, 40], fill=(200, 0, 0))
    return [a, Image.new("RGB", TALL, (250, 250, 250))]


def _messages(texts):
    return [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]}] for t in texts]


def _encode(processor, texts=("Which option? A B", "count the shapes in the panel please now"), images=None):
    images = images or _images()
    return encode_prompts(processor, _messages(texts), [[im] for im in images[:len(texts)]])


def test_runs_hand_table():
    ids = torch.tensor([5, 9, 9, 1, 9, 9, 9, 2, 9])
    assert runs(ids, 9) == [(1, 2), (4, 3), (8, 1)]
    assert runs(ids, 7) == []


def test_images_by_tokens_hand_table():
    """Images fill the rows' image tokens in order: 5 | (none) | 4 + 8; counts that do not line up name the row."""
    from lit_grpo.families import images_by_tokens

    assert images_by_tokens([5, 0, 12], [5, 4, 8]) == [1, 0, 2]
    assert images_by_tokens([16, 16, 48], [16] * 5) == [1, 1, 3]
    with pytest.raises(ValueError, match="row 1: 6 image tokens"):
        images_by_tokens([5, 6], [5, 4, 8])
    with pytest.raises(ValueError, match="3 images"):
        images_by_tokens([5], [5, 4, 8])


def test_unsupported_family_names_the_supported_ones():
    class Config:
        model_type = "gemma3"

    class Model(torch.nn.Module):
        config = Config()

    with pytest.raises(ValueError, match="gemma3") as exc:
        family_for(Model())
    for name in FAMILIES:
        assert name in str(exc.value)
    assert sorted(REGISTRY.names()) == sorted(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_zoo_model_reloads_by_path_with_identical_logits(family, zoo_dir):
    built, _ = build_vlm(family)
    loaded, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family), local_files_only=True))
    assert loaded.config.model_type == family
    assert processor.tokenizer.padding_side == "left"
    enc = _encode(processor)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(**enc).logits, built.eval()(**enc).logits, rtol=0, atol=0)
    assert sum(p.numel() for p in loaded.parameters()) < 400_000


@pytest.mark.parametrize("family", FAMILIES)
def test_final_layer_is_resolved_in_the_language_model_lora_wrapper_included(family, zoo_dir):
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family), lora=LoRAConfig(r=4, alpha=8)))
    fam = family_for(model, processor)
    parts = fam.attention_parts(model)
    names = {m: n for n, m in model.named_modules()}
    lm = fam.language_model(model)
    last = len(lm.layers) - 1
    assert names[parts.q_proj].endswith(f"layers.{last}.self_attn.q_proj")
    assert names[parts.k_proj].endswith(f"layers.{last}.self_attn.k_proj")
    assert not is_vision_parameter(names[parts.q_proj] + ".weight")
    assert hasattr(parts.q_proj, "base_layer"), "the hook must sit on the LoRA wrapper, not on base_layer"
    assert names[parts.rotary].endswith("rotary_emb") and not is_vision_parameter(names[parts.rotary] + ".x")
    # LoRA wraps only language-model attention projections (never the vision encoder)
    lora = [n for n, p in model.named_parameters() if p.requires_grad]
    assert lora and not any(is_vision_parameter(n) for n in lora)
    # the scale is the module's own: Granite's attention_multiplier, not 1/sqrt(head_dim)
    attn = lm.layers[-1].self_attn
    assert parts.scale == attn.scaling
    text = unwrap(model).config.get_text_config()
    if family == "llava_next":
        assert parts.scale == text.attention_multiplier == 1 / parts.head_dim != parts.head_dim ** -0.5


@pytest.mark.parametrize("family", FAMILIES)
def test_rollout_logps_equal_generate_scores_on_every_family(family, zoo_dir):
    """G=2 copies of 2 left-padded prompts: the scoring forward (M-RoPE's mm_token_type_ids extended over
    the completion for Qwen) reproduces the sampled distribution, and micro-batch rows select their own images."""
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family)))
    layout = row_layout(model, processor)
    enc = repeat_rows(_encode(processor), 2, layout)
    assert enc["attention_mask"][2:, 0].eq(0).all() or enc["attention_mask"][:2, 0].eq(0).all()
    stop, suppress = stop_token_ids(model, processor), image_token_ids(model, processor)
    torch.manual_seed(0)
    model.eval()
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=8,
                             eos_token_id=stop, pad_token_id=processor.tokenizer.pad_token_id,
                             suppress_tokens=suppress, output_scores=True, return_dict_in_generate=True)
    ids = out.sequences[:, enc["input_ids"].shape[1]:]
    mask, truncated = completion_mask(ids, stop)
    sampled = torch.stack(out.scores, 1).log_softmax(-1).gather(2, ids[..., None]).squeeze(2)  # (N, T)
    ro = Rollout(enc, ids, mask, truncated, [""] * 4, layout=layout)
    with torch.no_grad():
        logps, _ = completion_logps(model, ro, 1.0, torch.tensor(suppress))
        assert (logps - sampled)[mask].abs().max() < 1e-5
        part, _ = completion_logps(model, ro.rows(torch.tensor([3, 0])), 1.0, torch.tensor(suppress))
    torch.testing.assert_close(part, logps[[3, 0]], atol=1e-6, rtol=0)


def test_qwen_rows_split_flattened_pixels_and_extend_token_types(zoo_dir):
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("qwen2_vl")))
    layout = row_layout(model, processor)
    assert isinstance(layout, QwenVLFamily)
    enc = _encode(processor)
    thw = enc["image_grid_thw"]
    n0 = int(thw[0].prod())
    assert enc["pixel_values"].shape[0] == n0 + int(thw[1].prod())
    picked = layout.select(enc, torch.tensor([1, 0, 1]), 2)
    torch.testing.assert_close(picked["image_grid_thw"], thw[[1, 0, 1]])
    pv = enc["pixel_values"]
    torch.testing.assert_close(picked["pixel_values"], torch.cat([pv[n0:], pv[:n0], pv[n0:]]))
    torch.testing.assert_close(picked["input_ids"], enc["input_ids"][[1, 0, 1]])
    ro = Rollout(enc, torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool),
                 torch.zeros(2, dtype=torch.bool), ["", ""], layout=layout)
    tt = model_inputs(ro)["mm_token_type_ids"]
    assert tt.shape == (2, enc["input_ids"].shape[1] + 3)
    assert tt[:, -3:].eq(0).all() and torch.equal(tt[:, :-3], enc["mm_token_type_ids"])
    assert tt.sum() == sum(n for _, n in runs(enc["input_ids"][0], model.config.image_token_id)) + sum(
        n for _, n in runs(enc["input_ids"][1], model.config.image_token_id))


@pytest.mark.parametrize("family,expected", [
    ("llava_next", [[(4, 4)], [(4, 4)]]),             # base grid (56 px tile, 14 px patches)
    ("qwen2_vl", [[(6, 9)], [(7, 4)]]),               # one token per 14 px after smart_resize
    ("idefics3", [[(4, 4)] * 5, [(4, 4)] * 5]),       # 2 x 2 tiles + the global image
    ("llava", [[(8, 8)], [(8, 8)]]),                  # centre crop 56 px, 7 px patches
])
def test_grid_shapes(family, expected, zoo_dir):
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family)))
    enc = _encode(processor)
    grids = family_for(model, processor).image_grids(enc, [[WIDE], [TALL]])
    assert [[tuple(g.positions.shape) for g in row] for row in grids] == expected
    for n, row in enumerate(grids):  # every cell is a distinct image token
        cells = torch.cat([g.positions.flatten() for g in row])
        assert cells.unique().numel() == cells.numel()
        image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        assert enc["input_ids"][n][cells].eq(image_id).all()


def test_llava_crop_box_and_idefics_tile_boxes(zoo_dir):
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava")))
    grids = family_for(model, processor).image_grids(_encode(processor), [[WIDE], [TALL]])
    # 132 x 88 -> shortest edge 56: 84 x 56, centre crop 56 x 56 keeps x in [14, 70) of 84 = [1/6, 5/6)
    assert grids[0][0].box == pytest.approx((1 / 6, 0.0, 5 / 6, 1.0))
    assert grids[1][0].box == pytest.approx((0.0, 0.2, 1.0, 0.8))  # 60 x 100 -> 56 x 93.3, crop y [18.7, 74.7)
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("idefics3")))
    boxes = [g.box for g in family_for(model, processor).image_grids(_encode(processor), [[WIDE], [TALL]])[0]]
    assert boxes == [(0, 0, .5, .5), (.5, 0, 1, .5), (0, .5, .5, 1), (.5, .5, 1, 1), (0, 0, 1, 1)]
    only_global = family_for(model, processor, grid="base").image_grids(_encode(processor), [[WIDE], [TALL]])
    assert [g.box for g in only_global[0]] == [(0, 0, 1, 1)]


@pytest.mark.parametrize("size", [(132, 88), (88, 132), (56, 56), (200, 50), (57, 170), (300, 301)])
def test_llava_next_tile_grid_matches_the_model_for_aspect_ratios(size, zoo_dir):
    """Processor and model must agree on the unpadded tile grid (an off-by-one breaks the forward)."""
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next")))
    image = Image.new("RGB", size, "white")
    enc = _encode(processor, texts=("x",), images=[image])
    fam = family_for(model, processor, grid="all")
    base, tiles = fam.image_grids(enc, [[size]])[0]
    th, tw = tiles.positions.shape
    assert base.positions.shape == (4, 4)
    assert len(runs(enc["input_ids"][0], model.config.image_token_index)[0]) == 2
    assert runs(enc["input_ids"][0], model.config.image_token_index)[0][1] == 16 + th * (tw + 1)
    with torch.no_grad():
        model(**enc)  # the model's own feature count agrees with the processor's tokens


def test_grid_option_is_validated(zoo_dir):
    model, processor = build_vlm("llava_next")
    with pytest.raises(ValueError, match="base"):
        family_for(model, processor, grid="global")


def test_a_sliding_window_final_layer_is_refused():
    """The reconstruction assumes full causal attention; a sliding-window final layer must not pass silently."""
    model, processor = build_vlm("qwen2_vl")
    fam = family_for(model, processor)
    fam.language_model(model).layers[-1].self_attn.sliding_window = 64
    with pytest.raises(NotImplementedError, match="sliding"):
        fam.attention_parts(model)


def _pictures(sizes):
    """Distinct images (a coloured square at a different place in each) of ``sizes``."""
    out = []
    for k, size in enumerate(sizes):
        image = Image.new("RGB", size, (255, 255, 255))
        x, y = 4 + 9 * k, 30 - 7 * k
        ImageDraw.Draw(image).rectangle([x, y, x + 20, y + 20], fill=(60 * k, 200 - 50 * k, 40 + 70 * k))
        out.append(image)
    return out


MULTI = {"same_size": [(64, 64)] * 4, "different_sizes": [(84, 56), (56, 90), (70, 60), (60, 64)]}


def _multi_messages(counts, texts=("Compare the panels please", "Which option?")):
    return [[{"role": "user", "content": [{"type": "image"}] * n + [{"type": "text", "text": t}]}]
            for n, t in zip(counts, texts)]


@pytest.mark.parametrize("sizes", list(MULTI))
@pytest.mark.parametrize("family", FAMILIES)
def test_every_row_sees_exactly_its_prompts_images(family, sizes, zoo_dir):
    """Prompts with 1 and 3 images (same-size images, so that per-image and per-row counts coincide, and different
    sizes), G=2, micro-batches that split groups: on the plain path, the shared prefix (image features reused and
    re-encoded) and the attention-capture pass, every row's log-probs and ASM equal that row computed alone."""
    from lit_grpo.tasks.attention.meter import AttentionMeter
    from lit_grpo.rollout import SamplingConfig, SharedPrefixEngine

    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family), lora=LoRAConfig(r=4, alpha=8)))
    layout = row_layout(model, processor)
    pictures = _pictures(MULTI[sizes])
    per_prompt = [pictures[:1], pictures[1:]]
    enc = encode_prompts(processor, _multi_messages([1, 3]), per_prompt)
    n, index = 4, torch.arange(2).repeat_interleave(2)
    ids = torch.randint(20, 200, (n, 5), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(n, 5, dtype=torch.bool)
    mask[1, 3:] = False
    plain = Rollout(repeat_rows(enc, 2, layout), ids, mask, torch.zeros(n, dtype=torch.bool), [""] * n, layout=layout)
    images = [per_prompt[i] for i in index.tolist()]
    scorer = AttentionMeter(model, processor)
    alone_logps, alone_asm = [], []
    with torch.no_grad():
        for i in range(n):
            own = encode_prompts(processor, _multi_messages([len(images[i])], [("Compare the panels please",
                                                                                 "Which option?")[index[i]]]),
                                 [images[i]])
            row = Rollout(own, ids[i:i + 1], mask[i:i + 1], torch.zeros(1, dtype=torch.bool), [""], layout=layout)
            with scorer.capture(model, row) as cap:
                alone_logps.append(completion_logps(model, row, 1.0)[0][0])
            alone_asm.append(scorer.score(cap, row, images[i:i + 1]).asm[0])
        ro = Rollout(enc, ids, mask, plain.truncated, plain.completions, layout=layout, prompt_index=index)
        engines = [SharedPrefixEngine(processor, layout, SamplingConfig(temperature=1.0), [0], [], cache_features)
                   for cache_features in (True, False)]
        for rows in (slice(0, 2), slice(1, 4), slice(3, 4)):  # (0, 2): a silent wrong image before
            for engine in engines:
                got, _ = engine.logps(model, ro, rows)
                for k, i in enumerate(range(n)[rows]):
                    err = (got[k] - alone_logps[i])[mask[i]].abs().max()
                    assert err < 1e-5, (rows, i, engine.cache_features, float(err))
            part = plain.rows(rows)  # the plain path, with the attention capture on its forward
            with scorer.capture(model, part) as cap:
                got, _ = completion_logps(model, part, 1.0)
            for k, i in enumerate(range(n)[rows]):
                assert (got[k] - alone_logps[i])[mask[i]].abs().max() < 1e-5, (rows, i, "plain")
            asm = scorer.score(cap, part, images[rows]).asm
            torch.testing.assert_close(asm, torch.stack(alone_asm[rows]), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_multi_image_prompts_sample_on_both_paths(family, zoo_dir):
    """Sampling prompts with 1 and 3 images: the shared-prefix sampler and generate on the repeated rows decode the
    same greedy completions (each row conditioned on its own images)."""
    from lit_grpo.rollout import SamplingConfig, SharedPrefixEngine, sample_completions

    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family)))
    layout = row_layout(model, processor)
    pictures = _pictures(MULTI["same_size"])
    enc = encode_prompts(processor, _multi_messages([3, 1]), [pictures[:3], pictures[3:]])
    stop, suppress = stop_token_ids(model, processor), image_token_ids(model, processor)
    cfg = SamplingConfig(num_generations=2, max_completion_length=4)
    plain = sample_completions(model, processor, repeat_rows(enc, 2, layout), cfg, stop, suppress, greedy=True,
                               layout=layout)
    shared = SharedPrefixEngine(processor, layout, cfg, stop, suppress).sample(model, enc, 2, greedy=True)
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    for key, value in plain.prompt.items():
        assert torch.equal(shared.prompt[key], value), key


def test_a_model_outside_the_families_refuses_prompts_it_cannot_split():
    """The per-row default (a model type without an adapter) gives each row its own image only with one image per
    prompt (or none at all); anything else is refused naming the sample and the model type. Families take any
    number of images per prompt."""
    from lit_grpo.families import RowLayout

    layout = RowLayout("gemma3")
    layout.check_images({"a": 1, "b": 1})
    layout.check_images({"a": 0, "b": 0})
    for counts, bad in (({"a": 1, "b": 3}, "'b' has 3"), ({"a": 0, "b": 1}, "'a' has 0"), ({"x": 2}, "'x' has 2")):
        with pytest.raises(ValueError, match=bad) as exc:
            layout.check_images(counts)
        assert "'gemma3' is outside the supported families" in str(exc.value)
    model, processor = build_vlm("llava")
    row_layout(model, processor).check_images({"a": 1, "b": 3, "c": 0})
