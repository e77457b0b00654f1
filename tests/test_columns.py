"""A log-prob-pass column added from this file alone (no core edit): a provider registered in ``COLUMNS`` watches the
pass's forward, a reward reads its column by name, the hooks are gone after the pass (also when the forward
raises), micro-batches join in row order, and the module's choice of providers follows the columns the rewards
read."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import ClassVar

import pytest
import torch

from lit_grpo import GRPOConfig, GRPOModule
from lit_grpo.columns import COLUMNS, build_providers
from lit_grpo.data.datamodule import PromptBatch
from lit_grpo.data.sample import render_messages
from lit_grpo.policy import PolicyConfig
from lit_grpo.rewards import RewardSpec, required_columns
from lit_grpo.rewards.registry import INFO, REWARDS, register_reward
from lit_grpo.rollout import SamplingConfig


@dataclasses.dataclass
class Seen:
    """Tokens each row's forward saw (its attention mask's sum)."""

    tokens: torch.Tensor

    def columns(self) -> dict[str, list]:
        return {"toy_tokens_seen": self.tokens.tolist()}

    @classmethod
    def cat(cls, parts: list["Seen"]) -> "Seen":
        return cls(torch.cat([p.tokens for p in parts]))


class TokensSeen:
    """Hooks the policy's top module and reads the attention mask of the forward it watches."""

    instances: list["TokensSeen"] = []

    def __init__(self, model, processor, options):
        self.model, self.options, self.forwards = model, options, 0
        TokensSeen.instances.append(self)

    @contextlib.contextmanager
    def capture(self, model, rollout):
        seen = {}

        def hook(module, args, kwargs):
            self.forwards += 1
            seen["mask"] = kwargs["attention_mask"].detach()

        handle = model.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield seen
        finally:
            handle.remove()

    def score(self, capture, rollout, images):
        assert len(images) == rollout.num_completions  # one list of images per row
        return Seen(capture["mask"].sum(1).cpu())


def toy_tokens_reward(completions, toy_tokens_seen, **_):
    return [float(t) for t in toy_tokens_seen]


@pytest.fixture(autouse=True)
def toy_registrations():
    """The toy column and reward are registered for each test and taken out after it, so the registered names that
    other tests' error messages list stay the package's."""
    COLUMNS.register("toy_tokens_seen")(TokensSeen)
    register_reward("toy_tokens_reward", columns=("toy_tokens_seen",))(toy_tokens_reward)
    yield
    COLUMNS._entries.pop("toy_tokens_seen")
    REWARDS._entries.pop("toy_tokens_reward"), INFO.pop("toy_tokens_reward")


def _module(tiny_model_dir, rewards, **grpo):
    return GRPOModule(policy=PolicyConfig(name_or_path=tiny_model_dir), rewards=rewards, grpo=GRPOConfig(**grpo),
                      sampling=SamplingConfig(num_generations=2, max_completion_length=6))


def _batch(samples):
    return PromptBatch(samples, [render_messages(s, "visualsphinx_seed") for s in samples])


def _hooks(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def test_a_registered_column_reaches_a_reward_from_the_log_prob_pass(tiny_model_dir, puzzle_samples):
    """Each row's value is its prompt's real tokens plus its completion's (worked out from the rollout's masks);
    the reward's values are those, and the pass left no hook behind."""
    module = _module(tiny_model_dir, [RewardSpec("toy_tokens_reward"), RewardSpec("binary")])
    assert module.pass_columns == ["toy_tokens_seen"] and isinstance(module.passes.providers["toy_tokens_seen"],
                                                                     TokensSeen)
    batch = _batch(puzzle_samples[:2])
    torch.manual_seed(0)
    rollout = module.rollout(batch, 2)
    before = _hooks(module.policy)  # after a first forward (transformers adds hooks of its own on it)
    logprobs = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    expected = (rollout.prompt["attention_mask"].sum(1) + rollout.completion_mask.sum(1)).tolist()  # (N,)
    assert logprobs.columns() == {"toy_tokens_seen": expected} and logprobs.old_logps is None
    per_reward, _ = module.rewards(batch, rollout, 2, extra=logprobs.columns())
    assert per_reward["toy_tokens_reward"].tolist() == [float(t) for t in expected]
    assert _hooks(module.policy) == before and module.passes.providers["toy_tokens_seen"].forwards == 1


def test_micro_batches_join_in_row_order_and_each_forward_is_watched_once(tiny_model_dir, puzzle_samples):
    module = _module(tiny_model_dir, [RewardSpec("toy_tokens_reward")], num_iterations=2)
    batch = _batch(puzzle_samples[:2])
    torch.manual_seed(0)
    rollout = module.rollout(batch, 2)
    whole = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    module.cfg.micro_batch_size = 3  # rows 0-2, then row 3
    parts = module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    assert parts.columns() == whole.columns() and len(parts.columns()["toy_tokens_seen"]) == 4
    torch.testing.assert_close(parts.old_logps, whole.old_logps, atol=1e-5, rtol=0)
    assert module.passes.providers["toy_tokens_seen"].forwards == 1 + 2  # one forward, then two micro-batches


def test_the_hooks_are_removed_when_the_forward_raises(tiny_model_dir, puzzle_samples, monkeypatch):
    module = _module(tiny_model_dir, [RewardSpec("toy_tokens_reward")])
    batch = _batch(puzzle_samples[:2])
    rollout = module.rollout(batch, 2)
    before = _hooks(module.policy)
    import lit_grpo.rollout.engine as engine

    def broken(*args, **kwargs):
        assert _hooks(module.policy) == before + 1  # the provider's hook is on during the forward
        raise RuntimeError("out of memory")

    monkeypatch.setattr(engine, "completion_logps", broken)
    with pytest.raises(RuntimeError, match="out of memory"):
        module.passes.logprob_pass(module.policy, rollout, [s.images for s in batch.samples])
    assert _hooks(module.policy) == before


def test_which_providers_a_module_builds():
    """Only columns a reward reads (or an option group turns on) get a provider; a column no provider gives is left
    to the sample (a task's field); an option group that turns its column off refuses a reward that reads it."""
    read = required_columns([RewardSpec("toy_tokens_reward"), RewardSpec("binary")])
    assert read == {"toy_tokens_seen"}
    model = torch.nn.Linear(1, 1)
    assert list(build_providers(model, None, read)) == ["toy_tokens_seen"]
    assert build_providers(model, None, set()) == {}
    assert build_providers(model, None, {"toy_gold_field_nobody_provides"}) == {}  # a sample field

    @dataclasses.dataclass
    class Options:
        enabled: bool | None = None
        column: ClassVar[str] = "toy_tokens_seen"

    on = build_providers(model, None, set(), {"toy": Options(enabled=True)})
    assert list(on) == ["toy_tokens_seen"] and on["toy_tokens_seen"].options == Options(enabled=True)
    assert build_providers(model, None, set(), {"toy": Options()}) == {}
    assert build_providers(model, None, set(), {"toy": {}}) == {}  # a mapping with nothing on: the group unread
    with pytest.raises(ValueError, match=r"'toy_tokens_seen' column: it needs toy.enabled true \(or unset\)"):
        build_providers(model, None, read, {"toy": Options(enabled=False)})
    with pytest.raises(ValueError, match="already registered"):
        COLUMNS.register("toy_tokens_seen")(TokensSeen)
