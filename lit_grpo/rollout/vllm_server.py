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

import concurrent.futures
import time
from typing import Any

import torch
from torch import Tensor

from lit_grpo.errors import InputError, UserError
from lit_grpo.rollout.vllm import VLLMEngine, sampler_config
from lit_grpo.rollout.weight_group import WeightGroup, describe


class VLLMServerEngine(VLLMEngine):
    """Samples with a vLLM server (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = "vllm_server"
        p = self.perf
        self.url = f"http://{p.vllm_server_host}:{p.vllm_server_port}"
        self.http, self.group, self.failed = None, None, None

    def fail(self, what: str, exc: BaseException) -> InputError:
        return InputError(f"perf.engine: vllm_server: the vLLM server at {self.url} {what} ({type(exc).__name__}: "
                          f"{exc}); start it with: python -m lit_grpo.serve --model <the policy's name_or_path> "
                          f"--port {self.perf.vllm_server_port} (docs/distributed.md)")

    def call(self, method: str, path: str, **kwargs) -> Any:
        """One HTTP call; any failure is one line naming the server (:meth:`fail`)."""
        import httpx

        try:
            reply = self.http.request(method, self.url + path, **kwargs)
            reply.raise_for_status()
            return reply.json()
        except httpx.HTTPError as exc:
            raise self.fail(f"did not answer {method} {path}", exc) from None

    def connect(self, config, dtype: str) -> None:
        """Wait for the server (``vllm_server_timeout`` seconds at most), check that it serves this policy's model,
        and join its weight group."""
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
        text = sampler_config(config).get_text_config()
        mine = {"model_type": config.model_type, "vocab_size": text.vocab_size, "hidden_size": text.hidden_size,
                "num_hidden_layers": text.num_hidden_layers}
        theirs = {k: health.get(k) for k in mine}
        if mine != theirs:
            raise InputError(f"perf.engine: vllm_server: the server at {self.url} serves another model ({theirs}; "
                             f"the policy: {mine}): start it with --model <the policy's name_or_path>")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        port = self.perf.vllm_group_port
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            joined = pool.submit(self.call, "POST", "/group",
                                 json={"port": port, "timeout": self.perf.vllm_server_timeout, "device": device})
            self.group = WeightGroup(self.perf.vllm_server_host, port, 0, self.perf.vllm_server_timeout, device)
            joined.result()

    def generate(self, requests: list[dict], params: dict) -> list[dict]:
        from lit_grpo.serve import encode_image

        if self.failed is not None:
            raise self.failed
        body = [{"prompt_token_ids": r["prompt_token_ids"],
                 "images": [encode_image(i) for i in r.get("multi_modal_data", {}).get("image", [])]}
                for r in requests]
        return self.call("POST", "/generate", json={"requests": body, "params": params})["outputs"]

    def push(self, weights: list[tuple[str, Tensor]]) -> None:
        """Names, dtypes and shapes to ``/weights`` while the tensors go over the group. A failure after the first
        push is kept and raised at the next rollout."""
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
