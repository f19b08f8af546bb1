"""Benchmark 9: taxi training as the data grows (1M, 3M, 10M rows).

For each size, `benchmarks.taxi_bigdata` draws that many jittered rows from
the real trips into `--shards` CSV files (once, kept in `--work-dir`), and
`python -m taxi_estimator.cache` writes their cache (once; its seconds are
recorded). The trainer (defaults, real command line) then trains on:
- `csv`: the CSV shards, streamed (`--max-in-memory-mb 0`, as files larger
  than the limit are: parsed in chunks every epoch, permuted in windows);
- `cache`: the cache directory, streamed without parsing;
- `memory`: the CSV shards held in memory (only sizes under the trainer's
  default in-memory limit, `--max-in-memory-mb`), the path streaming is
  compared with;
- `csv_shared_pool` (smallest size only, side by side with `csv`): the CSV
  streamed with its parsing on tf.data's shared thread pool, as before it
  got threads of its own (`estimator_variant`'s `shared_input_pool`).
Each run reports steady-state rows/sec (and per CPU-second) in its fastest
progress interval (`--interval` steps, of `--intervals`), the process's
peak resident memory at the end of the window, and the seconds to its first
progress line (start-up: the check of every row, or the cache's record).
Targets: streaming >= 0.9x the in-memory path, peak RSS within 10% from the
smallest to the largest size.
"""
import argparse
import os
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks import common
from benchmarks import taxi
from benchmarks import taxi_bigdata
from taxi_estimator import input as input_lib
from taxi_estimator import trainer as taxi_trainer


def _dataset(work_dir: str, source: str, rows: int,
             shards: int) -> Tuple[List[str], str, Optional[float]]:
    """(csv files, cache dir, cache step seconds or None) for `rows` rows, made if missing."""
    folder = os.path.join(work_dir, 'rows-%d' % rows)
    csv_dir = os.path.join(folder, 'csv')
    files = sorted(os.path.join(csv_dir, f) for f in os.listdir(csv_dir)) if (
        os.path.isdir(csv_dir)) else []
    if len(files) != shards:
        files = taxi_bigdata.generate(source, rows, shards, csv_dir)
    cache_dir = os.path.join(folder, 'cache')
    seconds: Optional[float] = None
    if not os.path.isfile(os.path.join(cache_dir, input_lib.CACHE_RECORD)):
        if os.path.isdir(cache_dir):
            for parent, dirs, names in os.walk(cache_dir, topdown=False):
                for name in names:
                    os.remove(os.path.join(parent, name))
                for name in dirs:
                    os.rmdir(os.path.join(parent, name))
        start = time.time()
        common.stream_lines(common.python_module(
            'taxi_estimator.cache', '--files', *files, '--out-dir', cache_dir),
            lambda *_: False, timeout=7200)
        seconds = time.time() - start
    return files, cache_dir, seconds


def train(train_files: Sequence[str], eval_files: Sequence[str], interval: int,
          intervals: int, streaming: bool, lever: Optional[str] = None) -> Dict[str, Any]:
    """`common.progress_throughput` of the trainer's defaults on `train_files`
    (with a `benchmarks.estimator_variant` lever switched, if given)."""
    with tempfile.TemporaryDirectory() as job_dir:
        cmd = taxi.taxi_cli(train_files, eval_files, job_dir,
                            *(['--max-in-memory-mb', '0'] if streaming else []),
                            *common.window_flags(interval, intervals),
                            levers=[lever] if lever else ())
        return common.progress_throughput(cmd, batch_size=128, intervals=intervals)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--source', required=True, help="The data step's training CSV.")
    parser.add_argument('--eval-files', nargs='+', required=True)
    parser.add_argument('--work-dir', required=True,
                        help='Where the generated data sets and caches are kept.')
    parser.add_argument('--sizes', default='1000000,3000000,10000000')
    parser.add_argument('--shards', type=int, default=16)
    parser.add_argument('--repeats', type=int, default=2)
    # As §3 counts: the fastest 2048-step interval of 6 after a warm-up one. The
    # 500-step intervals used before lasted ~0.2 s at today's speed, less than
    # streamed CSV takes to reach its pace.
    parser.add_argument('--interval', type=int, default=2048)
    parser.add_argument('--intervals', type=int, default=6)
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    sizes = [int(s) for s in args.sizes.split(',')]
    data: Dict[int, Dict[str, Any]] = {}
    for rows in sizes:
        files, cache_dir, seconds = _dataset(args.work_dir, args.source, rows, args.shards)
        csv_bytes = sum(os.path.getsize(f) for f in files)
        data[rows] = {'files': files, 'cache': cache_dir, 'cache_step_secs': seconds,
                      'csv_mb': csv_bytes / 2 ** 20}
        print('%d rows: %.0f MB of CSV in %d files; cache %s' % (
            rows, csv_bytes / 2 ** 20, len(files),
            'made in %.0f s' % seconds if seconds else 'reused'), flush=True)
    runs: Dict[Tuple[int, str], List[Dict[str, Any]]] = {}
    loads = common.load_mark()
    for repeat in range(args.repeats):
        for rows in (sizes if repeat % 2 == 0 else sizes[::-1]):
            variants: Dict[str, Tuple[List[str], bool, Optional[str]]] = {
                'csv': (data[rows]['files'], True, None),
                        'cache': ([data[rows]['cache']], False, None)}
            if data[rows]['csv_mb'] <= taxi_trainer.DEFAULT_MAX_IN_MEMORY_MB:
                variants['memory'] = (data[rows]['files'], False, None)
            if rows == min(sizes):
                variants['csv_shared_pool'] = (data[rows]['files'], True, 'shared_input_pool')
            for variant, (files, streaming, lever) in variants.items():
                result = train(files, args.eval_files, args.interval, args.intervals,
                               streaming, lever)
                runs.setdefault((rows, variant), []).append(result)
                print('%9d rows %-6s %8.0f rows/sec %7.0f MB peak RSS %5.1f s start-up' % (
                    rows, variant, result['examples_per_sec'], result['peak_rss_mb'],
                    result['first_line_secs']), flush=True)
    table: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for (rows, variant), values in sorted(runs.items()):
        table.setdefault(str(rows), {})[variant] = {
            'rows_per_sec': common.summarize([v['examples_per_sec'] for v in values]),
            'rows_per_cpu_sec': common.summarize([v['examples_per_cpu_sec']
                                                  for v in values]),
            'peak_rss_mb': common.summarize([v['peak_rss_mb'] for v in values]),
            'start_up_secs': common.summarize([v['first_line_secs'] for v in values])}
    small, large = str(min(sizes)), str(max(sizes))
    ratios: Dict[str, float] = {}
    for variant in ('csv', 'cache'):
        ratios['%s peak RSS %s / %s rows' % (variant, large, small)] = (
            table[large][variant]['peak_rss_mb']['median']
            / table[small][variant]['peak_rss_mb']['median'])
    # At the smallest size, on both figures: streaming against memory, and
    # streamed CSV against its shared-pool self.
    pairs = [('csv', 'csv_shared_pool')]
    if 'memory' in table[small]:
        pairs += [('csv', 'memory'), ('cache', 'memory')]
    for top, bottom in pairs:
        for figure, key in (('rows/sec', 'rows_per_sec'), ('per CPU-s', 'rows_per_cpu_sec')):
            ratios['%s / %s %s at %s rows' % (top, bottom, figure, small)] = (
                table[small][top][key]['median'] / table[small][bottom][key]['median'])
    results = {'machine': common.machine_info(), 'shards': args.shards,
               'load_average_range': common.load_since(loads), 'sizes': table,
               'data': {str(k): {'csv_mb': v['csv_mb'],
                                 'cache_step_secs': v['cache_step_secs']}
                        for k, v in data.items()},
               'ratios': ratios}
    common.print_table(
        'Taxi training as the data grows (batch 128, defaults)',
        ['rows', 'input', 'rows/sec', 'per CPU-s', 'peak RSS MB', 'start-up s'],
        [[rows, variant, '%.0f' % v['rows_per_sec']['median'],
          '%.0f' % v['rows_per_cpu_sec']['median'], '%.0f' % v['peak_rss_mb']['median'],
          '%.1f' % v['start_up_secs']['median']]
         for rows, by_variant in table.items() for variant, v in by_variant.items()])
    for name, value in ratios.items():
        print('  %s: %.2f' % (name, value))
    common.update_results('data_size', results)


if __name__ == '__main__':
    main()
