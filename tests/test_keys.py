"""An API key is masked in every form a server or a library echoes it (JSON-escaped, percent-encoded, HTML,
inside base64 or base64url; any length; not hex dumps or ``\\x`` escapes, which docs/judge.md says are left out), and a credential inside ``base_url`` is refused at startup naming the
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
    assert "val/greedy/***" in tags and not any(key in t for t in tags) and logger.curves == ["val/greedy/***"]
    try:
        raise RuntimeError(f"judge said: bad key {key}")
    except RuntimeError:
        masked_excepthook(*sys.exc_info())
    err = capsys.readouterr().err
    assert "RuntimeError: judge said: bad key ***" in err and key not in err


@pytest.mark.parametrize("key", KEYS)
def test_a_key_split_across_lines_is_masked(key, monkeypatch):
    """A server's echo wrapped at a width: a line break (and the next line's indentation) anywhere inside the key."""
    monkeypatch.setenv("JUDGE_API_KEY", key)
    for cut in range(1, len(key)):
        for wrap in ("\n", "\r\n", "\n    "):
            text = f"HTTP 401: bad key {key[:cut]}{wrap}{key[cut:]}' (x)"
            assert redact(text) == "HTTP 401: bad key ***' (x)", (cut, wrap)


def masked_buffer():
    """A text buffer with the console mask on its ``write`` and ``flush`` (what :func:`mask_console` puts on
    ``sys.stdout``), and what reached the buffer itself."""
    import io

    from lit_grpo.api_keys import MaskedWrites

    buf = io.StringIO()
    masked = MaskedWrites(buf)
    buf.write, buf.flush = masked.write, masked.flush
    return buf, masked


def test_the_console_mask_holds_a_line_that_may_go_on_with_a_key(monkeypatch):
    """Text reaches the stream masked at each line break or flush; a line's end that could begin the key waits for
    the next line (a wrapped echo, a key printed in pieces), and a line that did not go on with it comes out whole."""
    key = "sk-live/Q3+9x=7Zt2Wm4f"
    monkeypatch.setenv("JUDGE_API_KEY", key)
    buf, masked = masked_buffer()
    print(f"echo: bad key {key[:9]}\n    {key[9:]}' (HTTP 401)", file=buf)  # one write, the key across lines
    assert buf.getvalue() == "echo: bad key ***' (HTTP 401)\n"
    print(f"key {key[:4]}", file=buf, flush=True)  # a line ending with the key's start: held, flush or not
    assert buf.getvalue().endswith("(HTTP 401)\nkey ")
    buf.write(f"{key[4:15]}")
    buf.flush()
    print(f"{key[15:]} then sk.", file=buf)  # the key in three writes, across a line break
    assert buf.getvalue().endswith("(HTTP 401)\nkey *** then sk.\n")
    buf.write(" 50%|##   | 2/4\r")  # a progress bar's line: out at its carriage return
    assert buf.getvalue().endswith(" 50%|##   | 2/4\r")
    print("per token accuracy, basic geometry: s", file=buf)  # prose is not a credential; a held "s" ...
    masked.restore()  # ... comes out when the mask is taken off (at exit)
    assert buf.getvalue().endswith("2/4\rper token accuracy, basic geometry: s\n") and "write" not in vars(buf)


LEAKY = '''
"""A user's module whose reward and template put the judge's key in every channel a run writes."""
import logging
import os

from lit_grpo.data.sample import TEMPLATES
from lit_grpo.rewards.registry import RewardOutput

CALLS = []


@TEMPLATES.register("key_echo")
def key_echo(sample):
    """The seed template's prompt with the key at its end: logged text (the completions table) holding it."""
    system, text = TEMPLATES.get("visualsphinx_seed")(sample)
    return system, f"{text}\\nkey: {os.environ['JUDGE_API_KEY']}"


class Leaky:
    """Prints the key (whole, and across two lines as a wrapped server echo), logs it, names a metric after it, and
    raises with it in the message at its second batch."""

    def __call__(self, completions, **_):
        key = os.environ["JUDGE_API_KEY"]
        if completions:
            CALLS.append(len(completions))
        print(f"reward sees key {key}")
        print(f"server echo: bad key {key[:9]}\\n    {key[9:]}' (HTTP 401)")
        logging.getLogger("leaky").warning("logged key %s", key)
        if len(CALLS) == 2:
            raise RuntimeError(f"judge said: bad key {key}")
        return RewardOutput([0.0] * len(completions), metrics={f"echo {key}": 1.0})
'''


@pytest.mark.slow
def test_a_key_reaches_no_file_of_a_wandb_run(tmp_path):
    """The W&B overlay, offline, on a run whose reward prints the key (whole and across two lines), logs it, names a
    metric after it and raises with it, and whose logged prompts hold it: no file the run wrote (W&B's ``output.log``,
    the binary ``.wandb`` file, tables, checkpoints) and neither console stream holds the key or its wrapped tail;
    the masked text is where the key was."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("wandb")
    root = Path(__file__).resolve().parents[1]
    key = "sk-live/Q3+9x=7Zt2Wm4f"
    (tmp_path / "leaky_mod.py").write_text(LEAKY)
    cfg = {"trainer": {"max_steps": 3, "enable_progress_bar": False, "log_every_n_steps": 1,
                       "default_root_dir": str(tmp_path), "logger": {"init_args": {"save_dir": str(tmp_path / "logs")}},
                       "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                      "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True}},
                                     {"class_path": "lit_grpo.callbacks.CompletionSamples",
                                      "init_args": {"every_n_steps": 1}}]},
           "model": {"init_args": {"policy": {"name_or_path": str(tmp_path / "model"), "embedded": {"seed": 0}},
                                   "sampling": {"num_generations": 2, "max_completion_length": 6},
                                   "evaluation": {"before_fit": False, "num_samples": 0},
                                   "rewards": [{"name": "leaky_mod.Leaky"}]}},
           "data": {"train": {"generate": {"path": str(tmp_path / "train.parquet"), "kind": "puzzles", "num": 8}},
                    "val": None, "batch_size": 2, "template": "key_echo"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path / "home"), WANDB_MODE="offline", JUDGE_API_KEY=key,
               PYTHONPATH=os.pathsep.join([str(root), str(tmp_path)]))
    proc = subprocess.run([sys.executable, "-m", "lit_grpo", "fit", "--config", "configs/demo.yaml", "--config",
                           "configs/wandb.yaml", "--config", str(tmp_path / "run.yaml")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "RuntimeError: judge said: bad key ***" in proc.stderr, proc.stderr[-3000:]
    [run] = (tmp_path / "logs" / "wandb").glob("offline-run-*")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    leaks = {str(p.relative_to(tmp_path)) for p in files for part in (key, key[9:]) if part.encode() in p.read_bytes()}
    assert leaks == set() and key[9:] not in proc.stdout + proc.stderr
    log = (run / "files" / "output.log").read_text()
    for line in ("reward sees key ***", "server echo: bad key ***' (HTTP 401)", "WARNING leaky: logged key ***",
                 "RuntimeError: judge said: bad key ***"):
        assert line in log.splitlines(), line
    record = next(run.glob("run-*.wandb")).read_bytes()
    assert b"train/reward/Leaky/echo ***" in record and b"reward sees key ***" in record
    [table] = (run / "files" / "media" / "table" / "train").glob("completions_0_*.table.json")
    assert "\\nkey: ***" in table.read_text()


def test_a_key_in_logged_text_and_tables_is_masked_in_tensorboard(monkeypatch, tmp_path):
    """Logged text (a completion), a table's cells and its tag reach TensorBoard with the key masked; prose around it,
    including words a credential's shape would match (``token accuracy``), stays as it was."""
    from types import SimpleNamespace

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lit_grpo.loggers import TensorBoardLogger, log_table, log_text

    key = "sk-live/Q3+9x=7Zt2Wm4f"
    monkeypatch.setenv("JUDGE_API_KEY", key)
    logger = TensorBoardLogger(str(tmp_path), name="t")
    trainer = SimpleNamespace(loggers=[logger])
    log_text(trainer, "train/completions", f"the key is {key[:5]}\n{key[5:]}, token accuracy", 1)
    log_table(trainer, f"test/{key}", ["completion"], [[f"echo {key}"]], 1)
    logger.experiment.flush()
    events = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0}).Reload()
    texts = {tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode() for tag in events.Tags()["tensors"]}
    assert texts == {"train/completions/text_summary": "the key is ***, token accuracy",
                     "test/***/text_summary": "| completion |\n|---|\n| echo *** |\n"}


def test_a_key_in_a_prediction_is_masked_in_predictions_jsonl(monkeypatch, tmp_path):
    """``predict``'s JSONL: a prompt or completion holding the key is masked there too (inside its JSON string);
    the line stays JSON."""
    from lit_grpo.callbacks import PredictionsJSONL

    key = "sk-live/Q3+9x=7Zt2Wm4f"
    monkeypatch.setenv("JUDGE_API_KEY", key)
    writer = PredictionsJSONL(path=str(tmp_path / "p.jsonl"))
    writer.file = tmp_path / "p.jsonl"
    writer.write_on_batch_end(None, None, [{"id": "r0", "prompt": f"key: {key}", "completion": f'"{key}" ok'}],
                              None, None, 0)
    assert [json.loads(line) for line in writer.file.read_text().splitlines()] == [
        {"id": "r0", "prompt": "key: ***", "completion": '"***" ok'}]
