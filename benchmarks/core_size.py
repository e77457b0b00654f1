"""The size of lit_grpo's core (the package minus ``tasks/`` and ``testing/``) by issue 36's ruler, and its targets.

    python benchmarks/core_size.py

Every physical line of a file is one of four kinds (read with ``tokenize``, so a statement over several lines counts
each of its lines once): docstring (a line of a string that stands alone as a statement: a module, class or function
docstring, or the attribute docstring under an assignment), code (any other token on it), comment (only a comment
on it) or blank. Comments are counted twice over: full-line (the comment kind) and trailing (a code line that ends in
one); the target is their sum as a share of all lines.

A code line is a check line (read with ``ast``) when it belongs to a ``raise`` or ``assert`` statement, is the header
of an ``if`` (or ``elif``) whose body holds a ``raise`` among its own statements, is the header of an ``except``
whose body does, or lies inside a function whose name, leading underscores aside, starts with ``check_``,
``validate`` or ``refuse``.
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from dataclasses import dataclass, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "lit_grpo"
NOT_CORE = ("tasks", "testing")
TARGETS = {"lines": 7500, "code": 4800, "check %": 9.0, "comments %": 6.0, "settings lines": 650}
"""Issue 36's targets: at most 7,500 lines and 4,800 code lines, check lines at most 9% of code, comments at least
6% of lines; settings, startup checks and error formatting in one package (``settings/``) of at most 650 lines."""
SETTINGS = "settings/"
CHECK_FUNCTIONS = ("check_", "validate", "refuse")
SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING,
        tokenize.COMMENT}


@dataclass
class Counts:
    files: int = 0
    lines: int = 0
    code: int = 0
    docstring: int = 0
    comment: int = 0
    """Full-line comments."""
    trailing: int = 0
    """Code (or docstring) lines that end in a comment."""
    blank: int = 0
    check: int = 0

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def _span(node: ast.AST) -> set[int]:
    return set(range(node.lineno, node.end_lineno + 1))


def docstring_lines(tree: ast.AST) -> set[int]:
    """The lines of every string that is a statement of its own (docstrings, attribute docstrings)."""
    return {line for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for line in _span(node)}


def _raises(body: list[ast.stmt]) -> bool:
    return any(isinstance(stmt, ast.Raise) for stmt in body)


def check_lines(tree: ast.AST) -> set[int]:
    """The lines the module docstring's ruler calls checks (code and other lines alike: intersect with code)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Raise, ast.Assert)):
            out |= _span(node)
        elif isinstance(node, ast.If) and _raises(node.body):
            out |= set(range(node.lineno, node.test.end_lineno + 1))  # the header: ``if`` through its condition
        elif isinstance(node, ast.ExceptHandler) and _raises(node.body):
            out |= set(range(node.lineno, (node.type.end_lineno if node.type else node.lineno) + 1))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.name.lstrip("_").startswith(CHECK_FUNCTIONS):
            out |= set(range(min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno + 1))
    return out


def count_source(source: str) -> Counts:
    """One file's :class:`Counts` (``files`` = 1)."""
    tree = ast.parse(source)
    docs = docstring_lines(tree)
    code: set[int] = set()
    comments: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments.add(tok.start[0])
        elif tok.type not in SKIP:
            code |= set(range(tok.start[0], tok.end[0] + 1)) - docs
    n = source.count("\n") + (not source.endswith("\n") and source != "")  # tokenize's lines (not splitlines')
    full = comments - code - docs
    return Counts(files=1, lines=n, code=len(code), docstring=len(docs), comment=len(full),
                  trailing=len(comments - full), blank=n - len(code | docs | full),
                  check=len(check_lines(tree) & code))


def core_files(root: Path = CORE) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.relative_to(root).parts[0] not in NOT_CORE)


def report(per_file: dict[str, Counts]) -> str:
    total = sum(per_file.values(), Counts())
    settings = sum((c for name, c in per_file.items() if name.startswith(SETTINGS)), Counts())
    pct = lambda part, whole: 100.0 * part / whole if whole else 0.0  # noqa: E731
    comments = total.comment + total.trailing
    check_pct, comment_pct = pct(total.check, total.code), pct(comments, total.lines)
    lines = [
        "lit_grpo core (lit_grpo minus tasks/ and testing/)",
        f"  files            {total.files:>7,}",
        f"  lines            {total.lines:>7,}",
        f"  code lines       {total.code:>7,}",
        f"  docstring lines  {total.docstring:>7,}",
        f"  comment lines    {total.comment:>7,} full-line + {total.trailing:,} trailing = {comments:,}"
        f" ({comment_pct:.1f}% of lines)",
        f"  blank lines      {total.blank:>7,}",
        f"  check lines      {total.check:>7,} ({check_pct:.1f}% of code lines)",
        "",
        "top 10 modules by check lines (check / code):",
    ]
    top = sorted(per_file.items(), key=lambda kv: (-kv[1].check, kv[0]))[:10]
    lines += [f"  {name:<32} {c.check:>5} / {c.code:<5} ({pct(c.check, c.code):.1f}%)" for name, c in top]
    met = lambda ok: "met" if ok else "not met"  # noqa: E731
    lines += ["", "issue 36 targets:",
              f"  lines <= {TARGETS['lines']:,}: {total.lines:,} ({met(total.lines <= TARGETS['lines'])})",
              f"  code lines <= {TARGETS['code']:,}: {total.code:,} ({met(total.code <= TARGETS['code'])})",
              f"  check lines <= {TARGETS['check %']:g}% of code: {check_pct:.1f}%"
              f" ({met(check_pct <= TARGETS['check %'])})",
              f"  comments >= {TARGETS['comments %']:g}% of lines: {comment_pct:.1f}%"
              f" ({met(comment_pct >= TARGETS['comments %'])})",
              f"  {SETTINGS} package <= {TARGETS['settings lines']:,} lines: {settings.lines:,} in {settings.files}"
              f" files, {settings.code:,} code ({met(settings.lines <= TARGETS['settings lines'])})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=CORE, help="the package folder (default: this checkout's)")
    args = parser.parse_args(argv)
    per_file = {p.relative_to(args.root).as_posix(): count_source(p.read_text()) for p in core_files(args.root)}
    print(report(per_file))


if __name__ == "__main__":
    main()
