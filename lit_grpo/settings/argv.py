"""The tokens of a command line as ``--key value`` pairs, read without importing anything but the standard library
(``python -m lit_grpo`` reads its arguments before the slow imports:
:func:`lit_grpo.settings.paths.refuse_before_imports`)."""


def iter_options(args: list[str]):
    """``(key, value, (start, end))`` of every ``--key value`` / ``--key=value`` / ``-c value`` in ``args``."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            yield key, value, (i, i + 1)
            i += 1
        elif arg.startswith("-") and arg not in ("-", "--"):
            has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
            yield arg.lstrip("-"), args[i + 1] if has_value else None, (i, i + 2 if has_value else i + 1)
            i += 2 if has_value else 1
        else:
            i += 1


def config_files(args: list[str]) -> list[str]:
    """The values of every ``--config`` / ``-c`` in ``args``, in order."""
    return [value for key, value, _ in iter_options(args) if key in ("config", "c") and value]


def subcommand_at(args: list[str], subcommands: tuple[str, ...]) -> tuple[int, str] | None:
    """``(index, name)`` of the subcommand in ``args``: the first of ``subcommands`` that is no option's value."""
    last = 0
    for _, _, (start, end) in [*iter_options(args), (None, None, (len(args), len(args)))]:
        found = next(((i, a) for i, a in enumerate(args[last:start], last) if a in subcommands), None)
        if found:
            return found
        last = end
    return None
