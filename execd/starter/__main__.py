"""`python -S -m execd.starter SPEC.json`: run one job and leave a report."""

from __future__ import annotations

import sys

from execd.starter.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
