"""``python -m mlakit`` and the ``mlakit`` console script: the library's command-line program
(``mlakit info``, ``bench``, ``check``, ``tune``; docs in the README), shipped in the package as
``mlakit/bin/mlakit`` and run in place of this process."""

import os
import sys
from pathlib import Path


def program() -> Path:
    return Path(__file__).resolve().parent / "bin" / "mlakit"


def main() -> None:
    path = program()
    if not path.is_file():
        sys.exit(
            "mlakit: the command-line program is not in this build of the package (the CLI11 "
            "headers were not found when it was built)"
        )
    os.execv(str(path), [str(path)] + sys.argv[1:])


if __name__ == "__main__":
    main()
