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
