"""The VM tier: guest tests run only inside the guest (EXECD_IN_VM=1), never on the host.

On the host, tests/vm/test_vm_tier.py boots the guest once and reports each guest test
by name; collecting tests/vm/guest here would run kernel-specific tests on the host.
"""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("EXECD_IN_VM", "") == "1" else ["guest"]
