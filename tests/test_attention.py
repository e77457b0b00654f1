"""Attention capture and ASM: exact reconstruction against eager attention on every family, the grid
mapping checked with a painted square, hand-computed scores, and hook hygiene."""

import re

import pytest
import torch
import torch.nn.functional as F
from conftest import FAMILIES
from PIL import Image, ImageDraw

from lit_grpo.tasks.attention.meter import (AttentionCapture, AttentionConfig, AttentionMeter, GridWeights, attention_rows,
                                foreground_mask, grid_maps, image_heatmap, row_token_mean, resize_matrix, token_scores)
from lit_grpo.testing.zoo import build_vlm
from lit_grpo.families import ImageGrid, family_for, row_layout
from lit_grpo.policy import (LoRAConfig, PolicyConfig, image_token_ids, is_vision_parameter, load_policy,
                             stop_token_ids)
from lit_grpo.rollout import SamplingConfig, encode_prompts, model_inputs, repeat_rows, sample_completions

W, H = 132, 88
SQUARE = (84, 8, 111, 35)  # 28 x 28 px, top right: off the diagonal, so a transposed grid would miss it
MIRROR = (W - 1 - SQUARE[2], H - 1 - SQUARE[3], W - 1 - SQUARE[0], H - 1 - SQUARE[1])


def _painted(box=None, size=(W, H)):
    image = Image.new("RGB", size, "white")
    if box is not None:
        ImageDraw.Draw(image).rectangle(box, fill=(30, 30, 200))
    return image


def _messages(texts):
    return [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]}] for t in texts]


def _rollout(model, processor, images, texts=("Which option? A B", "count the shapes in the panel please now"), g=2):
    layout = row_layout(model, processor)
    enc = repeat_rows(encode_prompts(processor, _messages(texts), [[im] for im in images]), g, layout)
    torch.manual_seed(0)
    return sample_completions(model, processor, enc, SamplingConfig(num_generations=g, max_completion_length=8),
                              stop_token_ids(model, processor), image_token_ids(model, processor), layout=layout)


# ----------------------------------------------------------------------------------------- reconstruction
@pytest.mark.parametrize("family", FAMILIES)
def test_reconstruction_equals_eager_attention_with_left_padding_and_lora(family, zoo_dir):
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family), attn_implementation="eager",
                                                lora=LoRAConfig(r=4, alpha=8)))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)  # a trained adapter: its delta must be in the captured q/k
    ro = _rollout(model, processor, [_painted(SQUARE), _painted(size=(60, 100))])
    inputs, t = model_inputs(ro), ro.completion_ids.shape[1]
    assert (inputs["attention_mask"][:, 0] == 0).any(), "left padding expected in the batch"
    fam = family_for(model, processor)
    with torch.no_grad():
        with AttentionCapture(model, fam, keep_queries=t) as cap:
            eager = model(**inputs, output_attentions=True, use_cache=False).attentions[-1]  # (N, H, L, L)
        with model.disable_adapter(), AttentionCapture(model, fam, keep_queries=t) as base:
            model(**inputs, use_cache=False)
    rows = attention_rows(cap.q, cap.k, cap.cos, cap.sin, inputs["attention_mask"], cap.parts.scale, cap.parts.head_dim)
    assert rows.shape == (4, t, inputs["input_ids"].shape[1])
    torch.testing.assert_close(rows, eager[:, :, -t:].mean(1), atol=1e-5, rtol=0)
    assert (cap.q - base.q).abs().max() > 1e-2, "the LoRA adapter changed nothing: the test would be vacuous"
    torch.testing.assert_close(rows.sum(-1), torch.ones(4, t))


def test_the_scale_matters(zoo_dir):
    """1/sqrt(head_dim) instead of Granite's attention_multiplier would be caught by the eager comparison."""
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next"), attn_implementation="eager"))
    with torch.no_grad():  # sharpen the random model's attention so that the scale shows
        family_for(model).attention_parts(model).q_proj.weight.mul_(30)
    ro = _rollout(model, processor, [_painted(SQUARE), _painted(MIRROR)])
    inputs, t = model_inputs(ro), ro.completion_ids.shape[1]
    with torch.no_grad(), AttentionCapture(model, keep_queries=t) as cap:
        eager = model(**inputs, output_attentions=True, use_cache=False).attentions[-1][:, :, -t:].mean(1)
    d = cap.parts.head_dim
    wrong = attention_rows(cap.q, cap.k, cap.cos, cap.sin, inputs["attention_mask"], d ** -0.5, d)
    assert cap.parts.scale != d ** -0.5 and (wrong - eager).abs().max() > 1e-3


def test_row_attention_hand_example():
    """One head, D=2, no rotary (cos 1, sin 0): scores q.k * scale, causal and padding masks."""
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    q = torch.tensor([[2.0, 0.0], [0.0, 2.0]])  # the last two positions (1 and 2)
    cos, sin = torch.ones(3, 2), torch.zeros(3, 2)
    rows = attention_rows(q[None], k[None], cos[None], sin[None], torch.tensor([[0, 1, 1]]), scale=0.5, head_dim=2)
    # position 1 sees keys 0..1, key 0 is padding -> all mass on key 1
    # position 2 sees keys 1, 2 with scores 0.5*(0,2)-> [1, 1]: mass 1/2 each
    torch.testing.assert_close(rows[0], torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.5, 0.5]]))
    # one query row per step gives the same rows
    chunked = attention_rows(q[None], k[None], cos[None], sin[None], torch.tensor([[0, 1, 1]]), 0.5, 2, chunk_scores=1)
    torch.testing.assert_close(chunked, rows, rtol=0, atol=0)


def test_rows_stay_float32_under_bf16_autocast():
    """Under ``bf16-mixed`` autocast (the paper configs' precision) the reconstruction still runs in float32: the
    hand example's rows exactly, and masked scores filled with float32's minimum without a bf16 overflow."""
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    q = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    cos, sin = torch.ones(3, 2), torch.zeros(3, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rows = attention_rows(q[None].bfloat16(), k[None].bfloat16(), cos[None], sin[None],
                              torch.tensor([[0, 1, 1]]), scale=0.5, head_dim=2)
    assert rows.dtype == torch.float32
    torch.testing.assert_close(rows[0], torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.5, 0.5]]), rtol=0, atol=0)


def test_gqa_heads_are_repeat_interleaved():
    """Two query heads per KV head: query heads 0, 1 use KV head 0 and heads 2, 3 use KV head 1."""
    torch.manual_seed(0)
    q, k = torch.randn(3, 4 * 2), torch.randn(3, 2 * 2)
    cos, sin = torch.ones(3, 2), torch.zeros(3, 2)
    rows = attention_rows(q[None], k[None], cos[None], sin[None], torch.ones(1, 3), 1.0, 2)[0]
    kh = k.view(3, 2, 2)
    expected = []
    for h in range(4):
        s = q.view(3, 4, 2)[:, h] @ kh[:, h // 2].T
        expected.append(s.masked_fill(torch.ones(3, 3).triu(1).bool(), float("-inf")).softmax(-1))
    torch.testing.assert_close(rows, torch.stack(expected).mean(0))


# ----------------------------------------------------------------------------------------- hooks
def test_hooks_are_removed_also_on_exceptions():
    model, _ = build_vlm("llava_next")
    parts = family_for(model).attention_parts(model)
    before = [len(m._forward_hooks) for m in (parts.q_proj, parts.k_proj, parts.rotary)]
    with pytest.raises(RuntimeError, match="boom"):
        with AttentionCapture(model):
            during = [len(m._forward_hooks) for m in (parts.q_proj, parts.k_proj, parts.rotary)]
            assert during == [b + 1 for b in before]
            raise RuntimeError("boom")
    assert [len(m._forward_hooks) for m in (parts.q_proj, parts.k_proj, parts.rotary)] == before


def test_capture_under_gradient_checkpointing_keeps_the_same_values(zoo_dir):
    """The projections fire again in the backward recomputation, with identical values."""
    images = [_painted(SQUARE), _painted(MIRROR)]
    plain, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next")))
    ro = _rollout(plain, processor, images)
    inputs = model_inputs(ro)
    with AttentionCapture(plain) as ref:
        plain(**inputs, use_cache=False)
    ckpt, _ = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next"), gradient_checkpointing=True))
    ckpt.train()
    with AttentionCapture(ckpt) as cap:
        ckpt(**inputs, use_cache=False).logits.sum().backward()
    assert cap.calls == {"q": 2, "k": 2, "rotary": 1}
    assert torch.equal(cap.q, ref.q) and torch.equal(cap.k, ref.k) and torch.equal(cap.cos, ref.cos)


# ----------------------------------------------------------------------------------------- ASM arithmetic
def test_resize_matrix_equals_bilinear_interpolate():
    torch.manual_seed(0)
    a = torch.rand(3, 5)
    up = F.interpolate(a[None, None], size=(7, 11), mode="bilinear", align_corners=False)[0, 0]
    torch.testing.assert_close(resize_matrix(3, 7) @ a @ resize_matrix(5, 11).T, up)
    torch.testing.assert_close(resize_matrix(2, 4), torch.tensor(
        [[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [0.0, 1.0]]))


def test_asm_hand_computed():
    """A 2 x 2 grid on a 4 x 4 image. Bilinear 2 -> 4 weights per axis: [1, .75, .25, 0] and [0, .25, .75, 1].

    Map [[.5, .5], [0, 0]] -> rows .5, .375, .125, 0 (each row constant): row sums 2, 1.5, .5, 0 (total 4).
    Foreground = the top row of pixels: 2 / 4 = 0.5. Foreground = the left two columns: 0.5 (symmetric).
    Map [[1, 0], [0, 0]] -> outer([1, .75, .25, 0], same), total 2 x 2 = 4; top-left pixel only: 1 / 4.
    """
    top = torch.zeros(4, 4, dtype=torch.bool)
    top[0] = True
    left = torch.zeros(4, 4, dtype=torch.bool)
    left[:, :2] = True
    corner = torch.zeros(4, 4, dtype=torch.bool)
    corner[0, 0] = True
    half = torch.tensor([[[0.5, 0.5], [0.0, 0.0]]])
    one = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    box = (0.0, 0.0, 1.0, 1.0)
    score = lambda m, mask: token_scores([m], [GridWeights.of((2, 2), box, mask)]).item()  # noqa: E731
    assert score(half, top) == pytest.approx(0.5)
    assert score(half, left) == pytest.approx(0.5)
    assert score(one, corner) == pytest.approx(0.25)
    assert score(one, ~corner) == pytest.approx(0.75)
    # per token, whatever its total mass: one on the left columns = (1 + .75) x 2 / 4 = 0.875
    tokens = token_scores([torch.cat([half, 3 * one])], [GridWeights.of((2, 2), box, left)])
    torch.testing.assert_close(tokens, torch.tensor([0.5, 0.875]))
    # a completion's ASM is the mean over its valid tokens: (0.5 + 0.875) / 2; none valid -> NaN
    asm = row_token_mean(torch.tensor([[0.5, 0.875, 0.9], [0.2, 0.0, 0.0]]), torch.tensor([[1, 1, 0], [0, 0, 0]]).bool())
    assert asm[0].item() == pytest.approx(0.6875) and torch.isnan(asm[1])


def test_two_grids_count_with_their_attention_mass():
    """Grid A (whole image) fraction 0.5 with mass 0.25, grid B (left half box) fraction 1 with mass 0.75:
    0.25 * 0.5 + 0.75 * 1.0 = 0.875; the explicit heat map at image resolution gives the same."""
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[:, :2] = True
    a = ImageGrid(torch.arange(4).view(2, 2), 0, (0.0, 0.0, 1.0, 1.0))
    b = ImageGrid(torch.arange(4, 8).view(2, 2), 0, (0.0, 0.0, 0.5, 1.0))
    maps = [torch.full((1, 2, 2), 0.0625), torch.full((1, 2, 2), 0.1875)]
    weights = [GridWeights.of((2, 2), g.box, mask) for g in (a, b)]
    assert token_scores(maps, weights).item() == pytest.approx(0.875)
    heat = image_heatmap([m[0] for m in maps], [a, b], 0, 4, 4)
    assert heat.sum().item() == pytest.approx(1.0) and (heat * mask).sum().item() == pytest.approx(0.875)


def test_foreground_is_any_channel_below_230():
    img = Image.new("RGB", (4, 1))
    img.putdata([(230, 230, 230), (229, 255, 255), (255, 255, 255), (0, 0, 0)])
    assert foreground_mask(img).tolist() == [[False, True, False, True]]


# ----------------------------------------------------------------------------------------- grids on real inputs
def _local_vision(model):
    """Zero the vision encoder's attention outputs: each image token then depends on its own patch only."""
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear) and is_vision_parameter(name + ".weight") and re.search(
                    r"attn\.(out_proj|proj|o_proj)$", name):
                m.weight.zero_()
    return model


CASES = [(f, None) for f in FAMILIES] + [("llava_next", "tiles"), ("llava_next", "all"), ("idefics3", "base"),
                                         ("idefics3", "tiles")]


@pytest.mark.parametrize("family,grid", CASES, ids=[f"{f}-{g or 'default'}" for f, g in CASES])
def test_painted_square_lands_where_it_was_painted(family, grid):
    """With a local vision encoder, only image tokens whose patches see the square change when it is painted.
    Using that change as an attention row, the grid mapping must put the mass on the square: its centre of
    mass lands on the square's centre, and the ASM against the square (6.7 % of the image) is high while
    against the mirrored square it is zero."""
    model, processor = build_vlm(family)
    fam = family_for(_local_vision(model), processor, grid)
    got = {}
    hook = fam.language_model(model).register_forward_pre_hook(
        lambda mod, args, kwargs: got.__setitem__("embeds", kwargs["inputs_embeds"]), with_kwargs=True)
    embeds = []
    try:
        for image in (_painted(), _painted(SQUARE)):
            enc = encode_prompts(processor, _messages(["where"]), [[image]])
            with torch.no_grad():
                model(**enc)
            embeds.append(got["embeds"][0])
    finally:
        hook.remove()
    change = (embeds[1] - embeds[0]).norm(dim=-1)  # (L,)
    grids = fam.image_grids(enc, [[(W, H)]])[0]
    if fam.grid == "all" or family in ("qwen2_vl", "qwen2_5_vl", "llava", "smolvlm"):
        outside = change.clone()
        outside[torch.cat([g.positions.flatten() for g in grids])] = 0
        assert outside.max() == 0, "tokens outside the grids changed: the grids miss image tokens"
    maps = grid_maps(change[None], grids)
    heat = image_heatmap([m[0] for m in maps], grids, 0, H, W)
    ys, xs = torch.meshgrid(torch.arange(H).float(), torch.arange(W).float(), indexing="ij")
    centre = ((SQUARE[0] + SQUARE[2]) / 2, (SQUARE[1] + SQUARE[3]) / 2)
    assert abs((heat * xs).sum() - centre[0]) < 4 and abs((heat * ys).sum() - centre[1]) < 4
    score = lambda box: token_scores(maps, [GridWeights.of(tuple(g.positions.shape), g.box, foreground_mask(  # noqa
        _painted(box))) for g in grids]).item()
    assert score(SQUARE) > 0.25 and score(MIRROR) < 1e-6


@pytest.mark.parametrize("family", FAMILIES)
def test_uniform_attention_gives_exactly_the_foreground_area_fraction(family):
    """Equal attention on every image token -> the fraction of foreground pixels in the region the grids
    cover (the whole image; LLaVA: its centre crop)."""
    model, processor = build_vlm(family)
    fam = family_for(model, processor)
    image = _painted(SQUARE)
    enc = encode_prompts(processor, _messages(["where"]), [[image]])
    grids = fam.image_grids(enc, [[image.size]])[0]
    row = torch.zeros(1, enc["input_ids"].shape[1])
    for g in grids:
        row[0, g.positions.flatten()] = 1.0
    mask = foreground_mask(image)
    # LLaVA: 132 x 88 -> 84 x 56, the 56 x 56 centre crop keeps x in [22, 110): 26 of the square's 28 columns
    expected = 26 * 28 / (88 * 88) if family == "llava" else 28 * 28 / (W * H)
    if family == "llava":
        assert grids[0].box == pytest.approx((22 / 132, 0.0, 110 / 132, 1.0))
    weights = [GridWeights.of(tuple(g.positions.shape), g.box, mask) for g in grids]
    assert token_scores(grid_maps(row, grids), weights).item() == pytest.approx(expected, abs=1e-6)


# ----------------------------------------------------------------------------------------- meter
@pytest.mark.parametrize("family,grid", [("qwen2_vl", None), ("idefics3", "all"), ("llava_next", "all")])
def test_scorer_matches_eager_rows_and_a_direct_computation(family, grid, zoo_dir):
    """The trainer's meter (capture in an SDPA forward, all rows and grids in one table) equals the ASM
    computed grid by grid from eager attention; rows whose images differ in size have different grids."""
    images = [_painted(SQUARE), _painted(MIRROR, size=(W, 2 * H))]
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir(family)))
    assert model.config._attn_implementation == "sdpa"
    ro = _rollout(model, processor, images)
    meter = AttentionMeter(model, processor, AttentionConfig(grid=grid))
    with torch.no_grad(), meter.capture(model, ro) as cap:
        model(**model_inputs(ro), use_cache=False)
    scores = meter.score(cap, ro, [[im] for im in images for _ in range(2)])
    eager, _ = load_policy(PolicyConfig(name_or_path=zoo_dir(family), attn_implementation="eager"))
    t = ro.completion_ids.shape[1]
    with torch.no_grad():
        att = eager(**model_inputs(ro), output_attentions=True, use_cache=False).attentions[-1][:, :, -t:].mean(1)
    grids = family_for(model, processor, grid).image_grids(ro.prompt, [[im.size] for im in images for _ in range(2)])
    expected = []
    for n in range(4):
        w = [GridWeights.of(tuple(g.positions.shape), g.box, foreground_mask(images[n // 2])) for g in grids[n]]
        expected.append(row_token_mean(token_scores(grid_maps(att[n], grids[n]), w)[None], ro.completion_mask[n][None])[0])
    torch.testing.assert_close(scores.asm, torch.stack(expected), atol=1e-5, rtol=0)
    assert ((scores.asm >= 0) & (scores.asm <= 1)).all()
    for maps in scores.maps:  # mean over tokens of per-token maps normalised to 1
        assert sum(m.sum() for m in maps).item() == pytest.approx(1.0, abs=1e-5)


def test_scorer_refuses_an_empty_capture(zoo_dir):
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next")))
    ro = _rollout(model, processor, [_painted(SQUARE), _painted(MIRROR)])
    meter = AttentionMeter(model, processor)
    with meter.capture(model, ro) as cap:
        pass
    with pytest.raises(RuntimeError, match="no forward"):
        meter.score(cap, ro, [[_painted()]] * 4)
