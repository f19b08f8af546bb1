"""Predicts whether a taxi trip tips 20%: python -m trainer.task --train-files ... --job-dir DIR."""
import argparse

import tensorflow.compat.v1 as tf
import yaml  # a REQUIRED_PACKAGES dependency, as the sample's were

from trainer import model


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--train-files', required=True, help='CSV file(s), glob allowed.')
    parser.add_argument('--eval-files', required=True)
    parser.add_argument('--job-dir', required=True)
    parser.add_argument('--train-steps', type=int, default=100)
    parser.add_argument('--eval-steps', type=int, default=5)
    parser.add_argument('--batch-size', type=int, default=64)
    return parser.parse_args(argv)


def main():
    args = parse_args()
    tf.logging.set_verbosity(tf.logging.INFO)
    tf.logging.info('settings: %s', yaml.safe_dump(vars(args), default_flow_style=True).strip())
    config = tf.estimator.RunConfig(model_dir=args.job_dir,
                                    save_checkpoints_steps=max(1, args.train_steps // 2))
    estimator = tf.estimator.LinearClassifier(model.feature_columns(), config=config)
    train = tf.estimator.TrainSpec(model.input_fn(args.train_files, args.batch_size, True),
                                   max_steps=args.train_steps)
    evaluate = tf.estimator.EvalSpec(
        model.input_fn(args.eval_files, args.batch_size, False), steps=args.eval_steps,
        exporters=[tf.estimator.FinalExporter('taxi', model.serving_input_fn)],
        start_delay_secs=0, throttle_secs=0)
    tf.estimator.train_and_evaluate(estimator, train, evaluate)


if __name__ == '__main__':
    main()
