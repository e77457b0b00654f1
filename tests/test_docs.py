"""README, docs/ and ARCHITECTURE stay true: every command in their ``bash`` blocks parses or is run by a named test,
every relative link resolves (file and heading), and every option the CLI's help lists is documented.

Commands are parsed, not run: ``python -m lit_grpo <subcommand> ...`` with ``--print_config`` added (the whole
config is built and checked by jsonargparse, no model work), ``--help`` as written, and the experiment runner's
own parser. The few commands that need a model, a checkpoint, a GPU or a scheduler are listed below with the test
that runs them (or why nothing here can).
"""

from __future__ import annotations

import configparser
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]

# What stands for a file the reader writes themselves (the judge block: docs/judge.md's YAML).
PLACEHOLDERS = {"my_overrides.yaml": "trainer:\n  max_steps: 5\n"}
# Commands the suite runs elsewhere, by a leading pattern: the test that runs them.
RUN_BY = {
    r"python -m lit_grpo\.export ": "tests/test_ranks_and_nodes.py::test_export_writes_the_trained_policy",
    r"python benchmarks/gpu_step\.py --tiny": "tests/test_gpu_step.py::test_tiny_run_prints_every_figure_for_both_trainers",
    r"jupyter execute notebooks/attention_maps\.ipynb": "tests/test_notebook.py::test_notebook_runs_end_to_end_and_draws_the_overlays",
    r"pip install torch==2\.13\.0$|pip install -e \"\.\[dev\]\"$|pytest$": "tests/test_install.py::test_ci_runs_the_readme_lines_as_written",
    r"pip uninstall -y torchcodec torchaudio$|python -m lit_grpo\.torchvision_cpu --install$|LIT_GRPO_REQUIRE_VLLM=1 pytest":
        "tests/test_install.py::test_ci_runs_the_vllm_lines_of_the_install_page_as_written",
    r"python -m lit_grpo\.serve ": "tests/test_vllm.py::test_a_run_sampling_from_a_server_trains_the_colocated_runs_"
                                  "weights_and_a_dead_server_is_one_line",
}
# Commands nothing here can run, and why; their files and flags are still checked below.
NOT_RUN = {
    r"tensorboard --logdir ": "a viewer",
    r"jupyter lab ": "a browser",
    r"pip install ": "a package index (the extra it names is checked against setup.cfg)",
    r"python benchmarks/": "a benchmark prints measured figures (its flags are checked against its parser)",
    r"export ": "environment for the next lines",
}
# Flags a page quotes as refused.
REFUSED_FLAGS = {"--model.init_args.sampling.repetition_penalty"}
# A page another change writes; linked from here before it lands.
WRITTEN_ELSEWHERE: set[str] = set()
# The package's command lines (``python -m <module>``) whose commands are parsed here.
PACKAGE_CLIS = ("lit_grpo", "lit_grpo.tasks.phyx.experiments")


def _parser(module: str):
    """What reads a command line of ``module`` (``main`` exits after ``--print_config`` or ``--help``)."""
    if module == "lit_grpo.tasks.phyx.experiments":
        from lit_grpo.tasks.phyx.experiments import parse

        return parse
    from lit_grpo.cli import main

    return main


def _blocks(text: str) -> list[str]:
    """The bodies of the ```bash / ```sh blocks."""
    return re.findall(r"^ *```(?:bash|sh)\n(.*?)^ *```", text, re.S | re.M)


def _commands(block: str) -> list[str]:
    """One string per command: continuation lines joined, comments and shell directives dropped."""
    out: list[str] = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()  # the trailing comment (no command here quotes a #)
        if line and not line.startswith("#"):
            out.append(re.sub(r"\s+", " ", line))
    return out


def documented_commands() -> list[tuple[str, str]]:
    """``(page, command)`` for every command in a bash block of README, ARCHITECTURE and docs/."""
    return [(p.relative_to(ROOT).as_posix(), c) for p in PAGES for b in _blocks(p.read_text()) for c in _commands(b)]


def _entry(command: str) -> tuple[str, list[str]] | None:
    """``("lit_grpo" | "lit_grpo.tasks.phyx.experiments", args)`` for a command that runs one of the package's CLIs."""
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # OMP_NUM_THREADS=1 ...
        words.pop(0)
    if "-m" not in words or words[0] not in ("python", "srun", "torchrun"):
        return None
    i = words.index("-m")
    return words[i + 1], words[i + 2:]


def _classify(command: str) -> str:
    for table, kind in ((RUN_BY, "run_by"), (NOT_RUN, "not_run")):
        if any(re.match(p, command) for p in table):
            return kind
    entry = _entry(command)
    return "parse" if entry and entry[0] in PACKAGE_CLIS else "unknown"


def test_every_command_is_parsed_or_run_by_a_named_test():
    commands = documented_commands()
    assert len(commands) > 20, "the bash blocks were not found"
    unknown = [(page, c) for page, c in commands if _classify(c) == "unknown"]
    assert unknown == [], "a command no test parses or runs: parse it here or list it in RUN_BY / NOT_RUN"
    for pattern, test in RUN_BY.items():
        path, name = test.split("::")
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M), test
        assert any(re.match(pattern, c) for _, c in commands), f"RUN_BY entry no page uses: {pattern}"
    for pattern in NOT_RUN:
        assert any(re.match(pattern, c) for _, c in commands), f"NOT_RUN entry no page uses: {pattern}"


def test_commands_run_elsewhere_name_files_extras_and_flags_that_exist():
    extras = configparser.ConfigParser()
    extras.read(ROOT / "setup.cfg")
    for page, command in documented_commands():
        words = shlex.split(command)
        for extra in re.findall(r"\.\[(\w+)\]", command):
            assert extras.has_option("options.extras_require", extra), (page, command)
        script = next((w for w in words if re.match(r"(benchmarks|notebooks)/", w)), None)
        if script:
            assert (ROOT / script).is_file(), (page, command)
            if script.endswith(".py"):  # each flag is one its parser declares
                source = (ROOT / script).read_text()
                for flag in (w.split("=")[0] for w in words if w.startswith("--")):
                    assert f'"{flag}"' in source, (page, command, flag)


def _run(fn, args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            fn(args)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue()


def _placeholders(args: list[str], tmp_path: Path) -> list[str]:
    """``args`` with each file the reader writes themselves replaced by one written into ``tmp_path``."""
    out = []
    for arg in args:
        if arg == "my_judge.yaml":  # the judge block of docs/judge.md
            text = (ROOT / "docs" / "judge.md").read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
        elif arg in PLACEHOLDERS:
            text = PLACEHOLDERS[arg]
        else:
            out.append(arg)
            continue
        (tmp_path / arg).write_text(text)
        out.append(str(tmp_path / arg))
    return out


def _package_commands() -> list:
    """One ``pytest.param`` per distinct package command; those of docs/ are marked slow (a parse takes 1-3 s)."""
    params, seen = [], set()
    for page, command in documented_commands():
        if _classify(command) == "parse" and command not in seen:
            seen.add(command)
            marks = [] if page == "README.md" else [pytest.mark.slow]
            params.append(pytest.param(command, marks=marks, id=f"{page}: {command[:80]}"))
    return params


@pytest.mark.parametrize("command", _package_commands())
def test_every_package_command_parses(command, tmp_path):
    """Each ``python -m lit_grpo ...`` command (and its torchrun / srun forms) parses as written: the CLI prints the
    whole config (``--print_config``: every option checked, no model built), ``--help`` prints its help, and the
    experiment runner's parser reads its settings."""
    module, args = _entry(command)
    args = _placeholders(args, tmp_path)
    if module != "lit_grpo":
        code, out = _run(_parser(module), args)
    elif "--help" in args:
        code, out = _run(_parser(module), args)
        assert "--model.init_args." in out
    else:
        code, out = _run(_parser(module), [*args, "--print_config"])
        assert "class_path: lit_grpo." in out, out[-2000:]
    assert code == 0, out[-2000:]


def test_a_command_that_does_not_parse_fails_here():
    code, out = _run(_parser("lit_grpo"), ["fit", "--config", "configs/demo.yaml", "--model.init_args.grpo.no_such_option", "1",
                            "--print_config"])
    assert code == 2 and "no_such_option" in out
    assert len(_package_commands()) > 15


def test_commands_named_in_the_text_are_shown_in_a_block():
    """A package or benchmark command quoted inside a sentence is the start of one in a bash block (so the tests
    above see it whole)."""
    commands = [re.sub(r"^([A-Z_]+=\S* )+", "", c) for _, c in documented_commands()]
    loose = []
    for page in PAGES:
        for span in re.findall(r"`([^`]+)`", re.sub(r"^ *```.*?^ *```", "", page.read_text(), flags=re.S | re.M)):
            span = re.sub(r"\s+", " ", span.strip())
            if re.match(r"python (-m lit_grpo|benchmarks/)", span) and not any(c.startswith(span) for c in commands):
                loose.append((page.name, span))
    assert loose == []


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_slug_follows_github():
    assert _slug("PhyX: the physics reward-design paper") == "phyx-the-physics-reward-design-paper"
    assert _slug("Reproducing the paper's table") == "reproducing-the-papers-table"
    assert _slug("Sampling contract, dropout and ranks") == "sampling-contract-dropout-and-ranks"


def test_every_relative_link_resolves():
    """Every ``[text](path#anchor)`` between README, ARCHITECTURE and docs/ names a file that exists and, with an
    anchor, a heading in it; every page of docs/ is reachable from README."""
    broken, linked = [], set()
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            rel = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else str(file)
            linked.add(rel)
            if not file.exists():
                if rel not in WRITTEN_ELSEWHERE:
                    broken.append((page.name, target))
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                broken.append((page.name, target))
    assert broken == []
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in PAGES[2:] if f"(docs/{p.name}" not in readme]
    assert unlinked == [], "every docs/ page is linked from README"


def _code_text() -> str:
    """Everything the pages show as code: inline spans and blocks."""
    text = "\n".join(p.read_text() for p in PAGES)
    return "\n".join(re.findall(r"^```.*?^```", text, re.S | re.M) + re.findall(r"`([^`\n]+)`", text))


def _help(args: list[str]) -> str:
    code, out = _run(_parser("lit_grpo"), args)
    assert code == 0, out[-2000:]
    return out


def _option_names(help_text: str) -> set[str]:
    """The last part of each model, data, reward and judge option the help lists."""
    names = set(re.findall(r"^\s+--(?:model\.(?:init_args\.)?|data\.)(?:\w+\.)*?(\w+)[ \[\n]", help_text, re.M))
    names |= set(re.findall(r"^\s+(?:--)?kwargs\.(?:judge\.(?:offline\.)?)?(\w+)", help_text, re.M))
    return names - {"help", "init_args", "class_path"}


def test_every_option_in_the_help_is_documented_and_every_documented_flag_exists():
    """Each option ``fit --help`` lists for the model, the data, a dataset, the rewards and the judge (and the LoRA
    and embedded-model groups) appears as code on some page: no option only its docstring knows. And each
    ``--model...`` / ``--data...`` flag a page quotes is one the help lists (or below an option it lists: a nested
    group, a class's ``init_args`` or a dict), so a renamed option cannot stay documented under its old name."""
    demo = ["fit", "--config", "configs/demo.yaml"]
    main_help = _help([*demo, "--help"])
    names = _option_names(main_help)
    for group in ("lora", "embedded"):
        names |= _option_names(_help([*demo, f"--model.init_args.policy.{group}.help"]))
    assert {"extra_stop_tokens", "advantage_eps", "beta", "min_votes", "num_workers", "r", "hidden_size"} <= names
    code = _code_text()
    undocumented = sorted(n for n in names if not re.search(rf"(?<![\w-]){n}(?![\w-])", code))
    assert undocumented == []

    listed = set(re.findall(r"^\s+(--[\w.]+)", main_help, re.M))
    unknown = []
    for flag in set(re.findall(r"(--(?:model|data)\.[\w.]*\w)", code)):
        flag = re.sub(r"^--data\.(val|test|predict)\.", "--data.train.", flag.removesuffix(".help"))
        parts, prose = flag.split("."), {"--model", "--model.init_args", "--data", "--data.train"}
        above = {".".join(parts[:i]) for i in range(1, len(parts))} - prose
        if flag not in prose and flag not in listed and not above & listed and flag not in REFUSED_FLAGS:
            unknown.append(flag)
    assert sorted(unknown) == []
    assert "--model.init_args.grpo.no_such_option" not in listed
