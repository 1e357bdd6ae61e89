"""CEDAR's errno numbering: an errno crosses the wire in HTCondor's own numbers
(condor_io/errno_num.cpp), the same as Linux's up to 34 but for the few below."""

from __future__ import annotations

import errno as errnos

# (the wire's number, Linux's)
_WIRE_ERRNO = {36: errnos.EDEADLK, 38: errnos.ENAMETOOLONG, 39: errnos.ENOLCK,
               40: errnos.ENOSYS, 41: errnos.ENOTEMPTY, 42: errnos.EILSEQ,
               43: errnos.ETXTBSY}  # fmt: skip


def wire_errno(number: int) -> int:
    """The local errno of an errno the shadow sent (errno_num_decode)."""
    return _WIRE_ERRNO.get(number, number)
