"""Rollouts: stop-token masks, and log-probs equal to the distribution that was sampled."""

import pytest
import torch

from lit_grpo.data.sample import render_messages
from lit_grpo.policy import PolicyConfig, image_token_ids, load_policy, stop_token_ids
from lit_grpo.rollout import (Rollout, SamplingConfig, completion_logps, completion_mask, encode_prompts,
                              repeat_rows, sample_completions)


def test_completion_mask_hand_table():
    ids = torch.tensor([
        [5, 6, 0, 7, 0],   # stop at 2 -> keep 0..2
        [0, 9, 9, 9, 9],   # stop first -> keep only it
        [5, 6, 7, 8, 9],   # no stop -> all, truncated
        [5, 3, 6, 0, 3],   # two stop ids (0 and 3): first is 3 at index 1
    ])
    mask, truncated = completion_mask(ids, [0, 3])
    assert mask.int().tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert truncated.tolist() == [False, False, True, False]


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return load_policy(PolicyConfig(name_or_path=tiny_model_dir))


def _prompts(processor, samples, extra=("", " and some words that pad the other prompt")):
    msgs = [render_messages(s, "visualsphinx_seed") for s in samples]
    for m, e in zip(msgs, extra):
        m[-1]["content"][-1]["text"] += e
    return encode_prompts(processor, msgs, [s.images for s in samples])


def test_prompts_are_left_padded_and_each_completion_keeps_its_images(policy, puzzle_samples):
    model, processor = policy
    enc = _prompts(processor, puzzle_samples[:2])
    assert enc["attention_mask"][0, 0] == 0 and enc["attention_mask"][:, -1].all()
    rep = repeat_rows(enc, 3)
    assert rep["input_ids"].shape[0] == 6
    for i in range(6):
        assert torch.equal(rep["pixel_values"][i], enc["pixel_values"][i // 3])
        assert torch.equal(rep["input_ids"][i], enc["input_ids"][i // 3])


def test_training_logps_equal_generate_scores_with_logits_scaling(policy, puzzle_samples):
    """The embedded Granite text config has logits_scaling=8, which the LLaVA-NeXT class never applies."""
    model, processor = policy
    assert model.config.text_config.logits_scaling == 8.0
    enc = repeat_rows(_prompts(processor, puzzle_samples[:2]), 2)
    stop, suppress = stop_token_ids(model, processor), image_token_ids(model, processor)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=10,
                             eos_token_id=stop, pad_token_id=processor.tokenizer.pad_token_id,
                             suppress_tokens=suppress, output_scores=True, return_dict_in_generate=True)
    ids = out.sequences[:, enc["input_ids"].shape[1]:]
    mask, truncated = completion_mask(ids, stop)
    sampled = torch.stack(out.scores, 1).log_softmax(-1).gather(2, ids[..., None]).squeeze(2)  # (N, T)
    ro = Rollout(enc, ids, mask, truncated, [])
    with torch.no_grad():
        logps, _ = completion_logps(model, ro, 1.0, torch.tensor(suppress))
        assert (logps - sampled)[mask].abs().max() < 1e-5
        # A log-prob head that applies the text config's scaling would be far off (8x flatter):
        t = ids.shape[1]
        logits = model(**{k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask")},
                       input_ids=torch.cat([enc["input_ids"], ids], 1),
                       attention_mask=torch.cat([enc["attention_mask"], mask.long()], 1)).logits[:, -t - 1:-1]
        flat = (logits / 8.0).log_softmax(-1).gather(2, ids[..., None]).squeeze(2)
        assert (flat - sampled)[mask].abs().max() > 0.1


def test_padded_batch_logps_equal_per_sample_logps(policy, puzzle_samples):
    model, processor = policy
    samples = puzzle_samples[:2]
    enc = _prompts(processor, samples)
    torch.manual_seed(1)
    ro = sample_completions(model, processor, enc, SamplingConfig(max_completion_length=8),
                            stop_token_ids(model, processor), image_token_ids(model, processor))
    with torch.no_grad():
        batched, _ = completion_logps(model, ro, 0.7)
        for i, extra in enumerate(["", " and some words that pad the other prompt"]):
            alone = _prompts(processor, [samples[i]], [extra])
            single = Rollout(alone, ro.completion_ids[i:i + 1], ro.completion_mask[i:i + 1], ro.truncated[i:i + 1], [])
            own, _ = completion_logps(model, single, 0.7)
            m = ro.completion_mask[i]
            torch.testing.assert_close(batched[i][m], own[0][m], atol=1e-5, rtol=1e-5)


def test_sampler_never_emits_image_tokens(policy, puzzle_samples):
    model, processor = policy
    enc = repeat_rows(_prompts(processor, puzzle_samples[:2]), 4)
    with torch.no_grad():
        # make the image token the most likely token everywhere: it must still never be sampled
        image_id = image_token_ids(model, processor)[0]
        saved = model.lm_head.weight[image_id].clone()
        model.lm_head.weight[image_id] = model.lm_head.weight.abs().max() * 50
    try:
        ro = sample_completions(model, processor, enc, SamplingConfig(max_completion_length=8),
                                stop_token_ids(model, processor), image_token_ids(model, processor))
    finally:
        with torch.no_grad():
            model.lm_head.weight[image_id] = saved
    assert not (ro.completion_ids == image_id).any()
