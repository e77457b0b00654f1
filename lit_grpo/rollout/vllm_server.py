"""The vLLM server engine (``perf.engine: vllm_server``, TRL's ``vllm_mode: server``): rollouts from a generation
server started apart (``python -m lit_grpo.serve``, on this machine or another), every log-prob pass by the policy.

It is the colocated engine (:class:`~lit_grpo.rollout.vllm.VLLMEngine`: same requests, sampling parameters, checks
and rollout) with the sampler behind HTTP: prompts and images go to ``/generate``; the weights go over a two-process
group of their own (gloo on a CPU, NCCL on a GPU; :mod:`lit_grpo.rollout.weight_group`) after their names, dtypes and
shapes went to ``/weights``. A server that does not answer is one ``error:`` line naming its address and the command
that starts it; a push that fails after an update is reported at the next rollout, so the step that finished is the
one the run saves (:mod:`lit_grpo.save_on_failure`).
"""

from __future__ import annotations

import base64
import concurrent.futures
import io
import threading
import time
import uuid
from typing import Any, Callable

import torch
from torch import Tensor

from lit_grpo.errors import InputError, UserError
from lit_grpo.rollout.vllm import VLLMEngine, sampler_config
from lit_grpo.rollout.weight_group import WeightGroup, describe


def decode_image(data: str):
    """A PNG sent as base64 -> the PIL image (PNG is lossless: the pixels the trainer's processor saw)."""
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def encode_image(image) -> str:
    """A PIL image -> PNG, base64 (what :func:`decode_image` reads)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


PROCESSOR_KEYS = ("image_mean", "image_std", "rescale_factor", "do_normalize", "do_rescale", "do_resize",
                  "do_pad", "size", "crop_size", "patch_size", "image_grid_pinpoints", "max_image_tiles",
                  "min_pixels", "max_pixels", "merge_size", "temporal_patch_size", "do_image_splitting",
                  "max_image_size")
"""The image processor's settings a server and a trainer must share (the pixels each prompt's image becomes)."""


def processor_settings(processor) -> dict:
    """The :data:`PROCESSOR_KEYS` the processor's image processor sets (as JSON gives them back), and the tokenizer's
    size: what makes one image and one prompt the same tokens on both sides."""
    import json

    image = getattr(processor, "image_processor", None)
    found = {} if image is None else {k: v for k, v in image.to_dict().items() if k in PROCESSOR_KEYS}
    tok = getattr(processor, "tokenizer", processor)
    return json.loads(json.dumps({**found, "vocab": len(tok)}, default=str))


def model_shape(config) -> dict:
    """What a server and a trainer compare before the weights go over: the model type and the language model's and
    vision tower's sizes (every weight's shape follows from them)."""
    text, vision = config.get_text_config(), getattr(config, "vision_config", None)
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "intermediate_size")
    shape = {"model_type": config.model_type, **{k: getattr(text, k, None) for k in keys}}
    if vision is not None:
        shape.update({f"vision_{k}": getattr(vision, k, None) for k in ("hidden_size", "num_hidden_layers")})
    return shape


class VLLMServerEngine(VLLMEngine):
    """Samples with a vLLM server (module docstring)."""

    name = "vllm_server"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.perf
        self.url = f"http://{p.vllm_server_host}:{p.vllm_server_port}"
        self.http, self.group, self.failed = None, None, None
        self.model = "<the policy's name_or_path>"

    def fail(self, what: str, exc: BaseException | None = None) -> InputError:
        first = str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else ""
        why = f" ({type(exc).__name__}: {first})" if exc is not None else ""
        return InputError(f"perf.engine: vllm_server: the vLLM server at {self.url} {what}{why}; start it with: "
                          f"python -m lit_grpo.serve --model {self.model} --port {self.perf.vllm_server_port} "
                          "(docs/distributed.md)")

    def call(self, method: str, path: str, **kwargs) -> Any:
        """One HTTP call; a server that does not answer is one line naming it (:meth:`fail`); one that answers
        with an error is one line with the server's own reason."""
        import httpx

        try:
            reply = self.http.request(method, self.url + path, **kwargs)
        except httpx.HTTPError as exc:
            raise self.fail(f"did not answer {method} {path}", exc) from None
        if reply.is_error:
            try:
                detail = reply.json().get("detail", reply.text)
            except ValueError:
                detail = reply.text
            detail = " ".join(str(detail).split())[:300]
            raise InputError(f"perf.engine: vllm_server: the vLLM server at {self.url} refused {method} {path} with "
                             f"HTTP {reply.status_code}: {detail or reply.reason_phrase} (its own log says more)")
        try:
            return reply.json()
        except ValueError:
            raise self.fail(f"answered {method} {path} with no JSON: is it lit_grpo.serve?") from None

    def connect(self, config, dtype: str) -> None:
        """Wait for the server (``vllm_server_timeout`` seconds at most), check that it serves this policy's model,
        and join its weight group: rank 0 only (the one rank that talks to the server); every rank raises what it
        raised."""
        self.model = getattr(config, "name_or_path", None) or self.model
        on_rank_zero(lambda: self._connect(config, dtype))
        self.max_model_len = on_rank_zero(lambda: self.max_model_len)  # every rank checks its own prompts

    def _connect(self, config, dtype: str) -> None:
        import httpx

        self.http = httpx.Client(timeout=self.perf.vllm_server_timeout)
        deadline = time.monotonic() + self.perf.vllm_server_timeout
        while True:
            try:
                health = self.http.get(self.url + "/health").json()
                break
            except httpx.HTTPError as exc:
                if time.monotonic() > deadline:
                    raise self.fail(f"was not up within {self.perf.vllm_server_timeout:g} s", exc) from None
                time.sleep(1.0)
            except ValueError:
                raise self.fail("answered GET /health with no JSON: is it lit_grpo.serve?") from None
        if not isinstance(health, dict) or health.get("service") != "lit_grpo.serve":
            raise self.fail("is not lit_grpo.serve (its GET /health says otherwise)")
        mine = {**model_shape(sampler_config(config)), "dtype": dtype,
                "processor": processor_settings(self.processor)}
        theirs = {k: health.get(k) for k in mine}
        if mine != theirs:
            differ = {k: (theirs[k], mine[k]) for k in mine if theirs[k] != mine[k]}
            raise InputError(f"perf.engine: vllm_server: the server at {self.url} serves another model or settings "
                             f"(server, policy: {differ}): start it with --model {self.model} --dtype {dtype} (the "
                             "policy's own folder, processor included)")
        self.max_model_len = health.get("max_model_len")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        port, timeout = self.perf.vllm_group_port, self.perf.vllm_server_timeout
        prefix = uuid.uuid4().hex  # this trainer's keys in the server's store
        joined: dict[str, Any] = {}

        def join() -> None:  # a daemon thread: one that never connects does not keep the process from exiting
            try:
                joined["group"] = WeightGroup(self.perf.vllm_server_host, port, 0, timeout, prefix, device)
            except Exception as exc:
                joined["error"] = exc

        thread = threading.Thread(target=join, daemon=True)
        thread.start()
        try:
            self.call("POST", "/group", json={"port": port, "timeout": timeout, "device": device, "prefix": prefix})
        except InputError as exc:
            raise InputError(f"{exc} (perf.vllm_group_port {port} on the server's machine: is it free?)") from None
        thread.join(timeout)
        if "group" not in joined:  # the group did not form (a port in use, a timeout): one line, not gloo's trace
            raise self.fail(f"could not form the weight group on port {port}", joined.get("error")) from None
        self.group = joined["group"]

    def generate(self, requests: list[dict], params: dict) -> list[dict]:
        """Every rank's requests go to the server in one call from rank 0, each with its rank's sampling parameters
        (its seed), and each rank gets its own completions back (TRL's server mode)."""
        from lit_grpo import distributed as D

        body = [{"prompt_token_ids": r["prompt_token_ids"],
                 "images": [encode_image(i) for i in r.get("multi_modal_data", {}).get("image", [])]}
                for r in requests]
        mine, counts = len(body), D.gather_objects([len(body)])
        if len(counts) > 1:
            body, params = D.gather_objects(body), D.gather_objects([params] * len(body))

        def served() -> list[dict]:
            if self.failed is not None:
                raise self.failed
            return self.call("POST", "/generate", json={"requests": body, "params": params})["outputs"]

        outputs = on_rank_zero(served)
        start = sum(counts[:D.world()[0]])
        return outputs[start:start + mine]

    def push(self, weights: list[tuple[str, Tensor]]) -> None:
        """Names, dtypes and shapes to ``/weights`` while the tensors go over the group, from rank 0 (every rank
        gathered them). A failure after the first push is kept and raised at the next rollout."""
        if self.group is None:  # not rank 0
            return
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                done = pool.submit(self.call, "POST", "/weights", json={"meta": describe(weights)})
                try:
                    self.group.send(weights)
                except RuntimeError as exc:  # the group broke: the server is gone
                    done.cancel()
                    raise self.fail("stopped receiving weights", exc) from None
                done.result()
        except UserError as exc:
            if not self.pushes:
                raise
            self.failed = exc


def on_rank_zero(fn: Callable[[], Any]) -> Any:
    """``fn()`` run by rank 0 alone, its result (or the exception it raised) given to every rank, which returns (or
    raises) it too, so no rank waits on a rank 0 that failed; ``fn()`` itself outside a process group."""
    from lit_grpo import distributed as D

    rank, size = D.world()
    if size == 1:
        return fn()
    box: list[Any] = [None]
    if rank == 0:
        try:
            box[0] = ("ok", fn())
        except Exception as exc:  # every rank raises it
            box[0] = ("error", exc)
    torch.distributed.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        raise value
    return value
