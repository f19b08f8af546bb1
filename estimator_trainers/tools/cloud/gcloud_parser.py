"""The command line of `ai-platform.sh`: gcloud's words, as `ai_platform` parses them.

The groups and commands `gcloud ai-platform` (or `gcloud ml-engine`) had:
`jobs` (submit training, describe, cancel, stream-logs, list), `local`
(train, predict), `models`, `versions` and `predict`, each with the flags
users' scripts carry; `jobs submit training`'s flags come from the
translation table (`gcloud_flags.FLAGS`). Parsing only: the front
(`ai_platform`) acts on what this parses.
"""
import argparse
from typing import Any, Callable, Dict, Optional

from estimator_trainers import flags
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import estimate
from estimator_trainers.tools.cloud import gcloud_flags
from estimator_trainers.tools.cloud import gcloud_output
from estimator_trainers.tools.cloud import instances
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import machines
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud import roles

# The parsers argparse hands out (`add_subparsers`' return value is private to it).
Subparsers = Any
# --dry-run of the verbs that look something up before they change it.
DRY_RUN_LOOKUP_HELP = ('Print the requests; change nothing. Needs no credentials: with them, '
                       'what the requests name is looked up (read); without, or offline, '
                       'placeholders name it.')

# gcloud's --verbosity values.
GCLOUD_VERBOSITIES = ('debug', 'info', 'warning', 'error', 'critical', 'none')


def arg_type(function: Callable[[str], Any]) -> Callable[[str], Any]:
    """A `gcloud` value parser as an argparse type (its ValueError is the message)."""
    def parse(text: str) -> Any:
        try:
            return function(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = function.__name__
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command `ai-platform.sh` takes."""
    parser = flags.make_parser(gcloud_output.PROG, 'Your `gcloud ai-platform` (or `gcloud '
                               'ml-engine`) command lines, on Vertex AI and on this machine.')
    groups = parser.add_subparsers(dest='group', required=True, metavar='GROUP')
    _add_jobs(groups)
    local_parser = groups.add_parser('local', help='run a package on this machine')
    local_commands = local_parser.add_subparsers(dest='command', required=True,
                                                 metavar='COMMAND')
    _add_local_train(local_commands)
    _add_local_predict(local_commands)
    _add_models(groups)
    _add_versions(groups)
    _add_predict(groups)
    return parser


def _add_jobs(groups: Subparsers) -> None:
    """`jobs submit training`, `describe`, `cancel`, `stream-logs`, `list`."""
    jobs_parser = groups.add_parser('jobs', help='submit and manage training jobs')
    commands = jobs_parser.add_subparsers(dest='command', required=True, metavar='COMMAND')
    submit = commands.add_parser('submit', help='submit a job')
    kinds = submit.add_subparsers(dest='kind', required=True, metavar='KIND')
    training = kinds.add_parser(
        'training', help='submit a training job',
        description='Submit a training job to Vertex AI, as gcloud ai-platform jobs '
                    'submit training did (docs/migrating-from-ai-platform.md).')
    _add_submit_flags(training)

    for name, text in (('describe', 'describe a job'), ('cancel', 'cancel a job'),
                       ('stream-logs', 'print a job\'s log lines until it ends')):
        command = commands.add_parser(name, help=text, description=text.capitalize() + '.')
        command.add_argument('job', metavar='JOB', help='Job name (or Vertex AI resource '
                             'name or numeric id).')
        _add_global_flags(command)
        _add_region_flag(command)
        if name == 'describe':
            command.add_argument('--format', default='yaml',
                                 help='yaml, json or value(FIELD,...).')
        if name == 'cancel':
            command.add_argument('--dry-run', action='store_true', help=DRY_RUN_LOOKUP_HELP)
        if name == 'stream-logs':
            command.add_argument('--polling-interval', type=flags.non_negative_float,
                                 default=60.0, help='Seconds between polls.')
            command.add_argument('--task-name', help='Only this replica: master-replica-0, '
                                 'worker-replica-1, ps-replica-0 (or workerpool1-0).',
                                 type=arg_type(vertex_task_name))
            command.add_argument('--allow-multiline-logs', action='store_true',
                                 help='Accepted: each entry\'s lines are printed anyway.')
    listing = commands.add_parser('list', help='list jobs')
    _add_global_flags(listing)
    _add_region_flag(listing)
    listing.add_argument('--limit', type=flags.positive_int, default=100,
                         help='Most jobs to show.')
    listing.add_argument('--page-size', type=flags.positive_int,
                         help='Accepted (pages are fetched as needed).')
    listing.add_argument('--format', default='table', help='table, yaml, json or '
                         'value(FIELD,...).')


def _add_local_train(local_commands: Subparsers) -> None:
    """`local train`: a package run on this machine (`local_cluster.run_package`)."""
    train = local_commands.add_parser(
        'train', help='run a training package locally',
        description='Run python -m MODULE from the package\'s directory, once, or with '
                    '--distributed once per task of a local TensorFlow cluster.')
    train.add_argument('--package-path', help='The package directory (its parent goes on '
                       'PYTHONPATH; default: the current directory holds the module).')
    train.add_argument('--module-name', required=True, help='Module to run (python -m).')
    train.add_argument('--job-dir', help='Passed to the module as --job-dir; task logs go '
                       'to JOB_DIR/logs with --distributed.')
    train.add_argument('--distributed', action='store_true',
                       help='Run a chief plus parameter servers, workers and evaluators.')
    for option, default, text in (
            ('--parameter-server-count', 2, 'Parameter servers'),
            ('--worker-count', 2, 'Workers besides the chief'),
            ('--evaluator-count', 0, 'Evaluators')):
        train.add_argument(option, type=flags.non_negative_int,
                           help='%s with --distributed (default %d).' % (text, default))
    train.add_argument('--start-port', type=flags.positive_int,
                       help='First port to try (default: free ports).')
    _add_global_flags(train)


def _add_global_flags(parser: argparse.ArgumentParser) -> None:
    """gcloud-wide flags that scripts carry."""
    parser.add_argument('--project', help=location.PROJECT_HELP)
    parser.add_argument('--quiet', '-q', action='store_true',
                        help='Accepted: nothing here prompts.')
    parser.add_argument('--verbosity', type=str.lower, choices=GCLOUD_VERBOSITIES,
                        help='debug also prints TensorFlow\'s and the Google '
                             'libraries\' own start-up lines and warnings, here and in '
                             'the tasks this command starts; the others are accepted '
                             '(default: one line per event).')


def _add_region_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--region', help='Region of the jobs (%s).'
                        % location.region_help(location.TRAINING))


def _add_submit_flags(parser: argparse.ArgumentParser) -> None:
    """`jobs submit training`: the translation table's flags, and this tool's own."""
    parser.add_argument('job', metavar='JOB', help=gcloud_flags.FLAG_ROWS['JOB'].help)
    for row in gcloud_flags.FLAGS:
        if not row.name.startswith('--') or row.name in ('--async', '--stream-logs'):
            continue
        kwargs: Dict[str, Any] = {'help': row.help}
        if row.switch:
            kwargs.update(action='store_const', const=True)
        elif row.parse:
            kwargs['type'] = arg_type(row.parse)
        parser.add_argument(row.name, **kwargs)
    for part in ('keyring', 'location', 'project'):
        parser.add_argument('--kms-%s' % part, help='Completes a short --kms-key id.')
    follow = parser.add_mutually_exclusive_group()
    follow.add_argument('--async', action='store_true', dest='async_',
                        help=gcloud_flags.FLAG_ROWS['--async'].help)
    follow.add_argument('--stream-logs', action='store_true',
                        help=gcloud_flags.FLAG_ROWS['--stream-logs'].help)
    _add_global_flags(parser)
    parser.add_argument('--dry-run', action='store_true',
                        help='Run the checks, print the staging plan and the exact request; '
                             'send nothing. Never runs the package\'s code.')
    parser.add_argument('--format', help='With --dry-run: json (the default: the staging '
                        'plan and the request) or yaml (the spec `gcloud ai custom-jobs create '
                        '--config`, or `gcloud ai hp-tuning-jobs create --config` for a tuning '
                        'config, takes; the command on stderr). Else how the submitted job is '
                        'printed: yaml (the default), json or value(FIELD,...).')
    parser.add_argument('--unpin', type=arg_type(gcloud_flags.package_list), default=[],
                        metavar='NAME[,NAME...]',
                        help='Let the package\'s requirements choose the version of these '
                             'distributions over this project\'s pins (constraints.txt); '
                             'not TensorFlow\'s own. --rehearse checks that the job still '
                             'runs with them.')
    parser.add_argument('--repository', default=build_lib.DEFAULT_REPOSITORY,
                        help='Artifact Registry repository for this project\'s image.')
    parser.add_argument('--poll-interval', type=flags.non_negative_float, default=30.0,
                        help='Seconds between polls with --stream-logs.')
    rehearsal.add_flags(parser)
    estimate.add_flags(parser)



def vertex_task_name(task_name: str) -> str:
    """AI Platform's `master-replica-0` (or Vertex AI's `workerpool0-0`) -> Vertex AI's."""
    parsed = roles.parse_replica(task_name)
    if not parsed:
        raise ValueError('expected a replica like master-replica-0, worker-replica-1, '
                         'ps-replica-0 or workerpool1-0, got %r' % task_name)
    return parsed[0].replica(parsed[1])



SERVING_GROUPS = ('models', 'versions', 'predict')
# versions create flags of gcloud that this tool does not carry over: the line each gets.
REFUSED_VERSION_FLAGS = {
    '--config': 'pass the version\'s fields as flags (--origin, --machine-type, --min-nodes, '
                '--max-nodes, --labels, --description)',
    '--staging-bucket': 'Vertex AI serves from Cloud Storage: copy the export there and pass '
                        'its gs:// path as --origin',
    '--prediction-class': 'custom prediction routines are not deployed by this tool (a '
                          'TensorFlow SavedModel is)',
    '--package-uris': 'custom prediction routines are not deployed by this tool (a '
                      'TensorFlow SavedModel is)',
    '--explanation-method': 'Vertex AI Explainable AI is not set up by this tool',
    '--metric-targets': 'Vertex AI scales a deployed model on CPU use (--min-nodes, '
                        '--max-nodes); targets are not set by this tool',
}


def _add_local_predict(local_commands: Subparsers) -> None:
    """`local predict`: a SavedModel's signature on this machine."""
    local = local_commands.add_parser(
        'predict', help='predict with a SavedModel on this machine',
        description='Call a SavedModel\'s serving signature on instances, as gcloud ai-platform '
                    'local predict did (and Vertex AI\'s TensorFlow image does): any export, '
                    'this project\'s trainers\' or your package\'s.')
    local.add_argument('--model-dir', required=True, type=flags.path,
                       help='The export (holding saved_model.pb), or a directory of '
                            'timestamped exports (the newest is used).')
    _add_instances_flags(local)
    local.add_argument('--signature-name', help='The signature to call (default '
                       'serving_default, else the only one).')
    local.add_argument('--framework', default='tensorflow',
                       help='tensorflow (the only one this tool serves).')
    _add_predict_format(local)
    _add_global_flags(local)


def _add_models(groups: Subparsers) -> None:
    """`models create|list|describe|delete`: Vertex AI endpoints."""
    commands = _command_group(groups, 'models', 'models: Vertex AI endpoints',
                              'AI Platform models, as Vertex AI endpoints.')
    create = commands.add_parser(
        'create', help='create a model (an empty endpoint: free until a version is deployed)',
        description='Create a model: a Vertex AI endpoint of that name, labelled as this '
                    'tool\'s. Nothing is billed until a version is deployed on it.')
    create.add_argument('model', metavar='MODEL', help='The model\'s name.')
    create.add_argument('--regions', help='One region (Vertex AI endpoints are regional).')
    create.add_argument('--description', help='Its description.')
    create.add_argument('--labels', type=arg_type(gcloud_flags.labels), default={},
                        metavar='KEY=VALUE,...', help='Labels of the endpoint.')
    create.add_argument('--enable-logging', action='store_true',
                        help='Access logs of its versions\' predictions (Vertex AI\'s '
                             'enableAccessLogging, set on each version deployed here).')
    create.add_argument('--enable-console-logging', action='store_true',
                        help='Accepted: Vertex AI sends the serving container\'s logs to '
                             'Cloud Logging anyway.')
    _add_serving_flags(create, dry_run='Print the request; send nothing.')
    listing = commands.add_parser(
        'list', help='list models, their versions and the machines they keep',
        description='Every endpoint of the region, with its default version, versions and '
                    'the machines deployed for them (billed while deployed).')
    listing.add_argument('--format', default='table', help='table, yaml or json.')
    _add_serving_flags(listing, dry_run='Print the request; send nothing (no credentials '
                                        'needed).')
    describe_model = commands.add_parser('describe', help='describe a model')
    describe_model.add_argument('model', metavar='MODEL',
                                help='The model\'s name (or its endpoint\'s resource name).')
    describe_model.add_argument('--format', default='yaml', help='yaml, json or '
                                'value(FIELD,...).')
    _add_serving_flags(describe_model)
    delete = commands.add_parser(
        'delete', help='undeploy a model\'s versions and delete it',
        description='Undeploy every version of MODEL, delete the Vertex AI models this tool '
                    'uploaded for them and its endpoint; say what was removed. An endpoint '
                    'this tool did not create is deleted only when named by its resource '
                    'name.')
    delete.add_argument('model', metavar='MODEL',
                        help='The model\'s name (or its endpoint\'s resource name).')
    _add_serving_flags(delete, dry_run=DRY_RUN_LOOKUP_HELP)


def _add_versions(groups: Subparsers) -> None:
    """`versions create|list|describe|delete|set-default`: deployed models."""
    commands = _command_group(groups, 'versions', 'versions: models deployed on an endpoint',
                              'AI Platform versions, as Vertex AI models deployed on the '
                              'model\'s endpoint.')
    _add_version_create(commands)
    for name, text in (('list', 'list a model\'s versions'),
                       ('describe', 'describe a version'),
                       ('delete', 'undeploy a version and delete its Vertex AI model'),
                       ('set-default', 'send all of a model\'s traffic to a version')):
        command = commands.add_parser(name, help=text, description=text.capitalize() + '.')
        if name != 'list':
            command.add_argument('version', metavar='VERSION', help='The version\'s name.')
        command.add_argument('--model', required=True, help='The model\'s name (or its '
                             'endpoint\'s resource name).')
        if name in ('list', 'describe'):
            command.add_argument('--format', default='table' if name == 'list' else 'yaml',
                                 help='table (list), yaml, json or value(FIELD,...).')
        _add_serving_flags(command, dry_run=DRY_RUN_LOOKUP_HELP if name == 'delete' else None)


def _add_version_create(commands: Subparsers) -> None:
    """`versions create VERSION --model --origin`: check, upload and deploy an export."""
    create = commands.add_parser(
        'create', help='upload a SavedModel and deploy it as a version',
        description='Check the export on this machine (load it, call its serving signature '
                    'on one instance), upload it to the Vertex AI Model Registry with '
                    'TensorFlow 2.15\'s prebuilt prediction image and deploy it on the '
                    'model\'s endpoint; a failure rolls back.')
    create.add_argument('version', metavar='VERSION', help='The version\'s name.')
    create.add_argument('--model', required=True, help='The model (from models create).')
    create.add_argument('--origin', required=True,
                        help='gs:// export (holding saved_model.pb), or a directory of '
                             'timestamped exports (the newest is served).')
    create.add_argument('--runtime-version', help='Accepted: says what serves instead.')
    create.add_argument('--python-version', help='Accepted: a SavedModel has no Python code.')
    create.add_argument('--framework', help='tensorflow (the only one this tool deploys).')
    create.add_argument('--machine-type', help='Each node\'s machine (default %s; '
                        'mls1-c1-m2 and mls1-c4-m2 map to n1-standard-2 and -4).'
                        % machines.PREDICTION_MACHINE_TYPE)
    create.add_argument('--accelerator', type=arg_type(gcloud_flags.accelerator),
                        metavar='count=N,type=TYPE', help='GPUs per node (the GPU image '
                        'serves then).')
    create.add_argument('--min-nodes', type=flags.non_negative_int,
                        help='Nodes kept (default 1; Vertex AI keeps at least 1).')
    create.add_argument('--max-nodes', type=flags.positive_int,
                        help='Nodes at most (default --min-nodes).')
    create.add_argument('--description', help='The Vertex AI model\'s description.')
    create.add_argument('--labels', type=arg_type(gcloud_flags.labels), default={},
                        metavar='KEY=VALUE,...', help='Labels of the Vertex AI model.')
    create.add_argument('--service-account', help='The service account the version runs as.')
    create.add_argument('--image-uri', '--image', dest='image_uri',
                        help='A serving image instead of TensorFlow 2.15\'s prebuilt '
                             'prediction image (needed after %s).'
                             % endpoints.PREDICTION_IMAGES_UNTIL)
    create.add_argument('--signature-name', help='The signature the check calls (default '
                        'serving_default).')
    create.add_argument('--check-instances', type=flags.path, metavar='FILE',
                        help='JSON instances (as --json-instances); the check calls the '
                             'signature on the first (default: one made of zeros).')
    create.add_argument('--async', action='store_true', dest='async_',
                        help='Return once the deploy started (a later failure is then not '
                             'rolled back).')
    for flag in REFUSED_VERSION_FLAGS:
        create.add_argument(flag, help='Not carried over: %s.' % REFUSED_VERSION_FLAGS[flag])
    _add_serving_flags(create, dry_run='Check the export and print the requests; send '
                                       'nothing.')


def _add_predict(groups: Subparsers) -> None:
    """`predict`: a deployed model's online predictions."""
    predict = groups.add_parser(
        'predict', help='online predictions of a deployed model',
        description='Send instances to the model\'s endpoint (:predict); Vertex AI routes '
                    'them by its traffic split (the default version).')
    predict.set_defaults(command=None)
    predict.add_argument('--model', required=True, help='The model\'s name (or its '
                         'endpoint\'s resource name).')
    predict.add_argument('--version', help='A version taking all of the model\'s traffic.')
    _add_instances_flags(predict)
    predict.add_argument('--signature-name', help='Accepted: Vertex AI\'s TensorFlow image '
                         'calls serving_default.')
    _add_predict_format(predict)
    _add_serving_flags(predict, dry_run='Print the request; send nothing.')


def _command_group(groups: Subparsers, name: str, text: str, description: str) -> Subparsers:
    """A group of commands (`models`, `versions`): its subparsers."""
    group = groups.add_parser(name, help=text, description=description)
    return group.add_subparsers(dest='command', required=True, metavar='COMMAND')


def _add_instances_flags(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(instances.JSON_INSTANCES, metavar='FILE',
                        help='One JSON instance per line (- for standard input).')
    source.add_argument(instances.TEXT_INSTANCES, metavar='FILE',
                        help='One string instance per line.')
    source.add_argument(instances.JSON_REQUEST, metavar='FILE',
                        help='A request body: {"instances": [...]}.')


def _add_predict_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--format', default='table', choices=instances.FORMATS,
                        help='table (gcloud\'s: a column per output), json or yaml.')


def _add_serving_flags(parser: argparse.ArgumentParser,
                       dry_run: Optional[str] = None) -> None:
    _add_global_flags(parser)
    parser.add_argument('--region', help='Region of the endpoints (%s; global: the same).'
                        % location.region_help(location.SERVING))
    parser.add_argument('--poll-interval', type=flags.non_negative_float, default=10.0,
                        help='Seconds between polls of an operation.')
    if dry_run:
        parser.add_argument('--dry-run', action='store_true', help=dry_run)


