"""A process's own peak resident set size, for the benchmarks that run each measurement in a child process."""

import resource


def peak_rss_gib() -> float:
    """This process's peak RSS in GiB: Linux's VmHWM, the high-water mark of its own address space. getrusage's
    ru_maxrss is not that: across exec it keeps the larger of the new program's peak and the peak so far of the
    process that forked it (fs/exec.c, exec_mmap), so a child started by a 1 GiB parent reports at least 1 GiB
    (measured: 1.03 GiB against VmHWM's 13 MiB for a bare `python -c`). ru_maxrss where /proc is not there."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
