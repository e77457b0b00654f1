"""A vLLM generation server for ``perf.engine: vllm_server`` (TRL's ``vllm_mode: server``): the sampler on its own
process, machine or GPUs, the trainer elsewhere.

    python -m lit_grpo.serve --model checkpoints/demo --port 8000

``--model`` is the policy's ``name_or_path`` (a folder or hub id: its config and processor; the weights come from
the trainer). The server starts vLLM with dummy weights and samples nothing until a trainer has pushed its policy's
(the trainer's first rollout does, and it pushes again after every optimizer update). HTTP on ``--host:--port``:

- ``GET /health``: ``{"ready", ...}`` (``ready``: weights pushed) and the model's shape
  (:func:`lit_grpo.rollout.vllm_server.model_shape`, which the trainer compares with its policy's);
- ``POST /group {"port", "timeout", "device", "prefix"}``: join a trainer's weight group
  (:mod:`lit_grpo.rollout.weight_group`: the server's store listens on this machine's ``port``, made at the first
  request; each trainer's group has its own key ``prefix``, so a later trainer replaces an earlier one);
- ``POST /weights {"meta": [[name, dtype, shape], ...]}``: receive those tensors over the group, in order, and load
  them (:func:`lit_grpo.rollout.vllm.load_weights`);
- ``POST /generate {"requests": [{"prompt_token_ids", "images": [PNG, base64]}], "params": {SamplingParams}}``
  (or ``"params"``: one per request): :func:`lit_grpo.rollout.vllm.generate`'s data.

One trainer at a time (a trainer of several ranks talks through its rank 0); requests run one after another. Stop it with Ctrl+C or SIGTERM. docs/distributed.md shows
the layout over several machines.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from typing import Any


class Sampler:
    """The server's state: the vLLM engine, the weight group, whether weights have arrived; one request at a time."""

    def __init__(self, args: argparse.Namespace):
        from transformers import AutoConfig

        from lit_grpo.families import load_processor
        from lit_grpo.rollout.vllm import save_sampler_folder, start_llm

        self.config, self.processor, self.dtype = AutoConfig.from_pretrained(args.model), load_processor(args.model), args.dtype
        self.folder = tempfile.TemporaryDirectory(prefix="lit_grpo_serve_")
        save_sampler_folder(self.config, self.processor, self.folder.name)
        self.llm = start_llm(self.folder.name, args.dtype, args.gpu_memory_utilization, args.max_model_length,
                             args.kv_cache_gib)
        self.group, self.ready, self.lock = None, False, threading.Lock()
        self.store, self.store_port = None, None

    def health(self) -> dict[str, Any]:
        from lit_grpo.rollout.vllm import sampler_config
        from lit_grpo.rollout.vllm_server import model_shape, processor_settings

        return {"ready": self.ready, "service": "lit_grpo.serve", "dtype": self.dtype,
                "max_model_len": self.llm.llm_engine.model_config.max_model_len,
                "processor": processor_settings(self.processor), **model_shape(sampler_config(self.config))}

    def join(self, port: int, timeout: float, device: str, prefix: str) -> None:
        """A new trainer's weight group under its ``prefix``, over the store this server keeps on ``port`` (made at
        the first trainer's request); an earlier trainer's group is dropped."""
        from lit_grpo.rollout.weight_group import WeightGroup, server_store

        with self.lock:
            self.group, self.ready = None, False  # the next trainer pushes its own weights before it samples
            if self.store is None or self.store_port != port:
                self.store, self.store_port = server_store(port, timeout), port
            self.group = WeightGroup("0.0.0.0", port, 1, timeout, prefix, device, store=self.store)

    def load(self, meta: list) -> int:
        from lit_grpo.rollout.vllm import load_weights

        with self.lock:
            load_weights(self.llm, self.group.receive([tuple(m) for m in meta]))
            self.ready = True
        return len(meta)

    def generate(self, requests: list[dict], params: dict | list[dict]) -> list[dict]:
        from lit_grpo.rollout.vllm import generate
        from lit_grpo.rollout.vllm_server import decode_image

        prompts = []
        for r in requests:
            prompt = {"prompt_token_ids": r["prompt_token_ids"]}
            if r.get("images"):
                prompt["multi_modal_data"] = {"image": [decode_image(i) for i in r["images"]]}
            prompts.append(prompt)
        with self.lock:
            return generate(self.llm, prompts, params)


def build_app(sampler: Sampler):
    """The FastAPI app of the endpoints in the module docstring."""
    from fastapi import Body, FastAPI, HTTPException

    app = FastAPI(title="lit_grpo vLLM server")

    @app.get("/health")
    def health():
        return sampler.health()

    @app.post("/group")
    def group(body: dict = Body(...)):
        sampler.join(int(body["port"]), float(body.get("timeout", 240)), body.get("device", "cpu"), str(body["prefix"]))
        return {"ok": True}

    @app.post("/weights")
    def weights(body: dict = Body(...)):
        if sampler.group is None:
            raise HTTPException(409, "no weight group: POST /group first")
        return {"ok": True, "count": sampler.load(body["meta"])}

    @app.post("/generate")
    def generate(body: dict = Body(...)):
        if not sampler.ready:
            raise HTTPException(409, "no weights yet: the trainer pushes its policy's before its first rollout")
        return {"outputs": sampler.generate(body["requests"], body["params"])}

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lit_grpo.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the policy's name_or_path (its config and processor)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (the trainer's perf.vllm_server_port)")
    parser.add_argument("--dtype", default="float32", help="the policy's dtype (policy.dtype)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                        help="share of the GPU's memory vLLM may fill (weights and KV cache)")
    parser.add_argument("--kv-cache-gib", type=float, default=None,
                        help="KV cache size in GiB instead of a share (default on a CPU: 1)")
    parser.add_argument("--max-model-length", type=int, default=None, help="longest prompt + completion")
    args = parser.parse_args(argv)
    import torch
    import uvicorn

    if args.kv_cache_gib is None and not torch.cuda.is_available():
        args.kv_cache_gib = 1.0  # a share of a CPU machine's memory counts the trainer's too: a fixed size instead

    import socket

    with socket.socket() as probe:  # a port in use is said now, not after the model has loaded
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port a killed server
        try:  # left in TIME_WAIT is free, one another process listens on is not
            probe.bind((args.host, args.port))
        except OSError as exc:
            parser.exit(1, f"error: {args.host}:{args.port} cannot be listened on ({exc.strerror}): choose another "
                           "--port (and the trainer's perf.vllm_server_port)\n")
    sampler = Sampler(args)
    print(f"lit_grpo.serve: {args.model} on http://{args.host}:{args.port}, waiting for a trainer's weights",
          flush=True)
    uvicorn.run(build_app(sampler), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
