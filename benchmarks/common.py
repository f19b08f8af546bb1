"""Helpers the benchmarks share: subprocess runs, statistics, results files.

Every training run is a fresh process (a trainer's real command line, or a
Keras reference), so no run inherits another's warm caches or threads.
"""
import json
import math
import os
import platform
import re
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# run.sh --quick points this elsewhere, so a smoke run never replaces the figures.
RESULTS_JSON = os.environ.get('BENCHMARK_RESULTS') or os.path.join(
    REPO_ROOT, 'benchmarks', 'results.json')
_PROGRESS = re.compile(r'INFO step (\d+)/\d+, .*examples/sec')


def env(extra: Optional[Dict[str, str]] = None, root: str = REPO_ROOT) -> Dict[str, str]:
    """Environment for a measured subprocess: `root` importable, no cluster."""
    result = dict(os.environ)
    for name in ('TF_CONFIG', 'CLUSTER_SPEC', 'AIP_MODEL_DIR'):
        result.pop(name, None)
    result['PYTHONPATH'] = root + os.pathsep + result.get('PYTHONPATH', '')
    result.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    result.update(extra or {})
    return result


def quiet_tensorflow() -> None:
    """Keeps TensorFlow's start-up and deprecation noise out of the tables."""
    from estimator_trainers import logs  # pylint: disable=g-import-not-at-top
    logs.quiet_console()
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.get_logger().setLevel('ERROR')


def python_module(module: str, *args: Any) -> List[str]:
    return [sys.executable, '-m', module] + [str(a) for a in args]


def peak_rss_mb(pid: int) -> Optional[float]:
    """The high-water mark of a live process's resident memory, in MB."""
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) / 1024.0
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used (all its threads)."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


# 1-minute load averages sampled (about once a second) while measured processes run.
_LOAD_SAMPLES: List[float] = []
_LAST_SAMPLE = [0.0]


def sample_load(force: bool = False) -> None:
    """Records the 1-minute load average, at most once a second unless `force`."""
    now = time.monotonic()
    if force or now - _LAST_SAMPLE[0] >= 1.0:
        _LAST_SAMPLE[0] = now
        _LOAD_SAMPLES.append(os.getloadavg()[0])


def load_mark() -> int:
    """A mark for `load_since`: the samples taken so far."""
    return len(_LOAD_SAMPLES)


def load_since(mark: int = 0) -> List[float]:
    """[min, mean, max] of the load averages sampled while measured processes ran
    since `mark` (`load_mark()`), or the load now when none were."""
    samples = _LOAD_SAMPLES[mark:] or [os.getloadavg()[0]]
    return [round(min(samples), 2), round(sum(samples) / len(samples), 2),
            round(max(samples), 2)]


def _stat_fields(pid: int) -> List[str]:
    """The fields of /proc/<pid>/stat after the command name (state first)."""
    with open('/proc/%d/stat' % pid) as f:
        return f.read().rsplit(')', 1)[1].split()


def _task_name(pid: int) -> str:
    """`ps-0`, `chief-0`... from a process's TF_CONFIG, or its command's module."""
    try:
        with open('/proc/%d/environ' % pid, 'rb') as f:
            environ = dict(item.split(b'=', 1) for item in f.read().split(b'\0')
                           if b'=' in item)
        task = json.loads(environ[b'TF_CONFIG'])['task']
        return '%s-%s' % (task['type'], task.get('index', 0))
    except (OSError, KeyError, ValueError, TypeError):
        return 'other'


def tree_cpu_seconds(root_pid: int) -> Dict[str, List[float]]:
    """{task: [user, system] CPU seconds} of `root_pid` and all its live
    descendants, each named by `_task_name` (the root: `launcher`). Exited
    children the processes have waited for count in their parents' figures."""
    parents: Dict[int, int] = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(_stat_fields(int(entry))[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree.update(children)
        frontier.extend(children)
    tick = os.sysconf('SC_CLK_TCK')
    totals: Dict[str, List[float]] = {}
    for pid in tree:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        user = (int(fields[11]) + int(fields[13])) / tick
        system = (int(fields[12]) + int(fields[14])) / tick
        name = 'launcher' if pid == root_pid else _task_name(pid)
        total = totals.setdefault(name, [0.0, 0.0])
        total[0] += user
        total[1] += system
    return totals


# What `stream_lines` calls per line of output: (seconds since the start, the
# line, the process's id) -> whether the measurement is complete.
OnLine = Callable[[float, str, int], bool]


def stream_lines(cmd: Sequence[str], on_line: OnLine, *,
                 extra_env: Optional[Dict[str, str]] = None, timeout: float = 600,
                 root: str = REPO_ROOT) -> str:
    """Runs `cmd` in `root`, calling `on_line(seconds_since_start, line, pid)` per line.

    Stops the process as soon as `on_line` returns True (the measurement is
    complete: no need to wait for evaluation and export). Returns the output.
    `root` is the checkout whose code runs (another one: an earlier version).

    Raises:
      RuntimeError: the process failed or timed out before `on_line` was done.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env(extra_env, root), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    lines = []
    done = False
    stdout = proc.stdout
    assert stdout is not None  # stdout=PIPE
    selector = selectors.DefaultSelector()
    selector.register(stdout, selectors.EVENT_READ)
    try:
        while not done:
            sample_load()
            if time.perf_counter() - start > timeout:
                raise RuntimeError('timed out after %ds: %s' % (timeout, ' '.join(cmd)))
            if not selector.select(timeout=1.0):
                continue
            line = stdout.readline()
            if not line:
                break
            lines.append(line)
            done = bool(on_line(time.perf_counter() - start, line.rstrip('\n'),
                                proc.pid))
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    output = ''.join(lines)
    if not done and proc.returncode:
        raise RuntimeError('exit %d: %s\n%s' % (proc.returncode, ' '.join(cmd),
                                                output[-4000:]))
    return output


def progress_throughput(cmd: Sequence[str], *, batch_size: int, intervals: int,
                        extra_env: Optional[Dict[str, str]] = None,
                        root: str = REPO_ROOT) -> Dict[str, Any]:
    """Steady-state throughput of a trainer command, timed on its progress log.

    The command logs a progress line every N global steps. Timing covers the
    steps between the first line (after graph build and warm-up) and the
    `intervals`-th line after it, as the lines arrive; the process is then
    stopped. Returns examples/sec of wall time and examples per CPU-second of
    the process (all its threads): the second is robust to other load on the
    machine and shows cost rather than speed. Also the seconds from the
    start to the first line (start-up, graph build, warm-up) and the
    process's peak resident memory (MB) at the last.
    """
    marks: List[Tuple[int, float, float, Optional[float]]] = []
    window: List[int] = []

    def on_line(elapsed: float, line: str, pid: int) -> bool:
        match = _PROGRESS.search(line)
        if match:
            if not marks:  # a sample at the window's start
                sample_load(force=True)
                window.append(load_mark() - 1)
            marks.append((int(match.group(1)), elapsed, cpu_seconds(pid), peak_rss_mb(pid)))
        return len(marks) > intervals

    output = stream_lines(cmd, on_line, extra_env=extra_env, root=root)
    if len(marks) <= intervals:
        raise RuntimeError('no steady-state progress lines:\n' + output[-4000:])
    (first_step, first_time, first_cpu, _), (step, now, cpu, rss) = marks[0], marks[-1]
    examples = (step - first_step) * batch_size
    return {'examples_per_sec': examples / (now - first_time),
            'examples_per_cpu_sec': examples / (cpu - first_cpu),
            **fastest_interval([m[:3] for m in marks], batch_size),
            'first_line_secs': first_time, 'peak_rss_mb': rss,
            'load': load_since(window[0])}


def fastest_interval(marks: Sequence[Tuple[int, float, float]],
                     batch_size: int) -> Dict[str, Optional[float]]:
    """The best examples/sec and examples per CPU-second over the intervals
    between consecutive `marks` of (step, wall seconds, CPU seconds).

    Noise only slows a run down. On these shared machines whole stretches of
    seconds run ~15% slower in wall and CPU time alike (a slower machine, not
    waiting: benchmarks/RESULTS.md, #33), and a 16-step window's mean takes
    whatever it lands on; the fastest interval is the nearest to the
    undisturbed cost, as `timeit` takes the best of its repeats.
    """
    walls: List[float] = []
    cpus: List[float] = []
    for (step0, time0, cpu0), (step1, time1, cpu1) in zip(marks, marks[1:]):
        examples = (step1 - step0) * batch_size
        walls.append(examples / (time1 - time0))
        if cpu1 > cpu0:
            cpus.append(examples / (cpu1 - cpu0))
    return {'best_examples_per_sec': max(walls),
            'best_examples_per_cpu_sec': max(cpus) if cpus else None}


def fastest(value: Dict[str, Any]) -> Dict[str, Any]:
    """A measured run's figures as the ResNet benchmarks count them: the fastest
    interval's, the window's means kept as `window_examples_per_sec` and
    `window_examples_per_cpu_sec`."""
    return dict(value, window_examples_per_sec=value['examples_per_sec'],
                window_examples_per_cpu_sec=value['examples_per_cpu_sec'],
                examples_per_sec=value['best_examples_per_sec'],
                examples_per_cpu_sec=(value['best_examples_per_cpu_sec']
                                      or value['examples_per_cpu_sec']))


def window_flags(interval: int, intervals: int,
                 root: str = REPO_ROOT) -> List[Union[str, int]]:
    """A trainer's flags for a steady-state window of `intervals` progress intervals
    of `interval` steps: enough steps for the window after a warm-up interval,
    and its only checkpoint and only evaluation at the end, after the window,
    as Keras' `fit` in the same benchmark saves and evaluates nothing.

    Evaluations have had a cadence of their own since issue #29 (about ten
    per run by default, inside the window); a checkout from before (`root`,
    e.g. #22's baseline) evaluates at its checkpoints and has no such flag.
    """
    steps = interval * (intervals + 3)
    flags: List[Union[str, int]] = ['--train-steps', steps, '--checkpoint-num-steps', steps,
                                    '--log-step-count-steps', interval]
    with open(os.path.join(root, 'estimator_trainers', 'flags.py'), encoding='utf-8') as f:
        if "'--eval-every-steps'" in f.read():
            flags += ['--eval-every-steps', steps]
    return flags


def estimator_throughput(data_dir: str, *, num_layers: int, batch_size: int = 128,
                         interval: int = 10, intervals: int = 2,
                         flags: Sequence[Union[str, int]] = (),
                         extra_env: Optional[Dict[str, str]] = None,
                         levers: Sequence[str] = ()) -> Dict[str, Any]:
    """`progress_throughput` of `cifar10_main` (ResNet-`num_layers`).

    `levers` are code-level switches of `benchmarks.estimator_variant`.
    """
    entry = ['cifar10_estimator.cifar10_main']
    if levers:
        entry = ['benchmarks.estimator_variant'] + [
            '--lever=' + lever for lever in levers] + ['--']
    with tempfile.TemporaryDirectory() as job_dir:
        cmd = python_module(
            *entry, '--data-dir', data_dir, '--job-dir', job_dir,
            '--num-layers', num_layers, '--train-batch-size', batch_size,
            *window_flags(interval, intervals), '--eval-steps', 1, *flags)
        return progress_throughput(cmd, batch_size=batch_size, intervals=intervals,
                                   extra_env=extra_env)


def keras_throughput(data_dir: str, *, num_layers: int, source: str, batch_size: int = 128,
                     interval: int = 10, intervals: int = 2, dtype_policy: Optional[str] = None,
                     extra_env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Steady-state throughput of the Keras reference, measured like the Estimator's."""
    args = ['--data-dir', data_dir, '--num-layers', num_layers, '--batch-size',
            batch_size, '--source', source, '--warmup-steps', interval,
            '--steps', interval * intervals, '--interval', interval]
    if dtype_policy:
        args += ['--dtype-policy', dtype_policy]
    return json_result(python_module('benchmarks.keras_resnet', *args),
                       extra_env=extra_env)


def json_result(cmd: Sequence[str], *,
                extra_env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Runs a Keras reference `cmd` until it prints its JSON result line; returns it."""
    result: Dict[str, Any] = {}
    mark = load_mark()

    def on_line(_: float, line: str, __: int) -> bool:
        if line.startswith('{'):
            result.update(json.loads(line))
            return True
        return False

    stream_lines(cmd, on_line, extra_env=extra_env)
    return dict(result, load=load_since(mark))


def summarize(values: Sequence[float]) -> Dict[str, Any]:
    """Median and spread of repeated measurements."""
    return {'median': statistics.median(values), 'min': min(values),
            'max': max(values), 'runs': [round(v, 2) for v in values]}


def summarize_repeats(values: Sequence[float]) -> Dict[str, Any]:
    """`summarize`, with the interval for the median (`median_interval`) as
    `interval` and its `interval_coverage`."""
    low, high, coverage = median_interval(values)
    return dict(summarize(values), interval=[low, high], interval_coverage=coverage)


def same_repeat_ratio(top_runs: Sequence[Dict[str, Any]],
                      bottom_runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The ratios of two variants' runs taken in the same repeat (each a
    throughput result), summarized with the interval for their median
    (`summarize_repeats`), in examples/sec and in `per_cpu_second_per_repeat`.
    Runs of one repeat share the machine's state, so their ratios spread less
    than the ratio of two medians would suggest."""
    pairs = list(zip(top_runs, bottom_runs))
    return {**summarize_repeats([a['examples_per_sec'] / b['examples_per_sec']
                                 for a, b in pairs]),
            'per_cpu_second_per_repeat': summarize_repeats(
                [a['examples_per_cpu_sec'] / b['examples_per_cpu_sec'] for a, b in pairs])}


def median_interval(values: Sequence[float],
                    confidence: float = 0.9) -> Tuple[float, float, float]:
    """A distribution-free interval for the median of what `values` sample:
    (low, high, coverage), the k-th smallest and largest values for the
    largest k whose coverage is still at least `confidence`, else the range.

    The k-th order statistics bracket the median with probability
    1 - 2 P(Binomial(n, 1/2) < k): for 5 repeats the range, at 94%; for 3
    only 75%. It answers whether a ratio's repeats can tell it from 1.0.
    """
    ordered, n = sorted(values), len(values)

    def coverage(k: int) -> float:
        value: float = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
        return value

    k = 1
    while k + 1 <= n // 2 and coverage(k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[n - k], coverage(k)


def machine_info() -> Dict[str, Any]:
    """Facts that make figures comparable: CPU, cores, load, TF, thread settings."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    cpu = platform.processor()
    flags = set()
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    cpu = line.split(':', 1)[1].strip()
                elif line.startswith('flags'):
                    flags = set(line.split(':', 1)[1].split())
    except OSError:
        pass
    return {
        'cpu': cpu,
        'cores': os.cpu_count(),
        'cpu_features': sorted(flags & {'avx2', 'avx512f', 'avx512_bf16', 'amx_bf16',
                                        'amx_tile', 'avx512_fp16'}),
        'load_average': [round(x, 2) for x in os.getloadavg()],
        'python': platform.python_version(),
        'tensorflow': tf.__version__,
        'onednn': os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'default (on)'),
        'threads': 'intra-op = %s (cores), inter-op = TensorFlow default'
                   % os.cpu_count(),
    }


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def update_results(section: str, value: Dict[str, Any]) -> None:
    """Stores `value` and the command that measured it under `section` in
    results.json (other sections kept)."""
    results: Dict[str, Any] = {}
    if os.path.exists(RESULTS_JSON):
        with open(RESULTS_JSON) as f:
            results = json.load(f)
    module = 'benchmarks.' + os.path.splitext(os.path.basename(sys.argv[0]))[0]
    value = dict(value, command=' '.join(['python -m', module] + sys.argv[1:]),
                 finished=time.strftime('%Y-%m-%d %H:%M:%S'))
    results[section] = value
    with open(RESULTS_JSON, 'w') as f:
        json.dump(results, f, indent=2, sort_keys=True)
        f.write('\n')


def finish(section: str, results: Dict[str, Any], title: str, header: Sequence[str],
           rows: Sequence[Sequence[Any]]) -> None:
    """Prints a benchmark's table and stores its `results` under `section`."""
    print_table(title, header, rows)
    update_results(section, results)


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Prints an aligned text table."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print('\n' + title)
    for i, row in enumerate(cells):
        print('  '.join(c.ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            print('  '.join('-' * w for w in widths))
    sys.stdout.flush()
