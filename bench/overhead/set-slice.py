#!/usr/bin/env python3
"""Sets the EEVDF custom slice (sched_setattr's sched_runtime for SCHED_OTHER, Linux >= 6.12) of a
process's threads from outside, so a benchmark can compare slices on the same binary without a
rebuild (bench/overhead/p99-sched.sh's KEY_slice fronts). Measured 2026-11-29 22:20 UTC at 7,400/s:
a 100 us slice on the proxy's data-plane threads made its p99 worse, not better (it preempts the
load generator on the same 2 cores, whose send lag p99 rose to 36-61 ms), so the proxy does not
set one itself (bench/results/proxy-overhead.md, "Fourth round").

    bench/overhead/set-slice.py PID SLICE_US [THREAD_NAME_PREFIX]     # SLICE_US 0: the default

Kernel: kernel/sched/syscalls.c __setscheduler_params() (slice clamped to 0.1-100 ms);
sched_setattr(2). Prints each thread it changed and its se.slice read back from /proc.
"""
import ctypes, os, struct, sys

SYS_SCHED_SETATTR = 314  # x86_64 (arch/x86/entry/syscalls/syscall_64.tbl)


def set_slice(tid, ns):
    libc = ctypes.CDLL(None, use_errno=True)
    # struct sched_attr, SCHED_ATTR_SIZE_VER0 = 48 bytes: size, policy, flags, nice, priority,
    # runtime, deadline, period. Policy 0 = SCHED_OTHER, nice 0.
    attr = ctypes.create_string_buffer(struct.pack("IIQiIQQQ", 48, 0, 0, 0, 0, ns, 0, 0), 48)
    if libc.syscall(SYS_SCHED_SETATTR, tid, attr, 0) != 0:
        raise OSError(ctypes.get_errno(), f"sched_setattr({tid})")


def slice_of(pid, tid):
    for line in open(f"/proc/{pid}/task/{tid}/sched"):
        if line.startswith("se.slice"):
            return int(line.split(":")[1])
    return None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    pid, us = int(sys.argv[1]), int(sys.argv[2])
    prefix = sys.argv[3] if len(sys.argv) > 3 else ""
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        if name.startswith(prefix):
            set_slice(tid, us * 1000)
            print(f"{pid}/{tid} {name}: se.slice {slice_of(pid, tid)} ns")


main()
