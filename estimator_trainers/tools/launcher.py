"""A TensorFlow cluster on this machine: one OS process per task.

    python -m estimator_trainers.tools.launcher --job-dir DIR \\
        [--parameter-server-count 2] [--worker-count 2] [--evaluator-count 0] \\
        [--start-port PORT] [--max-restarts 0] \\
        -- python -m cifar10_estimator.cifar10_main --job-dir DIR ...

Like `gcloud ai-platform local train --distributed`: a `chief`, `--worker-count`
workers, `--parameter-server-count` parameter servers and `--evaluator-count`
evaluators (outside `cluster`, as on Vertex AI; with evaluators every
TF_CONFIG says `"job": {"evaluatorCount": N}` as AI Platform's did, so the
chief leaves evaluation to them) each run the same command with their own
`TF_CONFIG`, addressed on free ports of 127.0.0.1. Every line a task
prints goes to the console prefixed with its role (`[worker-1] ...`) and to
`<job-dir>/logs/<role>-<i>.log`.

This module is the command line only: it parses the flags into a
`local_cluster.LaunchOptions` and calls `local_cluster.launch`, where the
cluster is made, started and stopped (and which the cloud rehearsal and
`tools/local.py` use).

The lifecycle (the chief's end ends the job, restarts with
`--max-restarts`, the stop order on SIGTERM, Ctrl-C or SIGHUP with
`--stop-timeout-secs`, the refusals before anything starts) is
`local_cluster`'s; its docstring says it.

Network (`--network`): TensorFlow's gRPC servers are unauthenticated, run
any graph sent to them and listen on all interfaces. By default (`auto`) the
launcher moves itself, and so every task, into a private network namespace
with only loopback (`private_network`), where nothing outside this machine
can reach them. That namespace has no other network, so when the command or
--job-dir names a remote path (gs://...), or the kernel does not allow
namespaces, `auto` shares this machine's network instead and says so in one
warning line: then run it only where the task ports are not reachable from
untrusted networks (docs/reliability.md). `private` insists on the namespace,
`host` never uses one.
"""
import argparse
import sys
from typing import Optional, Sequence

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers.tools import local_cluster


def parse_args(argv: Optional[Sequence[str]] = None
               ) -> tuple[local_cluster.LaunchOptions, list[str]]:
    """The launch options and the task command of a command line (usage errors exit 2)."""
    argv, command = flags.split_at_dashes(sys.argv[1:] if argv is None else argv)
    command = command or []
    parser = flags.make_parser(
        'python -m estimator_trainers.tools.launcher',
        'Run COMMAND as every task of a TensorFlow cluster on this machine, one '
        'process per task with its own TF_CONFIG, like gcloud ai-platform local '
        'train --distributed. Usage: ... [options] -- COMMAND [ARGS...]')
    parser.add_argument('--job-dir', type=flags.path, required=True,
                        help='The trainer\'s --job-dir; task logs go to '
                             '<job-dir>/logs/<role>-<i>.log.')
    parser.add_argument('--log-dir', type=flags.path, default=None,
                        help='Local directory for the task logs instead of '
                             '<job-dir>/logs (needed when --job-dir is gs://).')
    parser.add_argument('--parameter-server-count', type=flags.non_negative_int,
                        default=2, help='Parameter server tasks (ps).')
    parser.add_argument('--worker-count', type=flags.non_negative_int, default=2,
                        help='Worker tasks besides the chief.')
    parser.add_argument('--evaluator-count', type=flags.non_negative_int, default=0,
                        help='Evaluator tasks (outside the training cluster).')
    parser.add_argument('--start-port', type=_port, default=None,
                        help='Use the first free ports from this one upwards '
                             '(default: ports the kernel picks).')
    parser.add_argument('--max-restarts', type=flags.non_negative_int, default=0,
                        help='Times each failed chief/worker/evaluator is started '
                             'again with the same TF_CONFIG before the job fails.')
    parser.add_argument('--shutdown-grace-secs', type=flags.non_negative_int,
                        default=120,
                        help='After the chief finishes, seconds workers and '
                             'evaluators get to end on their own before being stopped.')
    parser.add_argument('--stop-timeout-secs', type=flags.positive_int, default=30,
                        help='Seconds a stopped task gets after SIGTERM before SIGKILL '
                             '(a safety net: a task ends by itself within 25 s of '
                             'SIGTERM, a chief after saving its checkpoint).')
    parser.add_argument('--network', choices=local_cluster.NETWORK_MODES, default='auto',
                        help='private: run the tasks in a network namespace of their '
                             'own, unreachable from other hosts (Linux; no gs:// or '
                             'other network access); host: share this machine\'s '
                             'network, where the unauthenticated gRPC ports listen on '
                             'all interfaces; auto: private unless a remote path is '
                             'named or the kernel refuses, with a warning then.')
    args = parser.parse_args(argv)
    if not command:
        parser.error('missing the task command after "--"')
    log_dir = args.log_dir or job_dir_lib.logs_dir(args.job_dir)
    if '://' in log_dir:
        parser.error('task logs need a local directory; --job-dir %s is remote, so '
                     'pass --log-dir' % args.job_dir)
    options = local_cluster.LaunchOptions(
        job_dir=args.job_dir, log_dir=log_dir,
        parameter_server_count=args.parameter_server_count,
        worker_count=args.worker_count, evaluator_count=args.evaluator_count,
        start_port=args.start_port, max_restarts=args.max_restarts,
        shutdown_grace_secs=args.shutdown_grace_secs,
        stop_timeout_secs=args.stop_timeout_secs, network=args.network)
    return options, command


def _port(text: str) -> int:
    """argparse type: a TCP port number."""
    value: int = flags.positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError('expected a port number <= 65535, got %r' % text)
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses the command line and runs the cluster; returns its exit code."""
    options, command = parse_args(argv)
    return local_cluster.launch(command, options)


if __name__ == '__main__':
    errors.run_cli(main)
