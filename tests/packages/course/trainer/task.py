"""Trains the course model: python -m trainer.task --job-dir DIR [--train-steps N]."""
import argparse

import tensorflow.compat.v1 as tf

from trainer import model


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--job-dir', required=True, help='Checkpoints and exports.')
    parser.add_argument('--train-steps', type=int, default=100)
    parser.add_argument('--eval-steps', type=int, default=5)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--learning-rate', type=float, default=0.05)
    parser.add_argument('--hidden-units', default='8,4')
    return parser.parse_args(argv)


def main():
    args = parse_args()
    tf.logging.set_verbosity(tf.logging.INFO)
    estimator = model.estimator(args.job_dir, [int(u) for u in args.hidden_units.split(',')],
                                args.learning_rate, checkpoint_steps=max(1, args.train_steps // 2))
    train = tf.estimator.TrainSpec(model.input_fn(512, 1, args.batch_size, repeat=True),
                                   max_steps=args.train_steps)
    evaluate = tf.estimator.EvalSpec(
        model.input_fn(128, 2, args.batch_size, repeat=False), steps=args.eval_steps,
        exporters=[tf.estimator.LatestExporter('exporter', model.serving_input_fn)],
        start_delay_secs=0, throttle_secs=0)
    tf.estimator.train_and_evaluate(estimator, train, evaluate)


if __name__ == '__main__':
    main()
