"""One owner per pass (issue 36): from ``GRPOModule.training_step`` to the log-prob kernel
(:func:`lit_grpo.grpo.selective_log_softmax`) a step goes through at most 6 frames, the two counted, and none of the
frames in between is a function whose body only returns a call of another (a call that only forwards). Measured on
real tiny training steps: the kernel is patched to record the stack of every call it gets."""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from pathlib import Path

import pytest
import torch

import lit_grpo.grpo
from lit_grpo import GRPOConfig, GRPOModule
from lit_grpo.config import PerfConfig
from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.data.sample import render_messages
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec
from lit_grpo.rollout import SamplingConfig

MAX_FRAMES = 6


def only_forwards(node: ast.AST) -> bool:
    """A function (or lambda) whose body, its docstring aside, is one ``return`` of a call."""
    if isinstance(node, ast.Lambda):
        return isinstance(node.body, ast.Call)
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call)


@functools.lru_cache(maxsize=None)
def _functions(path: str) -> dict[int, ast.AST]:
    """The functions and lambdas of the file ``path`` by their first line (a function's first decorator's, as
    ``co_firstlineno`` counts it)."""
    found: dict[int, ast.AST] = {}
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.setdefault(min([node.lineno, *(d.lineno for d in node.decorator_list)]), node)
        elif isinstance(node, ast.Lambda):
            found.setdefault(node.lineno, node)
    return found


def forwards(code) -> bool:
    """The function that ``code`` runs only forwards a call (False where its source cannot be read: a comprehension)."""
    node = _functions(code.co_filename).get(code.co_firstlineno) if Path(code.co_filename).is_file() else None
    return node is not None and only_forwards(node)


def test_the_forwarding_rule_on_hand_made_functions():
    """A docstring and a one-call return forward; a second statement, a context around the call, a return of a
    value that is no call, or a lambda of an expression that is no call do not."""
    src = ('def a(x):\n    """doc"""\n    return b(x)\n\n'
           'def c(x):\n    y = x + 1\n    return b(y)\n\n'
           'def d(x):\n    with e():\n        return b(x)\n\n'
           'def f(x):\n    return x.y\n\n'
           'g = lambda m: b(m)\nh = lambda m: m + 1\n')
    nodes = [n for n in ast.walk(ast.parse(src)) if isinstance(n, (ast.FunctionDef, ast.Lambda))]
    verdict = {getattr(n, "name", f"lambda@{n.lineno}"): only_forwards(n) for n in nodes}
    assert verdict == {"a": True, "c": False, "d": False, "f": False, "lambda@16": True, "lambda@17": False}


def _record_kernel_stacks(monkeypatch) -> list[list]:
    """Patch the kernel wherever lit_grpo bound it; each call inside a training step appends the code objects of its
    callers from ``training_step`` down (outermost first)."""
    kernel, chains = lit_grpo.grpo.selective_log_softmax, []

    def recording(*args, **kwargs):
        stack = inspect.stack(0)[1:]  # the callers, innermost first
        top = next((i for i, f in enumerate(stack) if f.function == "training_step"), None)
        if top is not None:
            chains.append([f.frame.f_code for f in reversed(stack[:top + 1])])
        del stack  # frames hold the step's tensors
        return kernel(*args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("lit_grpo") and \
                getattr(module, "selective_log_softmax", None) is kernel:
            monkeypatch.setattr(module, "selective_log_softmax", recording)
    return chains


@pytest.mark.parametrize("engine, checkpointing", [("shared", False), ("shared", True), ("plain", False)])
def test_training_step_reaches_the_kernel_in_at_most_6_frames_none_only_forwarding(
        engine, checkpointing, tiny_model_dir, puzzle_samples, monkeypatch):
    """Every pass that reaches the kernel: the old policy's and the reference's log-probs (``num_iterations`` 2,
    ``beta`` > 0) and the update's, with each engine (the shared one also under gradient checkpointing)."""
    chains = _record_kernel_stacks(monkeypatch)
    module = GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir, gradient_checkpointing=checkpointing),
                        rewards=[RewardSpec("binary")], grpo=GRPOConfig(beta=0.04, num_iterations=2),
                        sampling=SamplingConfig(num_generations=2, max_completion_length=4),
                        perf=PerfConfig(engine=engine))
    opt = torch.optim.SGD(module.trainable_parameters(), lr=0.1)
    module.optimizers, module.lr_schedulers = (lambda: opt), (lambda: None)
    module.log_dict = module.log = lambda *a, **k: None
    samples = puzzle_samples[:2]
    torch.manual_seed(0)
    module.training_step(PromptBatch(samples, [render_messages(s, "visualsphinx_seed") for s in samples]), 0)
    # one micro-batch (all 4 rows): the old log-probs once, the reference's once, the update once per iteration
    assert len(chains) == 4
    callers = [[code.co_qualname for code in chain] for chain in chains]
    assert sorted(c[1] for c in callers) == ["GRPOModule.update"] * 2 + ["PolicyPasses.logprob_pass"] * 2, callers
    for chain, names in zip(chains, callers):
        assert len(names) + 1 <= MAX_FRAMES, names  # + 1: the kernel's own frame
        assert not [n for code, n in zip(chain[1:], names[1:]) if forwards(code)], names
