"""API keys never leave the environment: find them in a configuration, mask them in any text.

A judge's key lives only in the environment variable that ``judge.api_key_env`` names; the client reads it
when it sends a request. Anything else that holds a key would be printed (``--print_config``), saved
(``config.yaml``, ``hparams.yaml``, TensorBoard, checkpoints) or put into an error, so:

- :func:`find_credentials` lists the places of a configuration (a plain nested dict) that hold a key:
  any value that contains the value of a key variable (``JUDGE_API_KEY`` and every variable an
  ``api_key_env`` names), as it is or escaped (:func:`key_pattern`); a ``base_url`` with a user name or password
  (``https://user:key@host``, ``https://key@host``) or a credential-named query parameter (``?api_key=...``);
  and, inside a ``judge`` block, a value that looks like a credential (``sk-...``, ``Bearer ...``, ``hf_...``,
  ...) or a key named like one (``api_key``, ``Authorization``, ``headers``, ...). The places are reported as
  dotted paths, never with their values.
- :func:`redact` masks the same things in a text (an HTTP error body, an exception message) as ``***``: a key's
  value of any length in every form a server or a library echoes it: as it is, JSON-escaped (``\\/``,
  ``\\u00xx``, doubly escaped), percent-encoded (``%2F``, ``%252F``, ``+`` for a space), as HTML entities (what
  ``html.escape`` and HTML error pages write), and inside base64 or base64url (a header dump of ``Basic``/``Bearer`` credentials: the characters that only the
  key decides, at each of the three byte alignments), and split across lines (a line break, with the next line's
  indentation, anywhere inside it: a server's echo wrapped at a width).
- :func:`mask_console` puts the same mask on everything the process writes to ``sys.stdout`` and ``sys.stderr``
  (``print`` in a reward, a traceback, a logging handler holding either stream, and what a console capture such as
  W&B's sees of them), holding back the end of a line that could begin a key until the next line shows whether it
  does. :func:`watch_variables` adds the variables a run's config names (``api_key_env``) to those masked by
  default.
"""

from __future__ import annotations

import atexit
import base64
import functools
import os
import re
import sys
import threading
import urllib.parse
from typing import Any, Iterable

KEY_VARIABLE = "JUDGE_API_KEY"
"""The default ``judge.api_key_env``; its value is masked even where no config names it."""
MASK = "***"
MIN_BASE64_CORE = 2
"""Inside base64 a key is recognised by the characters only it decides (about 4 per 3 bytes of the key); a
shorter run is no recognisable part of it. Short keys mask short runs, in base64 blobs and elsewhere alike."""

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
URL_CREDENTIAL_PARAMETER = re.compile(
    rf"{CREDENTIAL_NAME.pattern}|^(sig|signature|code|subscription[_-]?key|access[_-]?key|private[_-]?token"
    r"|x[_-](amz|goog)[_-](signature|credential|security[_-]token))$", re.IGNORECASE)
"""Parameters of a URL (query, ``#fragment`` or ``;path`` parameters) that carry a credential (``?api_key=``,
``?key=``, ``?sig=``, Azure's ``?code=``, S3/GCS presigned ``X-Amz-Signature`` / ``X-Goog-Credential``)."""
LINE_BREAK = r"(?:\r?\n[ \t]*)?"
"""What may sit between two characters of a key that a server echoed wrapped: a line break and the next line's
indentation."""
_WATCHED = {KEY_VARIABLE}
"""The variables :func:`redact` masks by default (:func:`watch_variables` adds a run's ``api_key_env`` names)."""


def watch_variables(names: Iterable[str]) -> None:
    """Mask the values of ``names`` too wherever :func:`redact` is called without names (the console, the error
    line, tracebacks, logged text and metric names)."""
    _WATCHED.update(n for n in names if n)


def key_variables(config: Any = None) -> list[str]:
    """``JUDGE_API_KEY`` and every variable name that an ``api_key_env`` in ``config`` gives."""
    names = {KEY_VARIABLE}
    for path, value in _walk(config):
        if path and path[-1] == "api_key_env" and isinstance(value, str) and value:
            names.add(value)
    return sorted(names)


def key_values(names: Iterable[str]) -> list[str]:
    """The values of those variables that are set (any length), longest first."""
    values = {os.environ.get(n) or "" for n in names}
    return sorted((v for v in values if v), key=len, reverse=True)


def _hex_byte(b: int) -> str:
    """Regex of one byte as two hex digits in either case: ``2f`` -> ``2[fF]``."""
    return "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in f"{b:02x}")


def _char_forms(ch: str) -> str:
    """Regex of one character of a key in every form it is echoed in: itself, a JSON ``\\/`` or ``\\uXXXX`` escape
    (with any number of backslashes: JSON inside JSON), percent-encoding (once or twice; ``+`` for a space), an HTML
    entity. Not hex dumps or ``\\xXX`` escapes: no server or client library we call echoes a key that way (keys are
    printable ASCII, which a ``repr`` writes as it is); docs/judge.md says so."""
    utf8 = ch.encode("utf-8")
    forms = [re.escape(ch), r"\\+u\{?" + "".join(_hex_byte(b) for b in ord(ch).to_bytes(2, "big")) + r"\}?"
             if ord(ch) < 0x10000 else None,
             "".join("%" + _hex_byte(b) for b in utf8), "".join("%25" + _hex_byte(b) for b in utf8),
             f"&#0*{ord(ch)};", "&#[xX]0*" + _hex_byte(ord(ch)).lstrip("0") + ";" if ord(ch) < 256 else None]
    if ch in "/\"\\":
        forms.append(r"\\+" + re.escape(ch))
    if ch == " ":
        forms.append(r"\+")
    forms += [f"&{name};" for name, c in (("amp", "&"), ("lt", "<"), ("gt", ">"), ("quot", '"'), ("apos", "'"))
              if c == ch]
    return "(?:" + "|".join(f for f in forms if f) + ")"


def _base64_cores(key: str) -> list[str]:
    """The parts of base64 / base64url text that only ``key`` decides, wherever it starts in the encoded bytes (at
    each of the three alignments), longest first."""
    data, cores = key.encode("utf-8"), set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode("ascii")
        chars = [c for c in range(len(encoded)) if 6 * c // 8 >= offset and (6 * c + 5) // 8 < offset + len(data)]
        if chars:
            core = encoded[chars[0]:chars[-1] + 1]
            if len(core) >= MIN_BASE64_CORE:
                cores |= {core, core.replace("+", "-").replace("/", "_")}
    return sorted(cores, key=len, reverse=True)


@functools.lru_cache(maxsize=64)
def key_pattern(key: str, encoded: bool = True) -> re.Pattern:
    """A regex of ``key`` in every form it can be echoed (see the module docstring); ``encoded=False``: as it is
    and escaped only (what a config value can hold), without its base64 forms."""
    forms = [LINE_BREAK.join(_char_forms(ch) for ch in key)]
    if encoded:  # base64: an echoed ``Authorization: Basic``/``Bearer`` header, the one binary form servers echo
        forms += [re.escape(core) for core in _base64_cores(key)]
    return re.compile("|".join(forms))


def redact(text: str, names: Iterable[str] | None = None, shapes: bool = True) -> str:
    """``text`` with the value of every key variable in ``names`` (default: ``JUDGE_API_KEY`` and those
    :func:`watch_variables` added; in every form it is echoed in) and anything that looks like a credential replaced
    by ``***``. ``shapes=False``: the keys' values only (for free text, where ``token``, ``basic`` or ``bearer``
    followed by a long word is prose, not a credential).

    >>> redact("HTTP 401: bad key 'sk-abcdefghijklmnop1234'")
    "HTTP 401: bad key '***'"
    """
    text = str(text)
    for value in key_values(_WATCHED if names is None else names):
        text = key_pattern(value).sub(MASK, text)
    return CREDENTIAL_VALUE.sub(MASK, text) if shapes else text


def find_credentials(config: Any) -> list[str]:
    """The dotted paths in ``config`` (nested dicts and lists) that hold a key; see the module docstring.

    >>> find_credentials({"judge": {"extra_body": {"api_key": "x"}, "model": "m"}})
    ['judge.extra_body.api_key (a credential field)']
    """
    keys = [key_pattern(k, encoded=False) for k in key_values(key_variables(config))]
    found: list[str] = []
    for path, value in _walk(config):
        where = ".".join(str(p) for p in path)
        if any(where.startswith(f.split(" ")[0] + ".") for f in found):
            continue  # inside a place already reported
        in_judge = "judge" in path[:-1]
        url = _url_credential(value) if path and path[-1] == "base_url" else None
        if in_judge and path[-1] != "api_key_env" and isinstance(path[-1], str) and CREDENTIAL_NAME.match(path[-1]):
            found.append(f"{where} (a credential field)")
        elif url:
            found.append(f"{where} ({url})")
        elif isinstance(value, str) and any(k.search(value) for k in keys):
            found.append(f"{where} (holds the value of a key variable)")
        elif in_judge and isinstance(value, str) and CREDENTIAL_VALUE.search(value):
            found.append(f"{where} (looks like a credential)")
    return found


def _url_credential(value: Any) -> str | None:
    """What in URL ``value`` carries a credential: a user name or password, or a credential-named query, fragment or path parameter."""
    if not isinstance(value, str):
        return None
    try:
        parts = urllib.parse.urlsplit(value.strip())
    except ValueError:
        return None
    if parts.username or parts.password or "@" in parts.netloc:
        return "a user name or password in the URL"
    for where, text in (("query", parts.query), ("fragment", parts.fragment),
                        ("path", "&".join(p.partition(";")[2].replace(";", "&") for p in parts.path.split("/")))):
        named = [k for k, _ in urllib.parse.parse_qsl(text, keep_blank_values=True)
                 if URL_CREDENTIAL_PARAMETER.match(k.strip())]
        if named:
            return f"the URL's {where} parameter {named[0]!r} carries a credential"
    return None


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


_BREAKS = re.compile(LINE_BREAK[:-1])  # a line break and the next line's indentation (not optional)


def held_back(text: str, keys: list[str]) -> int:
    """Where the end of ``text`` that could begin one of ``keys`` starts (a proper prefix of it, line breaks left
    out): the part a stream holds until more text shows whether the key goes on. ``len(text)`` when none does."""
    firsts = {k[0] for k in keys}
    for i in range(max(0, len(text) - 4 * max(map(len, keys), default=0) - 80), len(text)):
        if text[i] in firsts:
            rest = _BREAKS.sub("", text[i:])
            if rest and any(len(rest) < len(k) and k.startswith(rest) for k in keys):
                return i
    return len(text)


class MaskedWrites:
    """The masked ``write`` and ``flush`` of one text stream (:func:`mask_console`): text goes on to the stream's
    own ``write`` (or whatever had patched it before, e.g. a console capture) with every key masked
    (:func:`redact`, keys' values only) once a line break or a flush comes, except an end that could begin a key
    (:func:`held_back`), which waits for the next line."""

    def __init__(self, stream: Any):
        self.stream, self.pending, self.lock = stream, "", threading.RLock()
        self.through = {name: getattr(stream, name) for name in ("write", "flush")}
        self.own = {name: name in getattr(stream, "__dict__", {}) for name in self.through}  # patched before us

    def write(self, s: Any) -> int:
        if not isinstance(s, str):
            return self.through["write"](s)
        with self.lock:
            self.pending += s
            if "\n" in s or "\r" in s:
                self._emit(max(self.pending.rfind("\n"), self.pending.rfind("\r")) + 1)
        return len(s)

    def flush(self) -> None:
        with self.lock:
            self._emit(len(self.pending))
        return self.through["flush"]()

    def _emit(self, upto: int, hold: bool = True) -> None:
        cut = held_back(self.pending[:upto], key_values(_WATCHED)) if hold else upto
        text, self.pending = self.pending[:cut], self.pending[cut:]
        if text:
            self.through["write"](redact(text, shapes=False))

    def restore(self) -> None:
        """Write what was held (masked) and put the stream's ``write`` and ``flush`` back as they were."""
        with self.lock:
            self._emit(len(self.pending), hold=False)
        if masked_stream(self.stream) is self:  # not when another patch went on top of ours: it calls ours
            for name, method in self.through.items():
                if self.own[name]:
                    setattr(self.stream, name, method)
                else:
                    delattr(self.stream, name)
        try:
            self.through["flush"]()
        except ValueError:  # closed at exit
            pass


def masked_stream(stream: Any) -> MaskedWrites | None:
    """The :class:`MaskedWrites` that masks ``stream``, if any."""
    owner = getattr(getattr(stream, "write", None), "__self__", None)
    return owner if isinstance(owner, MaskedWrites) else None


def mask_console() -> list[MaskedWrites]:
    """Mask every key in what this process writes to ``sys.stdout`` and ``sys.stderr`` from now on (see
    :class:`MaskedWrites`), by patching those objects' ``write`` and ``flush``: everything that holds them (``print``,
    tracebacks, logging handlers made earlier, a console capture that patched them before) goes through the mask.
    Returns the masks put on (none for a stream whose top ``write`` is a mask already, or whose methods cannot be
    set); :func:`unmask_console` takes them off, and does at exit (writing what they hold back)."""
    made = []
    for stream in {id(s): s for s in (sys.stdout, sys.stderr) if s is not None}.values():
        if masked_stream(stream) is None:
            masked = MaskedWrites(stream)
            try:
                stream.write, stream.flush = masked.write, masked.flush
            except (AttributeError, TypeError):  # a stream whose methods cannot be replaced
                continue
            made.append(masked)
    if made and not _AT_EXIT:
        _AT_EXIT.append(atexit.register(unmask_console))
    return made


_AT_EXIT: list = []


def unmask_console() -> None:
    """Take the mask off ``sys.stdout`` and ``sys.stderr`` (what they hold back written first, masked)."""
    for stream in (sys.stdout, sys.stderr):
        while masked_stream(stream) is not None:  # each mask on top (one under another patch stays with it)
            masked_stream(stream).restore()
