"""`python -S -m execd.starter SPEC.json`: run one job and leave a report.

`python -S -m execd.starter --warm`: start up now, then wait on stdin for
`SPEC_PATH NUL LOG_PATH` and run that job (execd/starter/launcher.py, WarmStarter).
"""

from __future__ import annotations

import sys

from execd.starter.run import main, warm_main

if __name__ == "__main__":
    sys.exit(warm_main() if sys.argv[1:] == ["--warm"] else main(sys.argv[1:]))
