"""Judge replies as servers send them: the verdict of a gpt-oss reply's final channel (never its analysis), and any
reply that cannot be read (quadratic-looking JSON, compression bombs, unknown encodings, a stalled client) a failed
call, counted and named, within the deadline. Real loopback HTTP (lit_grpo.testing.loopback)."""

import gzip
import json
import time
import tracemalloc
import zlib

import pytest

from lit_grpo.tasks.phyx.judge import ACCURACY, RUBRIC, JudgeConfig, JudgeItem, JudgeUnavailableError
from lit_grpo.tasks.phyx.judge.client import OpenAIJudge
from lit_grpo.tasks.phyx.judge.jury import VerdictError, final_channel, flat_objects, parse_vote_strict, parse_vote_tolerant
from lit_grpo.testing.loopback import LoopbackJudgeServer, Reply

FAST = dict(timeout_s=2.0, call_deadline_s=4.0, step_deadline_s=6.0, backoff_s=0.01, backoff_max_s=0.05,
            max_retries=0, api_key_env=None, num_judges=1, max_failure_fraction=1.0)
ITEM = JudgeItem(question="What is the tension?", gold_answer="7.55N", completion="<answer>7.55 N</answer>")


def _grade(script, task=ACCURACY, **cfg):
    """``(votes of one item, metrics, requests seen)`` from a judge on a loopback server answering ``script``."""
    with LoopbackJudgeServer(script) as server:
        judge = OpenAIJudge(JudgeConfig(base_url=server.base_url, **{**FAST, **cfg}))
        try:
            votes = judge.grade([ITEM], task)[0]
            return votes, judge.pop_metrics(), list(server.requests)
        finally:
            judge.close()


# ----------------------------------------------------------------- gpt-oss: the final channel's verdict
# Reply shapes of gpt-oss servers, as their users report them:
# - vLLM issue #23694: "<|channel|>final<|message|>{\"issues\":[]}<|return|>" (special tokens kept in content);
# - text-generation-webui issue #7374 (llama-server): content "analysisUser says ... assistantfinalHello! ..."
#   (the harmony tokens dropped, channel names glued to the text);
# - llama.cpp / LM Studio with a JSON constraint: "<|channel|>final <|constrain|>json<|message|>{...}" (also
#   "<|constrain|>JSON"); vLLM's GptOssReasoningParser notes that tokens can come between "final" and "<|message|>";
# - vLLM with --reasoning-parser openai_gptoss: the analysis in message.reasoning (vLLM >= 0.11: "reasoning used to be
#   called reasoning_content"), the final channel alone in message.content;
# - vLLM issue #41902: content null with completion tokens spent (nothing final to grade).
ANALYSIS = "<|channel|>analysis<|message|>The student wrote 7.55 N. First thought: {\"correctness\": 0}. Units fine.<|end|>"
REPLIES = [  # (content, extra message fields, vote or None, read by the tolerant parser)
    ('analysis... {"correctness": 0} ... assistantfinal{"correctness": 2}', {}, 2, False),
    (ANALYSIS + '<|start|>assistant<|channel|>final<|message|>{"correctness": 2}<|return|>', {}, 2, False),
    ('<|channel|>final<|message|>{"correctness": 1}<|return|>', {}, 1, False),
    (ANALYSIS + '<|start|>assistant<|channel|>final <|constrain|>json<|message|>{"correctness": 2}', {}, 2, False),
    ('<|channel|>final <|constrain|>JSON<|message|>{"correctness": 0}', {}, 0, False),
    ('analysisUser answer 7.55 N matches; draft {"correctness": 1}.assistantfinal json{"correctness": 2}', {}, 2, False),
    ('{"correctness": 2}', {"reasoning": 'Draft {"correctness": 0}, then checked: fine.'}, 2, False),
    ('{"correctness": 1}', {"reasoning_content": 'maybe {"correctness": 2}'}, 1, False),
    (None, {"reasoning": '{"correctness": 2}'}, None, False),  # only reasoning: never graded
    ("", {"reasoning_content": "correctness: 2"}, None, False),
    (ANALYSIS, {}, None, False),  # an analysis channel and no final one
    ('analysisThe student is right {"correctness": 2}', {}, None, False),  # the same, tokens dropped
    ('Draft: {"correctness": 0}. Checking the units again... Final: {"correctness": 2}', {}, 2, True),  # the last one
    ('```json\n{"correctness": 0}\n```\nOn reflection:\n```json\n{"correctness": 1}\n```', {}, 1, True),
    ("correctness: 0 at first; after checking, correctness: 2", {}, 2, True),
    ('{"correctness": 2, "note": "the braces in {F = ma} are text"}', {}, 2, True),  # extra field: tolerant
    ('<|channel|>final<|message|>{"correctness": 2}<|end|><|start|>assistant<|channel|>final<|message|>'
     '{"correctness": 1}<|return|>', {}, 1, False),  # two final messages: the last
]


@pytest.mark.parametrize("content, extra, vote, fallback", REPLIES)
def test_the_verdict_is_the_final_channels_never_the_reasoning(content, extra, vote, fallback):
    votes, metrics, requests = _grade(lambda body, n: Reply(content=content, message=extra))
    assert votes == [None if vote is None else {"correctness": vote}]
    assert metrics["judge/failures"] == (vote is None) and metrics["judge/parse_fallbacks"] == fallback
    fmt = requests[0].body["response_format"]  # the structured output vLLM honours
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["required"] == ["correctness"]


def test_a_rubric_verdict_in_the_final_channel_after_a_draft_one():
    draft = {"correctness": 0, "principle": 0, "unit": 0, "reasoning": 0}
    final = {"correctness": 2, "principle": 1, "unit": 1, "reasoning": 2}
    content = f"analysis{json.dumps(draft)} looks wrong... no, it is right.assistantfinal{json.dumps(final)}"
    assert parse_vote_strict(content, RUBRIC) == final and parse_vote_tolerant(content, RUBRIC) == final


@pytest.mark.parametrize("text, final", [
    ("plain", "plain"), ("xassistantfinal{}", "{}"), ("<|channel|>final<|message|>ok<|return|>", "ok"),
    ("<|channel|>final <|constrain|>json<|message|>{}<|call|>", "{}"), ("analysis: it is fine", "analysis: it is fine"),
])
def test_final_channel_table(text, final):
    assert final_channel(text) == final


def test_reasoning_alone_is_no_verdict():
    with pytest.raises(VerdictError, match="reasoning is never graded"):
        final_channel('<|channel|>analysis<|message|>{"correctness": 2}')


# ----------------------------------------------------------------- replies that cannot be read
@pytest.mark.parametrize("text, spans", [
    ('a {"x": 1} b {"y": {"z": 2}} c', ['{"x": 1}', '{"z": 2}']),
    ('{"s": "}{"} {"t": 1}', ['{"s": "}{"}', '{"t": 1}']),  # braces inside a string of an object do not count
    ('{"s": "a \\" } b"}', ['{"s": "a \\" } b"}']),  # nor after an escaped quote
    ("{" * 5 + "}", ["{}"]), ("}}}{", []),
])
def test_flat_objects_table(text, spans):
    assert flat_objects(text) == spans


HOSTILE = {  # reply contents (finish_reason "stop") that a quadratic or recursive parser chokes on
    "20,000 {": "{" * 20_000,
    "200,000 [": "[" * 200_000,
    "nested objects": '{"a": ' * 50_000 + "1" + "}" * 50_000,
    "unclosed objects": '{"correctness": ' * 40_000,
    "pairs without values": "correctness: " * 60_000,
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_reply_is_a_failed_call_at_once(name):
    start = time.monotonic()
    votes, metrics, _ = _grade(lambda body, n: Reply(content=HOSTILE[name]))
    assert votes == [None] and metrics["judge/failures"] == 1
    assert time.monotonic() - start < 3.0  # the old outermost-first scan took minutes on the first one
    with pytest.raises(VerdictError):
        parse_vote_tolerant(HOSTILE[name], ACCURACY)


def test_too_many_hostile_replies_stop_the_run_naming_the_endpoint():
    with LoopbackJudgeServer(lambda body, n: Reply(content="{" * 20_000)) as server:
        judge = OpenAIJudge(JudgeConfig(base_url=server.base_url, **{**FAST, "max_failure_fraction": 0.0}))
        with pytest.raises(JudgeUnavailableError) as err:
            judge.grade([ITEM], ACCURACY)
        judge.close()
    assert server.base_url in str(err.value) and "invalid verdict" in str(err.value)


def _gzip_bomb(mib: int, wbits: int) -> bytes:
    """``mib`` MiB of zeros compressed (gzip: ``wbits`` 31; zlib-wrapped deflate: 15), made chunk by chunk."""
    enc, zeros = zlib.compressobj(9, zlib.DEFLATED, wbits), bytes(2**20)
    return b"".join(enc.compress(zeros) for _ in range(mib)) + enc.flush()


@pytest.mark.parametrize("encoding, wbits", [("gzip", 31), ("deflate", 15), ("gzip, gzip", None)])
def test_a_compression_bomb_is_refused_within_the_limit_without_inflating_it(encoding, wbits):
    body = _gzip_bomb(64, wbits) if wbits else gzip.compress(gzip.compress(bytes(64 * 2**20), 9), 9)
    tracemalloc.start()
    try:
        votes, metrics, requests = _grade(lambda b, n: Reply(raw_body=body, headers={"Content-Encoding": encoding}),
                                          max_reply_bytes=2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert votes == [None] and metrics["judge/failures"] == 1
    assert peak < 12 * 2**20, peak  # 64 MiB once inflated; httpx's own decoding held all of it
    assert requests[0].headers["Accept-Encoding"] == "gzip, deflate"


@pytest.mark.parametrize("reply, error", [
    (Reply(raw_body=b"\x1b\x00\xf8", headers={"Content-Encoding": "br"}), "Content-Encoding 'br'"),
    (Reply(raw_body=b"not gzip at all", headers={"Content-Encoding": "gzip"}), "not valid compressed data"),
    (Reply(raw_body=json.dumps({"pad": "x" * (2**20 + 10)})), "reply over judge.max_reply_bytes=1048576"),
])
def test_an_unreadable_body_is_a_failed_call_naming_why(reply, error):
    with LoopbackJudgeServer(lambda body, n: reply) as server:
        judge = OpenAIJudge(JudgeConfig(base_url=server.base_url, **{**FAST, "max_reply_bytes": 2**20,
                                                                      "max_failure_fraction": 0.0}))
        with pytest.raises(JudgeUnavailableError) as err:
            judge.grade([ITEM], ACCURACY)
        judge.close()
    assert error in str(err.value) and server.base_url in str(err.value)


def test_a_compressed_reply_within_the_limit_is_read():
    payload = json.dumps({"choices": [{"finish_reason": "stop", "message": {"content": '{"correctness": 2}'}}]})
    votes, metrics, _ = _grade(lambda b, n: Reply(raw_body=gzip.compress(payload.encode()),
                                                  headers={"Content-Encoding": "gzip"}))
    assert votes == [{"correctness": 2}] and metrics["judge/failures"] == 0


def test_a_client_whose_loop_stalls_fails_its_calls_naming_the_endpoint(monkeypatch):
    """Whatever blocks the client's event loop (here: reading a reply takes 3 s of CPU), the step ends within
    ``step_deadline_s`` + the grace with every call failed and counted, never a bare TimeoutError."""
    import lit_grpo.tasks.phyx.judge.client as client

    monkeypatch.setattr(client, "LOOP_GRACE_S", 0.2)
    real = OpenAIJudge._read
    monkeypatch.setattr(OpenAIJudge, "_read", lambda self, body, task: (time.sleep(3), real(self, body, task))[1])
    with LoopbackJudgeServer(lambda body, n: Reply(content='{"correctness": 2}')) as server:
        judge = OpenAIJudge(JudgeConfig(base_url=server.base_url, **{**FAST, "step_deadline_s": 0.5,
                                                                      "max_failure_fraction": 0.0}))
        start = time.monotonic()
        with pytest.raises(JudgeUnavailableError) as err:
            judge.grade([ITEM], ACCURACY)
        assert time.monotonic() - start < 2.0
        assert judge.pop_metrics()["judge/failures"] == 1
        judge.close()
    assert server.base_url in str(err.value) and "did not finish within step_deadline_s=0.5s" in str(err.value)
