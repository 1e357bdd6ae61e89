"""Hide device files from a job: a cgroup v2 BPF device program that denies them.

STARTER_HIDE_GPU_DEVICES (HTCondor's starter does the same): the device files stay in
/dev, but any open (read or write) or mknod of a denied (major, minor) from a process in
the cgroup, or below it, fails with EPERM whatever the file's permissions say. As
HTCondor's program, it looks at the major and minor numbers only, not at the access
type nor at char/block; everything else is allowed (and still checked by the file's
permissions and by any program attached above, e.g. systemd's).

The program is a handful of eBPF instructions assembled here and loaded with bpf(2)
through ctypes; the kernel keeps it attached to the cgroup until the cgroup is removed,
so its file descriptor is closed at once. Attached with BPF_F_ALLOW_MULTI: programs
that systemd (or a container runtime) attached above with BPF_F_ALLOW_MULTI still run
too, and the kernel allows an access only when every one of them allows it; nothing
below the job's cgroup can replace ours. (HTCondor attaches with no flag, which composes
with programs above in the same way and forbids any below.)

Needs root (CAP_SYS_ADMIN) and a kernel with cgroup BPF (4.15+); works on the cgroup v2
hierarchy with or without controllers (hybrid hosts too). Failure is a CgroupError
saying why; the starter logs it and runs the job without hiding, as HTCondor does.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

from execd.errors import CgroupError

# bpf(2) commands, program and attach types, flags (linux/bpf.h).
BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
BPF_F_ALLOW_MULTI = 2

# Instruction classes and fields (linux/bpf_common.h, linux/bpf.h).
_ALU64_MOV_K = 0x07 | 0xB0 | 0x00  # BPF_ALU64 | BPF_MOV | BPF_K
_LDX_MEM_W = 0x01 | 0x60 | 0x00  # BPF_LDX | BPF_MEM | BPF_W
_JMP_JNE_K = 0x05 | 0x50 | 0x00  # BPF_JMP | BPF_JNE | BPF_K
_JMP_EXIT = 0x05 | 0x90  # BPF_JMP | BPF_EXIT

# struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }
_CTX_MAJOR = 4
_CTX_MINOR = 8

# The license string only decides whether GPL-only helpers may be called; this program
# calls none, but the kernel still wants a string.
LICENSE = b"Apache-2.0"
PROG_NAME = b"execd_hide_dev"  # what `bpftool cgroup tree` shows (15 characters at most)

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351, "riscv64": 280}


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One struct bpf_insn: u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm."""
    regs = (src << 4 | dst) if sys.byteorder == "little" else (dst << 4 | src)
    return struct.pack("=BBhi", code, regs, off, imm)


def deny_program(devices: Sequence[tuple[int, int]]) -> bytes:
    """The eBPF program: return 0 (EPERM) for each (major, minor), 1 (allow) otherwise.

        r0 = 1; r2 = ctx->major; r3 = ctx->minor
        for each device: if r2 != major goto next; if r3 != minor goto next; r0 = 0; exit
        exit
    """
    code = [_insn(_ALU64_MOV_K, dst=0, imm=1),
            _insn(_LDX_MEM_W, dst=2, src=1, off=_CTX_MAJOR),
            _insn(_LDX_MEM_W, dst=3, src=1, off=_CTX_MINOR)]
    for major, minor in devices:
        if not (0 <= major < 2**31 and 0 <= minor < 2**31):
            raise CgroupError(f"device number {major}:{minor} is out of range")
        code += [_insn(_JMP_JNE_K, dst=2, off=3, imm=major),  # offsets count instructions
                 _insn(_JMP_JNE_K, dst=3, off=2, imm=minor),
                 _insn(_ALU64_MOV_K, dst=0, imm=0),
                 _insn(_JMP_EXIT)]
    code.append(_insn(_JMP_EXIT))
    return b"".join(code)


class _Bpf:
    """bpf(2) through libc's syscall(); errno comes back as an OSError."""

    def __init__(self) -> None:
        machine = os.uname().machine
        number = _SYS_BPF.get(machine)
        if number is None:
            raise CgroupError(f"bpf(2) has no known system call number on {machine}")
        self.number = number
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long

    def __call__(self, cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
        result = int(self.libc.syscall(ctypes.c_long(self.number), ctypes.c_int(cmd),
                                       attr, ctypes.c_uint(len(attr))))
        if result < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return result


def _load(bpf: _Bpf, program: bytes) -> int:
    insns = ctypes.create_string_buffer(program, len(program))
    license_ = ctypes.create_string_buffer(LICENSE)
    log = ctypes.create_string_buffer(4096)
    attr = ctypes.create_string_buffer(72)  # union bpf_attr, BPF_PROG_LOAD's fields

    def fill(log_level: int) -> None:
        struct.pack_into("=IIQQIIQII16s", attr, 0, BPF_PROG_TYPE_CGROUP_DEVICE,
                         len(program) // 8, ctypes.addressof(insns),
                         ctypes.addressof(license_), log_level,
                         len(log) if log_level else 0,
                         ctypes.addressof(log) if log_level else 0, 0, 0, PROG_NAME)

    fill(0)
    try:
        return bpf(BPF_PROG_LOAD, attr)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.ENOSYS):
            raise
        # Again with the verifier's log, so that the error says what it disliked.
        fill(1)
        with contextlib.suppress(OSError):  # it fails again; the log says why
            bpf(BPF_PROG_LOAD, attr)
        verifier = log.value.decode(errors="replace").strip().replace("\n", "; ")
        raise OSError(exc.errno, f"{exc.strerror} (verifier: {verifier or 'no log'})") from None


def deny_devices(cgroup: Path, devices: Sequence[tuple[int, int]], *,
                 allow_multi: bool = True) -> None:
    """Attach a program to `cgroup` that denies each (major, minor) to its processes.

    allow_multi False: attached as HTCondor attaches it, with no flag, which also
    forbids any program below. Raises CgroupError naming the cause (no permission, no
    cgroup BPF, a program above that forbids programs below); nothing is attached then.
    """
    program = deny_program(devices)
    try:
        bpf = _Bpf()
        prog_fd = _load(bpf, program)
    except OSError as exc:
        raise CgroupError(f"cannot load the BPF device program: {exc.strerror}") from exc
    try:
        cgroup_fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        os.close(prog_fd)
        raise CgroupError(f"cannot open cgroup {cgroup}: {exc.strerror}") from exc
    attr = ctypes.create_string_buffer(20)  # union bpf_attr, BPF_PROG_ATTACH's fields
    struct.pack_into("=IIIII", attr, 0, cgroup_fd, prog_fd, BPF_CGROUP_DEVICE,
                     BPF_F_ALLOW_MULTI if allow_multi else 0, 0)
    try:
        bpf(BPF_PROG_ATTACH, attr)
    except OSError as exc:
        raise CgroupError(
            f"cannot attach the BPF device program to {cgroup}: {exc.strerror}"
        ) from exc
    finally:
        os.close(cgroup_fd)
        os.close(prog_fd)  # attached, the cgroup holds the program
