"""`python -S -m execd.starter SPEC.json`: run one job and leave a report.

`python -S -m execd.starter --zygote`: fork a starter per request on stdin
(execd/starter/zygote.py).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    if sys.argv[1:] == ["--zygote"]:
        from execd.starter.zygote import zygote_main

        sys.exit(zygote_main())
    from execd.starter.program import main

    sys.exit(main(sys.argv[1:]))
