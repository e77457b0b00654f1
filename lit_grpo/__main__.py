import sys

from lit_grpo.settings import ConfigError
from lit_grpo.settings.args import expand_bases
from lit_grpo.errors import fail
from lit_grpo.settings.paths import refuse_before_imports

if __name__ == "__main__":
    try:  # a path from another folder: one line before the slow imports (a config's bases read as the CLI reads them)
        early = refuse_before_imports(expand_bases(sys.argv[1:]))
    except ConfigError:  # a wrong _base_: the full check says so
        early = None
    if early:
        fail(early)
    from lit_grpo.cli import main

    main()
