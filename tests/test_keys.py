"""An API key is masked in every form a server or a library echoes it (JSON-escaped, percent-encoded, HTML, hex,
inside base64 or base64url; any length), and a credential inside ``base_url`` is refused at startup naming the
field, from YAML, ``${oc.env:...}`` or a flag, before anything is written."""

import base64
import html
import json
import urllib.parse

import pytest
import yaml

from lit_grpo.cli import main
from lit_grpo.api_keys import find_credentials, redact

KEYS = ["sk-live/Q3+9x=7Zt2Wm4f", "a/b+c", "k3y!", "tok en/9", "Zx", "ab/c+d=e\"f\\g h&é"]
"""A long key with the characters escapers change (``/``, ``+``, ``=``), short keys (5, 4, 2 characters), one with a
space, one with a quote, a backslash and a non-ASCII letter."""


def echoes(key: str) -> dict[str, str]:
    """How servers and libraries write ``key`` back, each made with the standard library."""
    forms = {
        "raw": key,
        "json \\/ (PHP)": json.dumps(key).strip('"').replace("/", "\\/"),
        "json \\u (every char)": "".join(f"\\u{ord(c):04x}" for c in key),
        "json \\u upper": "".join(f"\\u{ord(c):04X}" for c in key),
        "json in json": json.dumps(key.replace("/", "\\/"))[1:-1],  # \\/ : the escape escaped again
        "percent": urllib.parse.quote(key, safe=""),
        "percent lower hex": "".join(f"%{b:02x}" for b in key.encode()),
        "percent twice": urllib.parse.quote(urllib.parse.quote(key, safe=""), safe=""),
        "form (quote_plus)": urllib.parse.quote_plus(key),
        "html entities": "".join(f"&#{ord(c)};" for c in key),
        "html escape": html.escape(key),
        "hex": key.encode().hex(),
        "repr of bytes": repr(key.encode())[2:-1],  # b'\\xc3\\xa9': non-ASCII as \\x escapes of its UTF-8
    }
    for prefix in ("", "u:", "Bearer ", "user:"):  # every byte alignment of the key inside the encoded text
        forms[f"base64({prefix!r}+key)"] = base64.b64encode((prefix + key).encode()).decode()
        forms[f"base64url({prefix!r}+key)"] = base64.urlsafe_b64encode((prefix + key).encode()).decode().rstrip("=")
    return forms


@pytest.mark.parametrize("key", KEYS)
def test_a_key_is_masked_in_every_form_it_is_echoed_in(key, monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", key)
    for name, form in echoes(key).items():
        text = f'HTTP 401: {{"error": "invalid key", "echo": "{form}"}}'
        out = redact(text)
        assert form not in out, (name, form, out)
        if not name.startswith("base64"):  # the whole form is the key: exactly masked
            assert out == 'HTTP 401: {"error": "invalid key", "echo": "***"}', (name, out)


def test_text_without_the_key_is_left_as_it_is(monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", "sk-live/Q3+9x=7Zt2Wm4f")
    text = "judge http://127.0.0.1:9/v1/chat/completions: HTTP 500 (x3); c2stbGl2 is not the key"
    assert redact(text) == text


@pytest.mark.parametrize("url, what", [
    ("http://user:{pct}@judge:8000/v1", "a user name or password in the URL"),  # a URL's userinfo is percent-encoded
    ("https://{pct}@judge/v1", "a user name or password in the URL"),
    ("https://tok@judge/v1", "a user name or password in the URL"),
    ("https://judge/v1?api_key={key}", "the URL's query parameter 'api_key' carries a credential"),
    ("https://judge/v1?api-version=2024-06-01&key=abc", "the URL's query parameter 'key' carries a credential"),
    ("https://judge.azurewebsites.net/api/v1?code=xyz", "the URL's query parameter 'code' carries a credential"),
    ("https://bucket.s3.amazonaws.com/v1?X-Amz-Algorithm=AWS4&X-Amz-Signature=ab12",
     "the URL's query parameter 'X-Amz-Signature' carries a credential"),
    ("https://judge/v1#token=abc", "the URL's fragment parameter 'token' carries a credential"),
    ("https://judge/v1;api_key=abc/chat", "the URL's path parameter 'api_key' carries a credential"),
    ("https://judge/v1?X-Goog-Credential=abc", "the URL's query parameter 'X-Goog-Credential' carries a credential"),
    ("https://judge/{pct}/v1", "holds the value of a key variable"),  # the key, percent-encoded, in the path
])
def test_a_credential_in_base_url_is_found_naming_the_field(url, what, monkeypatch):
    key = "sk-live/Q3+9x=7Zt2Wm4f"
    monkeypatch.setenv("JUDGE_API_KEY", key)
    url = url.format(key=key, pct=urllib.parse.quote(key, safe=""))
    assert find_credentials({"model": {"judge": {"base_url": url}}}) == [f"model.judge.base_url ({what})"]


def test_a_base_url_without_credentials_is_fine(monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", "sk-live/Q3+9x=7Zt2Wm4f")
    for url in ("http://judge-host:8000/v1", "https://api.example.com/openai/v1?api-version=2024-06-01"):
        assert find_credentials({"judge": {"base_url": url}}) == []


# ----------------------------------------------------------------- through the command line
ENV = "LIT_GRPO_TEST_JUDGE_URL"
URLS = {  # a judge URL holding a credential -> what the refusal says of it
    "http://127.0.0.1:9/v1?api_key=sk-live%2FQ3": "the URL's query parameter 'api_key' carries a credential",
    "http://sk-live%2FQ3@127.0.0.1:9/v1": "a user name or password in the URL",  # a token as the user name
}


def _judge_config(tmp_path, base_url) -> dict:
    """configs/demo_phyx_oe.yaml's open-ended reward pointed at a judge server, everything written under tmp_path."""
    physics = {"generate": {"path": str(tmp_path / "phyx.parquet"), "kind": "physics", "num": 8, "seed": 0},
               "reader": "phyx", "split": "test", "reader_args": {"answer_format": "open"}}
    return {"trainer": {"logger": {"init_args": {"save_dir": str(tmp_path / "logs")}},
                        "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                       "init_args": {"dirpath": str(tmp_path / "ckpt")}}]},
            "model": {"init_args": {
                "policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}},
                "rewards": [{"name": "open_accuracy", "kwargs": {"judge": {"base_url": base_url}}}]}},
            "data": {"train": {**physics, "rows": "2:"}, "val": {**physics, "rows": ":2"},
                     "test": {**physics, "rows": ":2"}}}


@pytest.mark.parametrize("route, url, subcommand", [(r, u, "fit") for r in ("yaml", "oc.env", "flag") for u in URLS]
                         + [("yaml", u, sub) for u in list(URLS)[:1] for sub in ("test", "predict")])
def test_a_credential_in_base_url_is_refused_at_startup_naming_the_field(tmp_path, capsys, monkeypatch, route, url,
                                                                       subcommand):
    monkeypatch.setenv(ENV, url)
    cfg = _judge_config(tmp_path, url if route == "yaml" else "${oc.env:%s}" % ENV)
    (tmp_path / "judge.yaml").write_text(yaml.safe_dump(cfg))
    args = [subcommand, "--config", "configs/demo_phyx_oe.yaml", "--config", str(tmp_path / "judge.yaml")]
    if route == "flag":
        args.append(f"--model.init_args.rewards=[{{name: open_accuracy, kwargs: {{judge: {{base_url: '{url}'}}}}}}]")
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: model.init_args.rewards.0.kwargs.judge.base_url ({URLS[url]})")
    assert "value not shown" in err and "sk-live" not in err
    # nothing built or written: no model, data, log folder, config.yaml, hparams.yaml, events or checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["judge.yaml"]


def test_a_key_in_a_metric_name_or_a_printed_traceback_is_masked(monkeypatch, tmp_path, capsys):
    """Two more channels a run writes: TensorBoard (a metric named with the key: its scalar and the eval curves'
    layout) and a traceback the command line prints (a reward's error holding the key)."""
    import sys

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lit_grpo.cli import masked_excepthook
    from lit_grpo.loggers import TensorBoardLogger, masked_names

    key = "sk-live/Q3+9x=7Zt2Wm4f"
    monkeypatch.setenv("JUDGE_API_KEY", key)
    assert masked_names({f"train/reward/{key}": 1.0, "train/reward": 2.0}) == {"train/reward/***": 1.0,
                                                                               "train/reward": 2.0}
    logger = TensorBoardLogger(str(tmp_path), name="t")
    logger.log_metrics({f"val/greedy/{key}": 0.5, f"val/greedy/{key}_se": 0.1, "train/reward": 1.0}, step=1)
    logger.experiment.flush()
    tags = EventAccumulator(logger.log_dir).Reload().Tags()["scalars"]
    assert "val/greedy/***" in tags and not any(key in t for t in tags) and logger._curves == ["val/greedy/***"]
    try:
        raise RuntimeError(f"judge said: bad key {key}")
    except RuntimeError:
        masked_excepthook(*sys.exc_info())
    err = capsys.readouterr().err
    assert "RuntimeError: judge said: bad key ***" in err and key not in err
