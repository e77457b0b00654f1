"""Size rules of the package, read from the source: no function over 60 lines, ``GRPOModule`` at most 250 lines.
A file holds one concern, whatever its length: there is no cap on a module's lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lit_grpo

ROOT = Path(lit_grpo.__file__).parent
MAX_FUNCTION_LINES = 60
MAX_MODULE_CLASS_LINES = 250


def function_lengths(source: str, name: str = "<src>") -> list[tuple[str, int]]:
    """``(qualified name, lines)`` of every function and method in ``source``, decorators and docstring
    included (``end_lineno - first line + 1``)."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                out.append((f"{name}:{prefix}{child.name}", child.end_lineno - first + 1))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def class_length(source: str, cls: str) -> int:
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == cls)
    return node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1


def test_the_measure_counts_hand_made_functions():
    """Hand-counted: a 3-line function, a decorated 4-line method (decorator included) with a 2-line nested
    function, a 2-line async function."""
    src = ("def f(x):\n    y = x\n    return y\n\n"
           "class C:\n    @staticmethod\n    def g():\n        def h():\n            pass\n        return 1\n\n"
           "async def a():\n    pass\n")
    assert function_lengths(src) == [("<src>:f", 3), ("<src>:C.g", 5), ("<src>:C.g.h", 2), ("<src>:a", 2)]
    assert class_length(src, "C") == 6


def test_no_function_over_60_lines():
    long = [(name, n) for path in sorted(ROOT.rglob("*.py"))
            for name, n in function_lengths(path.read_text(), str(path.relative_to(ROOT.parent)))
            if n > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_grpo_module_is_at_most_250_lines():
    source = (ROOT / "module.py").read_text()
    assert class_length(source, "GRPOModule") <= MAX_MODULE_CLASS_LINES


@pytest.mark.parametrize("cls", ["GRPOModule", "SFTModule"])
def test_sft_and_grpo_share_a_base_neither_inherits_the_other(cls):
    from lit_grpo import GRPOModule, SFTModule
    from lit_grpo.module import PolicyModule

    assert issubclass(getattr(lit_grpo, cls), PolicyModule)
    assert not issubclass(SFTModule, GRPOModule) and not issubclass(GRPOModule, SFTModule)
