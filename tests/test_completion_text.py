"""The text of a completion that the rewards and judges read keeps every tag the rewards read, on every family, even
when the checkpoint's tokenizer registers the tags as special tokens: only padding, stop tokens and image tokens are
dropped."""

import pytest
import torch
from tokenizers import AddedToken

from lit_grpo.policy import image_token_ids, stop_token_ids
from lit_grpo.rewards.basic import accuracy_reward, format_reward
from lit_grpo.rollout.engine import build_rollout
from lit_grpo.testing.zoo import BUILDERS, build_vlm

TAGS = ["<think>", "</think>", "<answer>", "</answer>", "<unit>", "</unit>", "<principle>", "</principle>"]
OPTIONS = {"A": "0", "B": "1", "C": "2", "D": "3"}


def _reasoning_tokenizer(family: str):
    """The family's tiny model, its processor's tokenizer with the tags registered as special tokens (as many
    reasoning fine-tunes ship them), its stop and image token ids."""
    model, processor = build_vlm(family)
    tok = processor.tokenizer
    tok.add_special_tokens({"additional_special_tokens": TAGS})
    return tok, stop_token_ids(model, processor), image_token_ids(model, processor)


@pytest.mark.parametrize("family", BUILDERS.names())
def test_completions_keep_the_tags_a_reasoning_tokenizer_marks_special(family):
    tok, stop, image = _reasoning_tokenizer(family)
    assert all(len(tok(t, add_special_tokens=False).input_ids) == 1 for t in TAGS)
    assert set(tok.convert_tokens_to_ids(TAGS)) <= set(tok.all_special_ids)
    other = next((i for i, t in sorted(tok.added_tokens_decoder.items())  # a special token that is neither a tag, a
                 if t.special and i not in set(stop) | set(image) | {tok.pad_token_id}  # stop, padding nor an image
                 and t.content not in TAGS), None)  # (Idefics3 and SmolVLM have none)

    def ids(text):
        return tok(text, add_special_tokens=False).input_ids

    rows = [  # what a policy samples: tags, an image token (suppressed in sampling, dropped here too), a stop token
        ids("<think>two red</think>") + [image[0]] + ids("<answer>B</answer>") + [stop[0]],
        ids("<think>") + [other] * (other is not None) + ids("none of the shapes is red</think><answer>C</answer>"),  # truncated: the
        # longest row, no stop token (padding can be the stop token)
        ids("<answer>D</answer>") + [stop[-1]] + ids("<answer>A</answer>"),  # after the stop token: not completion
    ]
    width = len(rows[1])
    batch = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    rollout = build_rollout({"input_ids": torch.zeros(3, 1, dtype=torch.long)}, None, batch, tok, stop,
                            image_ids=image)
    assert rollout.completions == ["<think>two red</think><answer>B</answer>",
                                   f"<think>{tok.convert_ids_to_tokens(other) if other is not None else ''}none of the shapes is red</think>"
                                   "<answer>C</answer>",
                                   "<answer>D</answer>"]
    assert rollout.truncated.tolist() == [False, True, False]
    assert format_reward(rollout.completions[:1], tags=["think", "answer"]) == [1.0]
    assert accuracy_reward(rollout.completions, answer=["B", "C", "D"], answer_format=["mcq"] * 3,
                           options=[OPTIONS] * 3) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("share_prefix", [False, True], ids=["plain", "shared"])
def test_both_engines_decode_what_they_sampled_the_same_way(share_prefix):
    """Sampled completions of the embedded model: each text is its ids inside the mask, without padding, stop and
    image tokens, every other special token kept."""
    from lit_grpo.families import row_layout
    from lit_grpo.config import PerfConfig
    from lit_grpo.rollout import SamplingConfig, build_engine, encode_prompts

    from PIL import Image

    model, processor = build_vlm("llava_next")
    tok = processor.tokenizer
    stop, image = stop_token_ids(model, processor), image_token_ids(model, processor)
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many red shapes?"}]}]]
    enc = encode_prompts(processor, messages, [[Image.new("RGB", (56, 56), "white")]])
    engine = build_engine(processor, row_layout(model, processor), SamplingConfig(num_generations=8,
                          max_completion_length=24), stop, image, PerfConfig(engine="shared" if share_prefix else "plain"))
    user = tok.convert_tokens_to_ids("<|user|>")  # a special token of the chat template, made likely to be sampled
    hook = model.lm_head.register_forward_hook(lambda mod, args, out: out.index_add(
        -1, torch.tensor([user]), torch.full((*out.shape[:-1], 1), 4.0)))
    torch.manual_seed(3)
    try:
        rollout = engine.sample(model, enc, 8)
    finally:
        hook.remove()
    drop = set(stop) | set(image) | {tok.pad_token_id}
    for text, row, mask in zip(rollout.completions, rollout.completion_ids, rollout.completion_mask):
        kept = [i for i, m in zip(row.tolist(), mask.tolist()) if m and i not in drop]
        assert text == tok.decode(kept, skip_special_tokens=False)
    assert any("<|user|>" in text for text in rollout.completions)  # a special token sampled is text like any other


@pytest.mark.parametrize("family", BUILDERS.names())
def test_extra_stop_tokens_are_text_of_one_token(family):
    """An extra stop token is text the tokenizer encodes as one id, the id the sampler stops on: an added token or
    a word piece joins the stop ids; text that encodes to several ids (which could never stop a completion) is
    refused by name, not ignored, and the vocabulary's spelling of a piece ("Ġis") is answered with its text."""
    model, processor = build_vlm(family)
    tok = processor.tokenizer
    base = stop_token_ids(model, processor)
    tok.add_special_tokens({"additional_special_tokens": ["<stop_here>"]})
    added = tok.convert_tokens_to_ids("<stop_here>")
    assert added not in base
    assert stop_token_ids(model, processor, ["<stop_here>"]) == sorted({*base, added})
    space_is, newline = tok.convert_tokens_to_ids("Ġis"), tok.convert_tokens_to_ids("Ċ")  # byte-level BPE pieces
    assert tok.decode([space_is]) == " is" and tok.decode([newline]) == "\n"
    assert stop_token_ids(model, processor, [" is", "\n"]) == sorted({*base, space_is, newline})
    tok.add_tokens([AddedToken("END", single_word=True)])  # matches only as a whole word: not after the anchor
    assert stop_token_ids(model, processor, ["END"]) == sorted({*base, tok.convert_tokens_to_ids("END")})
    refused = {
        "</answer> done": f"it encodes as {tok.tokenize('</answer> done')}",  # the family's own pieces
        "Ġis": "(the vocabulary's spelling of the token whose text is ' is': give ' is')",
        "é": "it encodes as ['Ã', '©']",  # a byte piece of the vocabulary, but no text encodes to it alone
        "": "(an empty string or not a string)",
    }
    for bad, why in refused.items():
        with pytest.raises(ValueError) as err:
            stop_token_ids(model, processor, [bad])
        assert str(err.value).startswith(f"policy.extra_stop_tokens: {bad!r} is not text of one token")
        assert why in str(err.value)


def test_extra_stop_tokens_on_a_tokenizer_that_marks_word_starts():
    """A Llama-2-style tokenizer puts ``▁`` before a text (its tokenizer.json: ``Prepend("▁")``), so ``"}"`` alone
    encodes as ``▁}``; in a completion, after other text, a ``}`` is the plain ``}`` token and a newline is
    ``<0x0A>``. The stop ids are those of the text where it follows other text."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁": 4, "i": 5, "s": 6, "is": 7, "▁is": 8, "}": 9,
             "▁}": 10, "a": 11}
    core = Tokenizer(models.BPE(vocab, [("i", "s"), ("▁", "is"), ("▁", "}")], byte_fallback=True, unk_token="<unk>"))
    core.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    core.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                      decoders.Strip(" ", 1, 0)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="</s>", unk_token="<unk>", bos_token="<s>")
    assert tok.convert_ids_to_tokens(tok("a\nis}", add_special_tokens=False)["input_ids"]) == \
        ["▁", "a", "<0x0A>", "is", "}"]  # what a completion holds
    model = torch.nn.Module()  # no generation config: EOS only
    for text, token in [("}", "}"), ("\n", "<0x0A>"), (" is", "▁is"), ("is", "is")]:
        assert stop_token_ids(model, tok, [text]) == sorted({2, vocab[token]}), text
    with pytest.raises(ValueError, match=r"'s\}' is not text of one token: it encodes as \['s', '\}'\]"):
        stop_token_ids(model, tok, ["s}"])


def test_an_image_token_cannot_be_a_stop_token():
    model, processor = build_vlm("llava_next")
    image = image_token_ids(model, processor)
    token = processor.tokenizer.convert_ids_to_tokens(image[0])
    assert stop_token_ids(model, processor, [token])  # the text is one token ...
    with pytest.raises(ValueError, match=rf"'{token}' is an image token, which the sampler never emits"):
        stop_token_ids(model, processor, [token], never=set(image))  # ... that the sampler suppresses
