"""What the machine a task runs on is: CPU, memory, load, this process's start.

Read from /proc (with `platform` and `os` where it has no answer), without
TensorFlow: the local launcher sizes a cluster with it before any task starts,
and the run record describes the machine with it.
"""
import os
import platform
import time
from typing import Optional


def cpu_model(cpuinfo_path: str = '/proc/cpuinfo') -> str:
    """The CPU's model name (`Intel(R) Xeon(R) ...`), else what `platform` knows."""
    try:
        with open(cpuinfo_path) as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_bytes(meminfo: str = '/proc/meminfo') -> Optional[int]:
    """Total memory (MemTotal), or None where unknown."""
    return _meminfo_bytes('MemTotal', meminfo)


def mem_available_bytes(meminfo: str = '/proc/meminfo') -> Optional[int]:
    """MemAvailable of /proc/meminfo in bytes, or None where there is none."""
    return _meminfo_bytes('MemAvailable', meminfo)


def _meminfo_bytes(field: str, meminfo: str) -> Optional[int]:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith(field + ':'):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_started_at() -> Optional[float]:
    """When this process started (`time.time()` scale), from /proc; None where unknown.

    A run's wall time and start-up count from here: importing TensorFlow is
    part of what a run costs.
    """
    try:
        with open('/proc/self/stat') as f:
            start_ticks = int(f.read().rsplit(')', 1)[1].split()[19])
        with open('/proc/uptime') as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf('SC_CLK_TCK'))
    except (OSError, ValueError, IndexError):
        return None


def load_average() -> Optional[list[float]]:
    """The 1, 5 and 15 minute load averages (a shared machine's figures say why), or None."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
