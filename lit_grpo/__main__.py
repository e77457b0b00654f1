import sys

from lit_grpo.errors import fail
from lit_grpo.paths import refuse_before_imports

if __name__ == "__main__":
    early = refuse_before_imports(sys.argv[1:])  # a path from another folder: one line before the slow imports
    if early:
        fail(early)
    from lit_grpo.cli import main

    main()
