"""The package's import graph, read from the source (top-level and function-level imports), has no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import lit_grpo

ROOT = Path(lit_grpo.__file__).parent


def modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package ``__init__``) of every module of ``lit_grpo``."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``lit_grpo`` modules it imports anywhere in its file (``if TYPE_CHECKING`` blocks and
    function bodies included). ``from a import b`` depends on ``a.b`` when that is a module, else on ``a``; a
    module's dependence on its parent packages (which Python imports first) is left out, as every submodule
    has it."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    for name, (path, package) in mods.items():
        here = name if package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            graph[name] |= {t for t in map(known, targets) if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "lit_grpo.grpo" in graph["lit_grpo.module"]  # top level: from lit_grpo.grpo import ...
    assert "lit_grpo.distributed" in graph["lit_grpo.rng"]  # from lit_grpo import distributed as D
    assert "lit_grpo.settings.preflight" in graph["lit_grpo.cli"]  # inside a function
    assert "lit_grpo" not in graph["lit_grpo.rng"]  # the parent package is not an edge


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_lit_grpo_has_no_import_cycle():
    assert cycles(import_graph()) == []


def shadowing_names(root: Path, loaded_at_startup: set[str]) -> list[str]:
    """Files and packages of ``root`` (at any depth) named like a standard-library module that Python imports on
    demand: a command run from their folder (``python -m lit_grpo`` puts the current folder first on
    ``sys.path``) would import them instead of the library's module."""
    import sys

    names = [p for p in root.rglob("*") if p.suffix == ".py" or (p / "__init__.py").is_file()]
    return sorted(str(p.relative_to(root.parent)) for p in names
                  if p.stem in sys.stdlib_module_names and p.stem not in loaded_at_startup)


def test_no_module_shadows_the_standard_library(tmp_path):
    import subprocess
    import sys

    startup = set(subprocess.run([sys.executable, "-c", "import sys; print(' '.join(sys.modules))"],
                                 capture_output=True, text=True, check=True).stdout.split())
    assert "io" in startup and "secrets" not in startup
    (tmp_path / "pkg").mkdir()
    for name in ("secrets.py", "io.py", "grpo.py"):
        (tmp_path / "pkg" / name).write_text("")
    assert shadowing_names(tmp_path / "pkg", startup) == ["pkg/secrets.py"]
    assert shadowing_names(ROOT, startup) == []
