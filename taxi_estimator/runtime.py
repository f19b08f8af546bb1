"""What a taxi training task does with TensorFlow (declared in `trainer`).

Scans every CSV before the job-dir is touched, resolves the normalisation
statistics (the job-dir keeps the ones it started with), and builds the
wide-and-deep estimator (`model`), the CSV input functions (`input`) and the
serving signature of `--serving-export-format`.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Callable, Sequence, Tuple

import tensorflow as tf

from estimator_trainers import declaration
from taxi_estimator import features
from taxi_estimator import input as input_lib
from taxi_estimator import model
from taxi_estimator import trainer

# Deep-side inputs: z-scored numbers, one-hot payment type, company embedding
# (an upper bound); a parsed CSV row with its strings.
_DEEP_INPUT_WIDTH = 64
_ROW_BYTES = 2048


def memory_estimate(hidden_units: Sequence[int]) -> declaration.MemoryEstimate:
    """Rough training memory of the DNN side (`declaration.MemoryEstimate`).

    Per example: each layer's pre-activation, activation, dropout mask and
    gradient in float32, plus the parsed row. Fixed: weights with their
    gradient and Adam's two slots. The wide side's sparse weights are small.
    """
    widths = [_DEEP_INPUT_WIDTH] + list(hidden_units) + [1]
    weights = sum(a * b + b for a, b in zip(widths, widths[1:]))
    return declaration.MemoryEstimate(
        fixed_bytes=4 * 4 * weights, bytes_per_example=4 * 4 * sum(hidden_units) + _ROW_BYTES)


@dataclasses.dataclass(frozen=True)
class _Facts:
    """What the input scan found, for the later steps of a run."""
    train_data: input_lib.DataSummary
    eval_data: input_lib.DataSummary
    stats: features.Stats
    recorded: bool
    hidden_units: Tuple[int, ...]
    replica_batch: int


class TaxiRuntime(declaration.Runtime[_Facts]):
    """Wide-and-deep classifier of Chicago taxi tips (tip >= 20% of the fare)."""

    def check(self, args: argparse.Namespace, task: declaration.Task) -> declaration.Plan[_Facts]:
        log = tf.compat.v1.logging
        replica_batch: int = task.replica_batch(args.batch_size, '--batch-size')
        # Examples one global step consumes: synchronous replicas each take a batch.
        distribution = task.distribution
        global_batch = replica_batch * distribution.replicas_in_sync
        hidden_units = trainer.layer_sizes(args.hidden_units, args.layer_sizes_scale_factor,
                                           args.num_layers)
        train_data = input_lib.scan(args.train_files, '--train-files')
        eval_data = input_lib.scan(args.eval_files, '--eval-files')
        log.info('Training data: %d rows in %d file(s); eval data: %d rows in %d file(s)',
                 train_data.rows, len(train_data.files), eval_data.rows,
                 len(eval_data.files))
        stats, recorded = features.resolve_stats(args.job_dir, train_data.stats,
                                                 args.feature_stats)
        train_steps = args.train_steps or model.steps_for_epochs(
            args.num_epochs, args.train_size or train_data.rows, global_batch)
        log.info('Step target %d (%s); DNN layers %s', train_steps,
                 'from --train-steps' if args.train_steps else
                 '%d epochs of %d rows, %d examples per global step' % (
                     args.num_epochs, args.train_size or train_data.rows, global_batch),
                 ','.join(map(str, hidden_units)))
        for column in sorted(stats):
            log.debug('Normalisation of %s: mean %.6g, std %.6g', column,
                     stats[column]['mean'], stats[column]['std'])
        return declaration.Plan(
            train_steps=train_steps, examples_per_step=args.batch_size,
            facts=_Facts(train_data, eval_data, stats, recorded, hidden_units, replica_batch),
            train_examples=train_data.rows, batch_flag='--batch-size',
            memory=memory_estimate(hidden_units))

    def prepare_job_dir(self, args: argparse.Namespace, task: declaration.Task,
                        plan: declaration.Plan[_Facts]) -> None:
        facts = plan.facts
        if not facts.recorded:
            features.record_stats(args.job_dir, facts.stats)

    def estimator(self, args: argparse.Namespace, task: declaration.Task,
                  plan: declaration.Plan[_Facts],
                  run_config: tf.estimator.RunConfig) -> tf.estimator.Estimator:
        facts = plan.facts
        hparams = model.HParams(
            hidden_units=facts.hidden_units, learning_rate=args.learning_rate,
            linear_learning_rate=args.linear_learning_rate,
            learning_rate_decay_factor=args.learning_rate_decay_factor,
            decay_steps=plan.train_steps, dropout=args.dropout_prob)
        return model.build_estimator(run_config, facts.stats, hparams)

    def input_fns(self, args: argparse.Namespace, task: declaration.Task,
                  plan: declaration.Plan[_Facts]) -> Tuple[input_lib.InputFn, input_lib.InputFn]:
        facts = plan.facts
        cluster = task.cluster
        train = input_lib.make_input_fn(facts.train_data.files, facts.replica_batch,
                                        training=True,
                                        seed=cluster.input_seed(args.random_seed),
                                        in_memory_mb=args.max_in_memory_mb,
                                        rows=facts.train_data.rows)
        evaluate = input_lib.make_input_fn(facts.eval_data.files, args.batch_size,
                                           training=False)
        return train, evaluate

    def serving_input_receiver_fn(
            self, args: argparse.Namespace, plan: declaration.Plan[_Facts]
    ) -> Callable[[], tf.estimator.export.ServingInputReceiver]:
        return input_lib.SERVING_INPUT_FNS[args.serving_export_format]


RUNTIME = TaxiRuntime()
