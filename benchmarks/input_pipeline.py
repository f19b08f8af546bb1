"""Benchmark 2: examples/sec the input_fns deliver with no model attached.

Pulls batches of 128 from the trainers' own training datasets
(`cifar10_estimator.data.make_dataset`, `taxi_estimator.input.make_input_fn`)
inside a `tf.function` loop, after a warm-up that fills the caches, and
compares that with what training consumes (the trainers' default steady-state
rates from benchmarks 1 and 3 in results.json). Alternatives that were
measured and dropped run alongside, to show why:
- CIFAR `per_example`: parse and augment each image before batching (the
  reference tutorial's pipeline) instead of once per batch;
- CIFAR `decoded_cache`: cache decoded uint8 images instead of the records;
- taxi `csv_dataset`: `CsvDataset` row by row (the trainer's first pipeline)
  instead of text lines parsed a batch at a time;
- taxi `streaming`: the text-line pipeline as used for files too large to
  hold in memory (a row-by-row shuffle buffer instead of whole-epoch
  permutations of the cached lines).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks import common

common.quiet_tensorflow()
# pylint: disable=g-import-not-at-top,wrong-import-position,protected-access
import tensorflow as tf

from cifar10_estimator import data
from cifar10_estimator import layout
from taxi_estimator import input as input_lib
from taxi_estimator import schema

BATCH = 128


def _cifar_default(data_dir: str, count: int) -> tf.data.Dataset:
    return data.make_dataset(data_dir, 'train', BATCH, distort=True, repeat=True,
                             shuffle=True, count=count)


def _cifar_per_example(data_dir: str, count: int) -> tf.data.Dataset:

    def parse(serialized: tf.Tensor) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
        images, labels = data._parse_batch(serialized[None])
        image = tf.image.resize_with_crop_or_pad(images[0], 40, 40)
        image = tf.image.random_flip_left_right(tf.image.random_crop(image, [32, 32, 3]))
        return {'images': image}, labels[0]
    dataset = tf.data.TFRecordDataset(layout.subset_path(data_dir, 'train')).cache()
    dataset = dataset.shuffle(count).repeat()
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _cifar_decoded_cache(data_dir: str, count: int) -> tf.data.Dataset:

    def decode(serialized: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        images, labels = data._parse_batch(serialized)
        return tf.cast(images, tf.uint8), labels

    def augment(index: tf.Tensor, batch: Tuple[tf.Tensor, tf.Tensor]
                ) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
        images, labels = batch
        seed = tf.stack([tf.constant(0, tf.int64), index])
        return {'images': data.distort_batch(tf.cast(images, tf.float32), seed)}, labels
    dataset = tf.data.TFRecordDataset(layout.subset_path(data_dir, 'train')).batch(1000)
    dataset = dataset.map(decode).unbatch().cache().shuffle(count).repeat()
    dataset = dataset.batch(BATCH, drop_remainder=True).enumerate()
    return dataset.map(augment, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE)


def _taxi_default(files: Sequence[str], streaming: bool = False) -> tf.data.Dataset:
    if streaming:
        return input_lib.make_input_fn(files, BATCH, training=True, in_memory_mb=0)()
    return input_lib.make_input_fn(files, BATCH, training=True)()


def _taxi_csv_dataset(files: Sequence[str]) -> tf.data.Dataset:
    defaults = [input_lib._csv_default(c) for c in schema.COLUMNS]
    dataset = tf.data.Dataset.from_tensor_slices(files).repeat().interleave(
        lambda f: tf.data.experimental.CsvDataset(f, defaults, header=True),
        cycle_length=1, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.shuffle(input_lib.SHUFFLE_ROWS).batch(BATCH)
    dataset = dataset.map(input_lib._features_and_label,
                          num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def delivered(dataset: tf.data.Dataset, batches: int, warmup: int) -> Tuple[float, float]:
    """Pulls `batches` batches in a graph loop after `warmup` ones; returns
    (examples/sec, examples per CPU-second of this process)."""
    iterator = iter(dataset)

    @tf.function  # type: ignore[untyped-decorator]  # TensorFlow is untyped
    def pull(n: tf.Tensor) -> None:
        for _ in tf.range(n):
            next(iterator)
    pull(tf.constant(warmup))
    common.sample_load(force=True)
    start, start_cpu = time.perf_counter(), time.process_time()
    pull(tf.constant(batches))
    examples = batches * BATCH
    common.sample_load(force=True)
    return (examples / (time.perf_counter() - start),
            examples / (time.process_time() - start_cpu))


def _consumed() -> Dict[str, Dict[str, Any]]:
    """Training's default steady-state examples/sec from results.json, if measured."""
    consumed = {}
    if os.path.exists(common.RESULTS_JSON):
        with open(common.RESULTS_JSON) as f:
            results = json.load(f)
        depths = results.get('resnet_throughput', {}).get('depths', {})
        for depth in ('44', '20', '56'):
            if 'estimator' in depths.get(depth, {}).get('variants', {}):
                consumed['cifar10'] = _consumption(
                    'ResNet-%s cifar10_main defaults' % depth,
                    depths[depth]['variants']['estimator'])
                break
        taxi = results.get('taxi', {}).get('variants', {}).get('estimator')
        if taxi:
            consumed['taxi'] = _consumption('taxi_estimator.task defaults', taxi)
    return consumed


def _consumption(what: str, summary: Dict[str, Any]) -> Dict[str, Any]:
    consumed: Dict[str, Any] = {'what': what, 'examples_per_sec': summary['median']}
    if 'per_cpu_second' in summary:
        consumed['examples_per_cpu_sec'] = summary['per_cpu_second']['median']
    return consumed


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cifar-data-dir', required=True)
    parser.add_argument('--taxi-train-files', nargs='+', required=True)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--seconds', type=float, default=3.0,
                        help='Rough measuring time per run (sets the batch count).')
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    count = data.read_metadata(args.cifar_data_dir)['train']
    pipelines: Dict[Tuple[str, str], Callable[[], tf.data.Dataset]] = {
        ('cifar10', 'default'): lambda: _cifar_default(args.cifar_data_dir, count),
        ('cifar10', 'per_example'): lambda: _cifar_per_example(args.cifar_data_dir, count),
        ('cifar10', 'decoded_cache'): lambda: _cifar_decoded_cache(args.cifar_data_dir,
                                                                   count),
        ('taxi', 'default'): lambda: _taxi_default(args.taxi_train_files),
        ('taxi', 'streaming'): lambda: _taxi_default(args.taxi_train_files,
                                                     streaming=True),
        ('taxi', 'csv_dataset'): lambda: _taxi_csv_dataset(args.taxi_train_files),
    }
    # Batch counts sized from a short probe, so each run takes about --seconds.
    batches = {key: max(20, int(args.seconds * delivered(make(), 20, 40)[0] / BATCH))
               for key, make in pipelines.items()}
    runs: Dict[Tuple[str, str], List[Tuple[float, float]]] = {key: [] for key in pipelines}
    keys = list(pipelines)
    loads = common.load_mark()
    for repeat in range(args.repeats):
        for key in (keys if repeat % 2 == 0 else keys[::-1]):
            runs[key].append(delivered(pipelines[key](), batches[key],
                                       warmup=max(40, batches[key] // 10)))
    consumed = _consumed()
    results: Dict[str, Any] = {'machine': common.machine_info(), 'batch_size': BATCH,
                               'load_average_range': common.load_since(loads),
                               'consumed_by_training': consumed, 'pipelines': {}}
    rows = []
    for (model, variant), values in runs.items():
        summary = common.summarize([wall for wall, _ in values])
        summary['per_cpu_second'] = common.summarize([cpu for _, cpu in values])
        if model in consumed:
            summary['times_training'] = (summary['median']
                                         / consumed[model]['examples_per_sec'])
            if 'examples_per_cpu_sec' in consumed[model]:
                # CPU-seconds of training per CPU-second of the pipeline: robust to load.
                summary['times_training_per_cpu_second'] = (
                    summary['per_cpu_second']['median']
                    / consumed[model]['examples_per_cpu_sec'])
        results['pipelines']['%s/%s' % (model, variant)] = summary
        rows.append(['%s/%s' % (model, variant), '%.0f' % summary['median'],
                     '%.0f' % summary['min'], '%.0f' % summary['max'],
                     '%.0f' % summary['per_cpu_second']['median'],
                     '%.1fx' % summary['times_training'] if 'times_training' in summary
                     else 'n/a'])
    common.print_table('Input pipelines alone: examples/sec (batch %d)' % BATCH,
                       ['pipeline', 'median', 'min', 'max', 'per CPU-s', 'x training'],
                       rows)
    for model, what in consumed.items():
        print('  training consumes %.0f examples/sec (%s)'
              % (what['examples_per_sec'], what['what']))
    common.update_results('input_pipeline', results)


if __name__ == '__main__':
    main()
