"""Structure rules of the package, read from the source: no function over 60 lines, ``GRPOModule`` at most 250 lines
(a file holds one concern, whatever its length: there is no cap on a module's lines); no core module (lit_grpo minus
tasks/ and testing/) imports a task, uses another library's private names outside ``compat.py`` or matches a
library's message text; the ruler of
``benchmarks/core_size.py`` on a hand-counted source."""

from __future__ import annotations

import ast
import re
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


# -- what the core may reach: no task, no other library's private names outside compat.py ---------------------------

CORE_EXCLUDED = ("tasks", "testing")
TASKS = "lit_grpo.tasks"
IMPORTERS = {"import_module", "__import__", "find_spec"}
PUBLIC_DESPITE_UNDERSCORE = {"_exit"}
"""``os._exit``: the os module's documented exit without clean-up (a public function whose name has an underscore)."""


def core_modules() -> list[tuple[Path, str]]:
    """``(path, package)`` of every core module (lit_grpo minus tasks/ and testing/); ``package``: the dotted package
    a relative import in it starts from."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        if rel.parts[1] in CORE_EXCLUDED:
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.append((path, ".".join(parts[:-1]) if rel.name != "__init__" else ".".join(parts)))
    return out


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _string(node: ast.AST, constants: dict[str, str]) -> str | None:
    """The text of a string literal, an f-string (``{}`` for what is not a known constant) or a module-level string
    constant's name; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.JoinedStr):
        return "".join(_string(v.value if isinstance(v, ast.FormattedValue) else v, constants) or "{}"
                       for v in node.values)
    return None


def _under(path: str, package: str) -> bool:
    return path == package or path.startswith(package + ".")


def string_constants(tree: ast.Module) -> dict[str, str]:
    """Name -> value of every module-level assignment of a string literal (``PREFIX = "..."``)."""
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets if isinstance(t, ast.Name)}


def task_imports(source: str, package: str = "lit_grpo") -> list[tuple[int, str]]:
    """``(line, module path)`` of every import of :data:`TASKS` or a module under it in ``source``: ``import``,
    ``from ... import`` (relative ones resolved from ``package``), ``from lit_grpo import tasks``, and a string (a
    literal, an f-string, a module-level constant) handed to ``import_module`` / ``__import__`` / ``find_spec``."""
    tree = ast.parse(source)
    constants = string_constants(tree)
    out = []
    for node in ast.walk(tree):
        paths: list[str] = []
        if isinstance(node, ast.Import):
            paths = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            paths = [module, *(f"{module}.{a.name}" for a in node.names)] if module == "lit_grpo" else [module]
        elif isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            text = _string(node.args[0], constants) if name in IMPORTERS else None
            paths = [text] if text else []
        out += [(node.lineno, p) for p in paths if _under(p, TASKS)]
    return out


def private_uses(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every use of a private name of something other than ``self`` / ``cls`` in ``source``:
    ``x._name`` (dunders aside), ``getattr(x, "_name")`` and its kin, and an import (outside ``lit_grpo``) of a
    module path with a ``_``-prefixed part or of a ``_``-prefixed name."""
    private = lambda name: name.startswith("_") and not (name.startswith("__") and name.endswith("__"))  # noqa: E731
    own = lambda node: isinstance(node, ast.Name) and node.id in ("self", "cls")  # noqa: E731
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and private(node.attr) and not own(node.value) \
                and node.attr not in PUBLIC_DESPITE_UNDERSCORE:
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr",
                                                                                "delattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and private(node.args[1].value) and not own(node.args[0]):
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and (node.level or _under(node.module or "", "lit_grpo")):
                continue  # the project's own modules
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            if any(private(part) for m in modules for part in m.split(".")) or any(map(private, names)):
                out.append((node.lineno, ast.unparse(node)))
    return sorted(out)


def test_the_task_import_check_finds_every_form():
    """Hand-made: the package is ``lit_grpo.rollout``, so ``from .tasks`` is ``lit_grpo.rollout.tasks`` (no task)
    and ``from ..tasks.phyx`` is the PhyX task; a sentence naming a task and a module named ``taskset`` are not
    imports."""
    src = ("import lit_grpo.tasks.phyx\n"                         # 1
           "from lit_grpo.tasks.attention import meter\n"         # 2
           "from lit_grpo import tasks, rewards\n"                # 3
           "from .tasks import x\n"                               # 4: lit_grpo.rollout.tasks
           "from ..tasks.phyx import y\n"                         # 5
           "import importlib\n"                                   # 6
           "importlib.import_module('lit_grpo.tasks.visualsphinx')\n"  # 7
           "__import__(f'lit_grpo.tasks.{name}')\n"               # 8
           "MOD = 'lit_grpo.tasks.phyx.units'\n"                  # 9
           "importlib.import_module(MOD)\n"                       # 10
           "import lit_grpo.rewards\n"                            # 11
           "importlib.import_module('lit_grpo.taskset')\n"        # 12
           "text = 'see lit_grpo.tasks.phyx'\n"                   # 13
           "from ... import tasks\n")                             # 14: from lit_grpo's parent: no task
    assert task_imports(src, "lit_grpo.rollout") == [
        (1, "lit_grpo.tasks.phyx"), (2, "lit_grpo.tasks.attention"), (3, "lit_grpo.tasks"), (5, "lit_grpo.tasks.phyx"),
        (7, "lit_grpo.tasks.visualsphinx"), (8, "lit_grpo.tasks.{}"), (10, "lit_grpo.tasks.phyx.units")]
    assert task_imports("from . import tasks\n", "lit_grpo") == [(1, "lit_grpo.tasks")]


def test_no_core_module_imports_a_task():
    """The core finds tasks only through ``registry.py``'s discovery, which imports the task package's root to list
    its subpackages (naming no task)."""
    found = {(path.relative_to(ROOT).as_posix(), module) for path, package in core_modules()
             for _, module in task_imports(path.read_text(), package)}
    assert found <= {("registry.py", TASKS)}, sorted(found)


def test_the_private_name_check_finds_every_form():
    src = ("import os\n"                                                                   # 1
           "from torch.utils._pytree import tree_map\n"                                    # 2 private module
           "from lightning.pytorch.callbacks.progress.rich_progress import _RICH_AVAILABLE\n"  # 3 private name
           "import torch._dynamo\n"                                                        # 4
           "from lit_grpo.settings.args import _import\n"                                       # 5 the project's own
           "from ._helpers import x\n"                                                     # 6 the project's own
           "logger._version = 1\n"                                                         # 7
           "x = trainer._signal_connector.received\n"                                      # 8
           "self._mine = 2\n"                                                              # 9
           "cls._registry\n"                                                               # 10
           "getattr(cb, '_last_checkpoint_saved', None)\n"                                 # 11
           "hasattr(self, '_ok')\n"                                                        # 12
           "obj.__class__\n"                                                               # 13
           "obj.__secret\n"                                                                # 14 name-mangled
           "os._exit(1)\n"                                                                 # 15 public
           "super()._setup()\n"                                                            # 16
           "from __future__ import annotations\n"                                          # 17
           "self.owner._start\n")                                                          # 18
    assert private_uses(src) == [
        (2, "from torch.utils._pytree import tree_map"),
        (3, "from lightning.pytorch.callbacks.progress.rich_progress import _RICH_AVAILABLE"),
        (4, "import torch._dynamo"), (7, "logger._version"), (8, "trainer._signal_connector"),
        (11, "getattr(cb, '_last_checkpoint_saved', None)"), (14, "obj.__secret"), (16, "super()._setup"),
        (18, "self.owner._start")]


def test_private_names_of_other_libraries_only_in_compat():
    """Another library's private attribute or module is used only in ``lit_grpo/compat.py`` (checked against the
    supported versions by ``tests/test_compat.py``); the project's own objects reach each other through public
    names."""
    found = [(path.relative_to(ROOT).as_posix(), line, text) for path, _ in core_modules()
             if path.name != "compat.py" or path.parent != ROOT for line, text in private_uses(path.read_text())]
    assert not found, f"private names outside lit_grpo/compat.py (make them public, or wrap them there): {found}"


# -- no library's wording matched -------------------------------------------------------------------------------

MATCHING_METHODS = {"startswith", "endswith", "partition", "rpartition", "find", "rfind", "index", "rindex", "split",
                    "rsplit", "count", "replace", "removeprefix", "removesuffix"}
WORDING_LIBRARIES = ("argparse", "jsonargparse", "lightning", "pydantic", "yaml", "transformers", "peft", "datasets",
                     "httpx", "filelock", "omegaconf")
"""The libraries whose errors and output the core handles: their source is searched for the words the core matches."""
NOT_A_LIBRARY = {("environment.py", "model name")}
"""Matched words that are no library's: ``/proc/cpuinfo``'s field."""


def matched_words(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every string of words (two or more, space-separated) the source matches text against: an
    operand of ``in``/``==``/``!=``, an argument of a str method that searches (:data:`MATCHING_METHODS`) or of ``re``'s
    searches; a name bound at module level to such a string counts as the string."""
    tree = ast.parse(source)
    constants = string_constants(tree)
    found = []
    for node in ast.walk(tree):
        operands: list[ast.AST] = []
        if isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn, ast.Eq, ast.NotEq))
                                                 for o in node.ops):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in MATCHING_METHODS or isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re" and node.func.attr in ("search", "match", "fullmatch", "findall")):
            operands = list(node.args)
        for operand in operands:
            for sub in ast.walk(operand):
                text = sub.value if isinstance(sub, ast.Constant) else constants.get(getattr(sub, "id", None))
                if isinstance(text, str) and sum(bool(re.search("[A-Za-z]{2}", w)) for w in text.split()) >= 2:
                    found.append((sub.lineno, text))
    return found


def test_the_wording_check_finds_every_form():
    src = ("PREFIX = 'Parser key \"'\n"                                          # 1
           "if 'Does not validate' in str(exc): pass\n"                           # 2
           "text.startswith(PREFIX)\n"                                            # 3 through a module constant
           "detail.partition('Got value: ')\n"                                    # 4
           "re.search(r'No module named (\\S+)', text)\n"                        # 5
           "x == 'two words'\n"                                                   # 6
           "print('a message of ours')\n"                                         # 7 written, not matched
           "x in ('oneword', 'other')\n"                                          # 8 a key, not words
           "s.split(': fix')\n")                                                  # 9 one word
    assert matched_words(src) == [(2, "Does not validate"), (3, 'Parser key "'), (4, "Got value: "),
                                  (5, r"No module named (\S+)"), (6, "two words")]


def test_no_core_module_matches_a_librarys_wording():
    """The core reads no library's message text: a string of words it matches against (:func:`matched_words`)
    occurs in none of the libraries' sources (:data:`WORDING_LIBRARIES`). Keys, values and types come from structure
    (``lit_grpo.compat`` for what only a library's internals hold)."""
    import importlib.util

    sources = {}
    for name in WORDING_LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            package = spec.submodule_search_locations
            files = Path(spec.origin).parent.rglob("*.py") if package else [Path(spec.origin)]
            sources[name] = "\n".join(p.read_text(errors="ignore") for p in files)
    found = [(path.relative_to(ROOT).as_posix(), line, text, lib) for path, _ in core_modules()
             for line, text in matched_words(path.read_text())
             if (path.relative_to(ROOT).as_posix(), text) not in NOT_A_LIBRARY
             for lib, source in sources.items() if text in source]
    assert not found, f"library wording matched in the core (read its structure instead): {found}"


# -- the core's size by issue 36's ruler (benchmarks/core_size.py) ---------------------------------------------------

def _core_size():
    import importlib.util

    import sys

    if "core_size" not in sys.modules:  # its dataclass looks its module up there
        spec = importlib.util.spec_from_file_location("core_size", ROOT.parent / "benchmarks" / "core_size.py")
        sys.modules["core_size"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["core_size"])
    return sys.modules["core_size"]


SIZED = '''"""Module doc.

More."""

import os  # why os


def check_x(a):
    # full comment
    if a:
        return 1
    return 2


def f(b):
    """Doc."""
    if b > 0 and (
            b < 3):
        raise ValueError(
            "bad")
    try:
        pass
    except (KeyError,
            OSError) as exc:
        raise RuntimeError() from exc
    assert b
    s = """not a
docstring"""
    if s:
        if b:
            raise KeyError(s)
    return s
'''


def test_the_core_size_ruler_on_a_hand_counted_source():
    """Counted by hand, line by line. Docstring: 1-3 (the blank line inside too), 16. Full-line comment: 9; trailing:
    5. Blank: 4, 6, 7, 13, 14. Code: the other 22 (27-28: a string that is not a statement of its own). Checks:
    8-12 (the lines of ``check_x`` that are code: not its comment), 17-18 (the ``if`` whose body raises, its header
    over two lines), 19-20 (the ``raise``), 23-24 (the ``except`` that re-raises, its header), 25, 26 (``assert``),
    30 (the inner ``if``; the outer one's body holds no ``raise`` of its own), 31."""
    size = _core_size()
    counts = size.count_source(SIZED)
    assert (counts.lines, counts.code, counts.docstring, counts.comment, counts.trailing, counts.blank) == \
           (32, 22, 4, 1, 1, 5)
    assert sorted(size.check_lines(ast.parse(SIZED))) == [8, 9, 10, 11, 12, 17, 18, 19, 20, 23, 24, 25, 26, 30, 31]
    assert counts.check == 14  # line 9, a comment, is not code


def test_the_core_size_report_prints_every_figure_and_target(capsys):
    size = _core_size()
    size.main([])
    out = capsys.readouterr().out
    for label in ("files", "lines", "code lines", "docstring lines", "comment lines", "blank lines", "check lines",
                  "top 10 modules by check lines", "lines <= 7,500", "code lines <= 4,800",
                  "check lines <= 9% of code", "comments >= 6% of lines", "settings/ package <= 650 lines"):
        assert label in out, label
    total = sum((size.count_source(p.read_text()) for p in size.core_files()), size.Counts())
    assert f"code lines       {total.code:>7,}" in out
    assert total.lines == total.code + total.docstring + total.comment + total.blank  # the four kinds partition
    settings = sum((size.count_source(p.read_text()) for p in (size.CORE / "settings").glob("*.py")), size.Counts())
    assert f"settings/ package <= 650 lines: {settings.lines:,} in {settings.files} files" in out
