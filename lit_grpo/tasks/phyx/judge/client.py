"""OpenAI-compatible chat-completions judge client (vLLM ``serve``, SGLang, hosted APIs) over ``httpx``.

What it guarantees (the known failure modes of judge servers):
- bounded concurrency (``concurrency`` requests in flight), on a private event loop in a daemon
  thread, so it works from plain training code and from notebooks alike;
- retries with exponential backoff and jitter on timeouts, dropped connections, HTTP 429 and 5xx,
  honouring ``Retry-After`` (seconds or HTTP date) as given; other 4xx fail at once;
- deadlines of our own: ``timeout_s`` per attempt, ``call_deadline_s`` per call (retries and waits
  included; a wait that would pass it fails the call now), ``step_deadline_s`` for all calls of a step;
- strict replies: ``response_format`` with the task's JSON schema, ``finish_reason`` must be ``stop``
  (a reply cut at ``max_tokens`` is a failed call, never a score), the verdict is read from the reply's
  ``content`` (its final channel, :func:`~lit_grpo.tasks.phyx.judge.jury.final_channel`; a ``reasoning`` /
  ``reasoning_content`` field is never graded) and validated; a reply that fails validation goes through the
  tolerant parser (the last complete verdict object), which is counted (``parse_fallbacks``);
- bounded replies: at most ``max_reply_bytes`` are read, after decompression (gzip or deflate, decoded here in
  bounded steps; ``Accept-Encoding`` asks for nothing else), so a compression bomb or an endless body is a
  failed call, and parsing is linear in the reply; whatever cannot be read is a failed call within the deadline,
  never an exception (a client that does not finish within ``step_deadline_s`` + :data:`LOOP_GRACE_S` fails its
  calls);
- identical requests (same body, same juror) are sent once and cached for the run;
- a failed call is ``None`` (NaN downstream) and counted; more than ``max_failure_fraction`` failed
  calls in one step raise :class:`JudgeUnavailableError` naming the endpoint;
- the API key is read from the environment variable named by ``api_key_env`` for each request and
  lives only in that request's headers: never in the config, the HTTP client, ``repr``, pickles or logs;
  every error text (a server's error body echoing the request, an exception) is masked with
  :func:`lit_grpo.api_keys.redact` before it is kept, logged or raised.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import email.utils
import hashlib
import json
import logging
import os
import random
import threading
import time
import weakref
from typing import Any

import httpx

from lit_grpo.errors import UserError
from lit_grpo.tasks.phyx.judge.config import JudgeConfig
from lit_grpo.tasks.phyx.judge.jury import Vote, VerdictError, parse_vote_strict, parse_vote_tolerant
from lit_grpo.tasks.phyx.judge.prompts import JudgeItem, JudgeTask, messages
from lit_grpo.tasks.phyx.judge.replies import ACCEPT_ENCODING, BoundedBody, ReplyError
from lit_grpo.api_keys import KEY_VARIABLE, redact

log = logging.getLogger(__name__)
LOOP_GRACE_S = 30.0
"""How long past ``step_deadline_s`` a step waits for the client's event loop before failing every call left."""
POOL_SIZE = 8
"""Connections per httpx pool; ``concurrency`` slots are spread over ``ceil(concurrency / POOL_SIZE)`` pools."""


class JudgeUnavailableError(UserError, RuntimeError):
    """Too many judge calls failed in one step; the message names the endpoint and the errors seen (on the command
    line: one ``error:`` line, the last finished step saved)."""


@dataclasses.dataclass
class CallResult:
    """Outcome of one judge call (all attempts)."""

    vote: Vote | None
    error: str | None = None
    latency_s: float = 0.0
    tokens: int = 0
    retries: int = 0
    fallback: bool = False


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay seconds, decimal allowed, or an HTTP date)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


class _LoopThread:
    """An asyncio event loop running in a daemon thread; ``run`` blocks the caller until a coroutine ends."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="judge-http", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float):
        """The coroutine's result; ``concurrent.futures.TimeoutError`` (the coroutine cancelled) after ``timeout``."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    @staticmethod
    def stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, clients: list) -> None:
        if loop.is_running():
            for client in clients:
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)


class OpenAIJudge:
    """K-juror judge on an OpenAI-compatible ``/chat/completions`` endpoint; see the module docstring."""

    def __init__(self, config: JudgeConfig):
        if not config.base_url:
            raise ValueError("OpenAIJudge needs judge.base_url (leave it unset for the offline judge)")
        self.cfg = config
        self.endpoint = config.base_url.rstrip("/") + "/chat/completions"
        self._cache: collections.OrderedDict[str, Vote] = collections.OrderedDict()
        self._metrics: dict[str, float] = {}
        self._rng = random.Random(0)
        self._runner: _LoopThread | None = None
        self._clients: list[httpx.AsyncClient] = []  # created inside the loop; the finaliser closes them

    def __repr__(self) -> str:
        return f"OpenAIJudge(endpoint={self.endpoint!r}, model={self.cfg.model!r}, K={self.cfg.num_judges})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickles (DDP spawn, deep copies) carry the config and cache only: no thread, no client, no key."""
        state = dict(self.__dict__)
        state.pop("_finalizer", None)
        state.update(_runner=None, _clients=[])
        return state

    def close(self) -> None:
        """Close the connection pool and stop the loop thread (also done when the judge is collected)."""
        if self._runner is not None:
            self._finalizer()
            self._runner, self._clients = None, []

    # ------------------------------------------------------------------ requests
    def _headers(self) -> dict[str, str]:
        """The ``Authorization`` header of one request, read from the environment now (never stored)."""
        name = self.cfg.api_key_env
        key = os.environ.get(name) if name else None
        if name and not key and not getattr(self, "_warned_no_key", False):
            self._warned_no_key = True
            log.warning("judge %s: environment variable %s is not set; sending requests without an API key",
                        self.endpoint, name)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _redact(self, text: str) -> str:
        """``text`` with the API key (and anything shaped like a credential) masked."""
        return redact(text, [KEY_VARIABLE] + ([self.cfg.api_key_env] if self.cfg.api_key_env else []))

    def _client_in_loop(self, slot: int) -> httpx.AsyncClient:
        """The connection pool serving concurrency slot ``slot``: one pool per ``POOL_SIZE`` slots, because
        httpcore scans every connection of a pool on each request event (cost grows with pool size)."""
        if not self._clients:
            tls = httpx.create_ssl_context()  # one TLS context
            for start in range(0, self.cfg.concurrency, POOL_SIZE):
                size = min(POOL_SIZE, self.cfg.concurrency - start)
                limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
                self._clients.append(httpx.AsyncClient(limits=limits, timeout=self.cfg.timeout_s, verify=tls))
        return self._clients[slot // POOL_SIZE]

    def request_body(self, item: JudgeItem, task: JudgeTask, juror: int) -> dict[str, Any]:
        """The JSON body of juror ``juror``'s call on ``item``."""
        cfg = self.cfg
        body: dict[str, Any] = {"model": cfg.model, "messages": messages(item, task), "temperature": cfg.temperature,
                                "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}
        if cfg.seed is not None:
            body["seed"] = cfg.seed + juror
        if cfg.structured_output:
            body["response_format"] = task.response_format()
        body.update(cfg.extra_body)
        return body

    def _backoff(self, retry: int) -> float:
        return min(self.cfg.backoff_s * 2 ** retry, self.cfg.backoff_max_s) * (0.5 + 0.5 * self._rng.random())

    async def _call(self, body: dict[str, Any], task: JudgeTask, client: httpx.AsyncClient) -> CallResult:
        cfg, loop = self.cfg, asyncio.get_running_loop()
        start = loop.time()
        deadline, retries, error = start + cfg.call_deadline_s, 0, "not sent"
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return CallResult(None, f"call deadline of {cfg.call_deadline_s:g}s passed ({error})", retries=retries)
            retry_after, attempt_limit = None, min(cfg.timeout_s, remaining)
            try:
                status, headers, data = await asyncio.wait_for(self._post(client, body, attempt_limit), attempt_limit)
            except (httpx.TimeoutException, asyncio.TimeoutError):
                error = f"timeout after {attempt_limit:.3g}s"
            except httpx.TransportError as exc:
                error = self._redact(f"connection error ({type(exc).__name__}: {exc})")
            except ReplyError as exc:  # too large or unreadable: asking again would not help
                return CallResult(None, str(exc), retries=retries)
            else:
                if status == 200:
                    result = self._read(data, task)
                    result.latency_s, result.retries = loop.time() - start, retries
                    return result
                error = f"HTTP {status}"
                if status in (401, 403):
                    error += f" (is the API key in ${cfg.api_key_env} right?)"
                if status != 429 and status < 500:
                    text = self._redact(data.decode("utf-8", errors="replace"))
                    return CallResult(None, f"{error}: {text[:200]}", retries=retries)
                retry_after = parse_retry_after(headers.get("retry-after"))
            if retries >= cfg.max_retries:
                return CallResult(None, f"{error} after {retries} retries", retries=retries)
            delay = retry_after if retry_after is not None else self._backoff(retries)
            if loop.time() + delay >= deadline:
                return CallResult(None, f"{error}; the next try in {delay:.3g}s would pass the call deadline",
                                  retries=retries)
            retries += 1
            await asyncio.sleep(delay)

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any], limit: float) -> tuple[int, Any, bytes]:
        """One attempt: ``(status, headers, body bytes)``, the body read through :class:`BoundedBody`."""
        headers = {**self._headers(), "Accept-Encoding": ACCEPT_ENCODING}
        async with client.stream("POST", self.endpoint, json=body, headers=headers, timeout=limit) as resp:
            reader = BoundedBody(resp.headers.get("content-encoding"), self.cfg.max_reply_bytes)
            async for chunk in resp.aiter_raw():
                reader.feed(chunk)
            return resp.status_code, resp.headers, reader.finish()

    def _read(self, body: bytes, task: JudgeTask) -> CallResult:
        """One HTTP 200 reply body -> a vote, or a failed call (malformed body, cut reply, no final answer, invalid
        verdict). Only ``message.content`` is graded, never a ``reasoning`` / ``reasoning_content`` field."""
        try:
            data = json.loads(body)
            choice = data["choices"][0]
            message, finish = choice["message"], choice.get("finish_reason")
            content = message.get("content")
            tokens = int((data.get("usage") or {}).get("total_tokens") or 0)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
            return CallResult(None, self._redact(f"malformed response body ({type(exc).__name__}: "
                                                 f"{str(exc)[:100]})"))
        if finish != "stop":
            return CallResult(None, f"reply not finished (finish_reason={finish!r}); raise judge.max_tokens?",
                              tokens=tokens)
        if not isinstance(content, str) or not content.strip():
            thought = any(message.get(k) for k in ("reasoning", "reasoning_content"))
            return CallResult(None, "reply has no final answer (empty content" + (
                "; only reasoning, which is never graded)" if thought else ")"), tokens=tokens)
        try:
            return CallResult(parse_vote_strict(content, task), tokens=tokens)
        except VerdictError:
            pass
        try:
            return CallResult(parse_vote_tolerant(content, task), tokens=tokens, fallback=True)
        except VerdictError as exc:
            return CallResult(None, self._redact(f"invalid verdict ({exc}); reply starts {str(content)[:80]!r}"),
                              tokens=tokens)

    async def _dispatch(self, bodies: dict[str, dict[str, Any]], task: JudgeTask) -> dict[str, CallResult]:
        free: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(self.cfg.concurrency):
            free.put_nowait(slot)

        async def one(body):
            slot = await free.get()  # at most `concurrency` calls in flight, each holding a slot
            try:
                return await self._call(body, task, self._client_in_loop(slot))
            finally:
                free.put_nowait(slot)

        tasks = {key: asyncio.ensure_future(one(body)) for key, body in bodies.items()}
        done, pending = await asyncio.wait(tasks.values(), timeout=self.cfg.step_deadline_s)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        out = {}
        for key, t in tasks.items():
            if t in done and t.exception() is None:
                out[key] = t.result()
            elif t in done:
                out[key] = CallResult(None, self._redact(f"unexpected {type(t.exception()).__name__}: {t.exception()}"))
            else:
                out[key] = CallResult(None, f"step deadline of {self.cfg.step_deadline_s:g}s passed")
        return out

    # ------------------------------------------------------------------ the Judge interface
    def grade(self, items: list[JudgeItem], task: JudgeTask) -> list[list[Vote | None]]:
        """K votes per item; identical requests are sent once. See the module docstring for failures.

        Raises:
            JudgeUnavailableError: more than ``max_failure_fraction`` of the calls sent failed.
        """
        keys, bodies = [], {}
        for item in items:
            row = []
            for juror in range(self.cfg.num_judges):
                body = self.request_body(item, task, juror)
                key = hashlib.sha256(f"{juror}#{json.dumps(body, sort_keys=True)}".encode()).hexdigest()
                row.append(key)
                bodies.setdefault(key, body)
            keys.append(row)
        votes = {k: self._cache[k] for k in bodies if k in self._cache}
        todo = {k: b for k, b in bodies.items() if k not in votes}
        wall = time.perf_counter()
        results = self._run(todo, task) if todo else {}
        self._record(results, sum(map(len, keys)) - len(todo), time.perf_counter() - wall)
        for key, res in results.items():
            if res.vote is not None:
                votes[key] = res.vote
                self._cache[key] = res.vote
        while len(self._cache) > self.cfg.cache_size:
            self._cache.popitem(last=False)
        self._check_failures(results)
        return [[votes.get(k) for k in row] for row in keys]

    def _run(self, todo: dict[str, dict[str, Any]], task: JudgeTask) -> dict[str, CallResult]:
        if self._runner is None:
            self._runner = _LoopThread()
            self._finalizer = weakref.finalize(self, _LoopThread.stop, self._runner.loop, self._runner.thread,
                                               self._clients)
        try:
            return self._runner.run(self._dispatch(todo, task), timeout=self.cfg.step_deadline_s + LOOP_GRACE_S)
        except concurrent.futures.TimeoutError:  # the loop did not finish the step's calls: each is a failed call
            return {k: CallResult(None, f"the client did not finish within step_deadline_s="
                                        f"{self.cfg.step_deadline_s:g}s (+{LOOP_GRACE_S:g}s)") for k in todo}

    def _record(self, results: dict[str, CallResult], cache_hits: int, wall_s: float) -> None:
        m, finished = self._metrics, [r for r in results.values() if r.vote is not None]
        for key, value in (("calls", len(results)), ("failures", len(results) - len(finished)),
                           ("retries", sum(r.retries for r in results.values())), ("cache_hits", cache_hits),
                           ("parse_fallbacks", sum(r.fallback for r in results.values())),
                           ("tokens", sum(r.tokens for r in results.values())), ("wall_s", wall_s),
                           ("latency_total_s", sum(r.latency_s for r in finished)), ("answered", len(finished))):
            m[key] = m.get(key, 0.0) + value
        m["latency_max_s"] = max([m.get("latency_max_s", 0.0)] + [r.latency_s for r in finished])
        fallbacks = sum(r.fallback for r in results.values())
        if fallbacks:
            log.warning("judge %s: %d of %d replies failed the JSON schema and were read by the tolerant parser",
                        self.endpoint, fallbacks, len(results))

    def _check_failures(self, results: dict[str, CallResult]) -> None:
        failed = [r.error for r in results.values() if r.vote is None]
        if not failed:
            return
        errors = "; ".join(f"{e} (x{n})" for e, n in collections.Counter(failed).most_common(3))
        message = self._redact(f"judge {self.endpoint} (model {self.cfg.model!r}): {len(failed)} of {len(results)} "
                               f"calls failed in this step: {errors}")
        if len(failed) > self.cfg.max_failure_fraction * len(results):
            raise JudgeUnavailableError(f"{message}. More than judge.max_failure_fraction="
                                        f"{self.cfg.max_failure_fraction:g} failed, so the run stops: check the "
                                        "server, its model name and the API key variable, or raise the fraction.")
        log.warning("%s; those completions are NaN (cannot score)", message)

    def pop_metrics(self) -> dict[str, float]:
        """``judge/calls``, ``failures``, ``retries``, ``cache_hits``, ``parse_fallbacks``, ``tokens``,
        ``latency_s`` (mean over answered calls, retries included), ``latency_max_s``, ``wall_s``; then reset."""
        m, self._metrics = self._metrics, {}
        if not m:
            return {}
        answered = m.pop("answered")
        m["latency_s"] = m.pop("latency_total_s") / answered if answered else float("nan")
        return {f"judge/{k}": float(v) for k, v in m.items()}
