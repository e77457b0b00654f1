"""API keys never leave the environment: find them in a configuration, mask them in any text.

A judge's key lives only in the environment variable that ``judge.api_key_env`` names; the client reads it
when it sends a request. Anything else that holds a key would be printed (``--print_config``), saved
(``config.yaml``, ``hparams.yaml``, TensorBoard, checkpoints) or put into an error, so:

- :func:`find_credentials` lists the places of a configuration (a plain nested dict) that hold a key:
  any value that contains the value of a key variable (``JUDGE_API_KEY`` and every variable an
  ``api_key_env`` names), and, inside a ``judge`` block, a value that looks like a credential (``sk-...``,
  ``Bearer ...``, ``hf_...``, a URL with a password, ...) or a key named like one (``api_key``,
  ``Authorization``, ``headers``, ...). The places are reported as dotted paths, never with their values.
- :func:`redact` masks the same things in a text (an HTTP error body, an exception message) as ``***``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable

KEY_VARIABLE = "JUDGE_API_KEY"
"""The default ``judge.api_key_env``; its value is masked even where no config names it."""
MASK = "***"
MIN_KEY_LENGTH = 8
"""Shorter environment values are not treated as keys (every text would contain them)."""

CREDENTIAL_VALUE = re.compile(
    r"\b(sk-[A-Za-z0-9_\-]{12,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9\-]{10,}|AIza[0-9A-Za-z_\-]{20,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*)"
    r"|\b(?:Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]{8,}"
    r"|(?<=://)[^/@\s:]+:[^/@\s]+(?=@)",  # the user:password of a URL
    re.IGNORECASE,
)
"""Texts that look like a credential: common key formats, an ``Authorization`` value, a URL password."""
CREDENTIAL_NAME = re.compile(
    r"^(api[_-]?key|apikey|x[_-]api[_-]key|key|auth|authori[sz]ation|(access|bearer|auth|id|refresh)?[_-]?token"
    r"|secret|client[_-]?secret|passw(or)?d|credentials?|bearer|headers?|cookie)$",
    re.IGNORECASE,
)
"""Names of request fields that carry a credential (refused in a judge block, e.g. under ``extra_body``)."""


def key_variables(config: Any = None) -> list[str]:
    """``JUDGE_API_KEY`` and every variable name that an ``api_key_env`` in ``config`` gives."""
    names = {KEY_VARIABLE}
    for path, value in _walk(config):
        if path and path[-1] == "api_key_env" and isinstance(value, str) and value:
            names.add(value)
    return sorted(names)


def key_values(names: Iterable[str]) -> list[str]:
    """The values of those variables that are set and long enough to be keys, longest first."""
    values = {os.environ.get(n) or "" for n in names}
    return sorted((v for v in values if len(v) >= MIN_KEY_LENGTH), key=len, reverse=True)


def redact(text: str, names: Iterable[str] = (KEY_VARIABLE,)) -> str:
    """``text`` with the value of every key variable in ``names`` and anything that looks like a credential
    replaced by ``***``.

    >>> redact("HTTP 401: bad key 'sk-abcdefghijklmnop1234'")
    "HTTP 401: bad key '***'"
    """
    text = str(text)
    for value in key_values(names):
        text = text.replace(value, MASK)
    return CREDENTIAL_VALUE.sub(MASK, text)


def find_credentials(config: Any) -> list[str]:
    """The dotted paths in ``config`` (nested dicts and lists) that hold a key; see the module docstring.

    >>> find_credentials({"judge": {"extra_body": {"api_key": "x"}, "model": "m"}})
    ['judge.extra_body.api_key (a credential field)']
    """
    keys = key_values(key_variables(config))
    found: list[str] = []
    for path, value in _walk(config):
        where = ".".join(str(p) for p in path)
        if any(where.startswith(f.split(" ")[0] + ".") for f in found):
            continue  # inside a place already reported
        in_judge = "judge" in path[:-1]
        if in_judge and path[-1] != "api_key_env" and isinstance(path[-1], str) and CREDENTIAL_NAME.match(path[-1]):
            found.append(f"{where} (a credential field)")
        elif isinstance(value, str) and any(k in value for k in keys):
            found.append(f"{where} (holds the value of a key variable)")
        elif in_judge and isinstance(value, str) and CREDENTIAL_VALUE.search(value):
            found.append(f"{where} (looks like a credential)")
    return found


def _walk(node: Any, path: tuple = ()) -> Iterable[tuple[tuple, Any]]:
    """``(path, value)`` of every entry of nested dicts and lists (dict entries too, for their names)."""
    if hasattr(node, "items"):
        for k, v in node.items():
            yield (*path, k), v
            yield from _walk(v, (*path, k))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield (*path, i), v
            yield from _walk(v, (*path, i))
    elif path == ():
        yield path, node
