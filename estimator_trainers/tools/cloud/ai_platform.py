"""`bash scripts/ai-platform.sh ...`: what followed `gcloud ai-platform` (or `gcloud ml-engine`).

    ai-platform.sh jobs submit training JOB [--config FILE] [--package-path DIR --module-name M]
                   [--job-dir gs://...] [--region R] [--scale-tier T] [...]
                   [--dry-run [--format json|yaml]] [-- USER_ARGS]
    ai-platform.sh jobs describe|stream-logs JOB; jobs cancel JOB [--dry-run]
    ai-platform.sh jobs list [--limit N]
    ai-platform.sh local train --package-path DIR --module-name M [--job-dir DIR]
                   [--distributed [--parameter-server-count N] [--worker-count N]
                    [--evaluator-count N] [--start-port P]] [-- USER_ARGS]
    ai-platform.sh local predict --model-dir DIR --json-instances F|--text-instances F
    ai-platform.sh models create|describe|delete MODEL; models list
    ai-platform.sh versions create VERSION --model M --origin gs://.../export/TS [...]
    ai-platform.sh versions list|describe|delete|set-default [VERSION] --model M
    ai-platform.sh predict --model M [--version V] --json-instances F|--text-instances F

A front: it parses gcloud's words (`gcloud_parser`), turns them into a plan
and an action, hands them to a pipeline and prints what comes back as gcloud
did (`gcloud_output`); it orders no step and builds no request.

- `jobs submit training`: a `plan.JobPlan` of the translation table
  (`gcloud_flags`) and an action of the flags (`actions.training_action`: a
  submission, `--dry-run [--format yaml]`, `--rehearse`) for `pipeline.run`,
  which owns the order (checks before anything is uploaded: here the package
  builds, installs in a fresh virtualenv with its requirements named against
  this project's pins, and its module is read, never run; this project's
  image; staging; `--stream-logs`). `jobs cancel` is `pipeline.cancel`'s;
  `describe`, `stream-logs` and `list` read the jobs (`jobs`, `logs`);
  `local train` is `local_cluster.run_package`.
- The serving commands (AI Platform Prediction's, on Vertex AI's Model
  Registry and endpoints: `endpoints`): `versions create` (a
  `plan.ServingPlan`: `endpoints.version_plan`), `models create|delete|list`,
  `versions delete` and `predict` are one action each for
  `serving_pipeline.run`, which owns their order and their dry runs (the
  check of the export, upload, deploy, roll back); `describe`, `versions
  list` and `set-default` read or set the endpoint (`endpoints`); `local
  predict` loads the export with `estimator_trainers.serving` (TensorFlow is
  imported only then).

Every command finds its project and region by `location`'s rule, gcloud's
own settings included.
"""
import argparse
import functools
import os
import sys
from typing import Any, Dict, List, Optional, TextIO

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs as logs_lib
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local_cluster
from estimator_trainers.tools.cloud import actions
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import estimate
from estimator_trainers.tools.cloud import gcloud_flags
from estimator_trainers.tools.cloud import gcloud_output
from estimator_trainers.tools.cloud import gcloud_parser
from estimator_trainers.tools.cloud import instances
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import logs
from estimator_trainers.tools.cloud import pipeline
from estimator_trainers.tools.cloud import serving_pipeline
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud.backend import Backend

PROG = gcloud_output.PROG
build_parser = gcloud_parser.build_parser


def main(argv: Optional[List[str]] = None, backend: Optional[Backend] = None,
         out: Optional[TextIO] = None, err: Optional[TextIO] = None,
         environ: Optional[location.Environ] = None) -> int:
    """Runs one command; returns the exit code."""
    argv, user_args = flags.split_at_dashes(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    logs_lib.quiet_console(args.verbosity, for_children=True)
    out, err = out or sys.stdout, err or sys.stderr
    backend = backend or Backend()
    if user_args is not None and (args.group, args.command) not in (
            ('jobs', 'submit'), ('local', 'train')):
        raise UserInputError('arguments after -- go with jobs submit training or local train')
    if args.group in gcloud_parser.SERVING_GROUPS or args.group == 'local' and \
            args.command == 'predict':
        return serving_command(args, backend, out, err, environ)
    if args.group == 'local':
        local_cluster.run_package(args.package_path, args.module_name, args.job_dir,
                                  user_args or [], args.distributed,
                                  _launcher_options(args))  # it execs the module
    if args.command == 'submit':
        return submit_training(args, user_args, backend, out, err, environ)
    return job_command(args, backend, out, err, environ)


def submit_training(args: argparse.Namespace, user_args: Optional[List[str]],
                    backend: Backend, out: TextIO, err: TextIO,
                    environ: location.Environ) -> int:
    """`jobs submit training JOB`: the plan of its flags and their action, through
    the pipeline."""
    action = actions.training_action(args, functools.partial(
        gcloud_output.print_submitted, fmt=args.format or 'yaml'))
    return pipeline.run(training_plan(args, user_args, environ), action, backend, out, err,
                        environ)


def training_plan(args: argparse.Namespace, user_args: Optional[List[str]],
                  environ: location.Environ) -> plan_lib.JobPlan:
    """The `plan.JobPlan` of `jobs submit training JOB` with parsed `args`.

    Raises:
      UserInputError: a flag, the config or their combination that cannot work.
    """
    plan_lib.check_job_name(args.job)
    values = {row.name: getattr(args, row.name[2:].replace('-', '_'), None)
              for row in gcloud_flags.FLAGS if row.name.startswith('--')}
    values['--async'] = values['--stream-logs'] = None
    values['--kms-key'] = gcloud_flags.kms_key_name(args.kms_key, args.kms_keyring,
                                                    args.kms_location, args.kms_project)
    config_path = values.get('--config')
    data = configs.read_config(config_path) if config_path else None
    plan = gcloud_flags.build_plan(args.job, values, user_args, data,
                                   config_path or 'command line', environ=environ,
                                   unpinned=args.unpin)
    if plan.kms_key and gcloud_flags.kms_location(plan.kms_key) != plan.region:
        raise UserInputError('--kms-key %s: the key is in %s; Vertex AI needs it in the '
                             "job's region %s" % (plan.kms_key,
                                                  gcloud_flags.kms_location(plan.kms_key),
                                                  plan.region), flag='--kms-key')
    return plan


def job_command(args: argparse.Namespace, backend: Backend, out: TextIO, err: TextIO,
                environ: location.Environ) -> int:
    """`jobs cancel|describe|stream-logs JOB`, `jobs list`."""
    if args.command == 'cancel':
        pipeline.cancel(actions.Cancel(job=args.job, dry_run=args.dry_run, project=args.project,
                                       region_flag=args.region), backend, out, err, environ)
        if not args.dry_run:
            err.write('Cancelled job [%s].\n' % args.job)
        return 0
    vertex, credentials, name = backend_lib.connect(
        backend, getattr(args, 'job', None), args.project, args.region, environ, err)
    if args.command == 'list':
        gcloud_output.print_jobs(vertex.list(limit=args.limit), args.format, out)
        return 0
    assert name is not None, 'describe and stream-logs name a job'
    if args.command == 'describe':
        job = vertex.get(name)
        gcloud_output.print_job(job, args.format, out)
        estimate.print_cost(job, err, environ)
        return 0
    final = logs.follow_job(backend, credentials, vertex, name, args.polling_interval, out,
                            task_name=args.task_name)
    estimate.print_cost(final, err, environ)
    return 0 if final.get('state') == jobs.SUCCEEDED else 1


def _launcher_options(args: argparse.Namespace) -> List[str]:
    options = []
    for option in ('--parameter-server-count', '--worker-count', '--evaluator-count',
                   '--start-port'):
        value = getattr(args, option[2:].replace('-', '_'))
        if value is not None:
            options += [option, str(value)]
    return options


# ------------------------------------------------------------------ serving


def serving_command(args: argparse.Namespace, backend: Backend, out: TextIO, err: TextIO,
                    environ: location.Environ) -> int:
    """The serving commands: `local predict`, `models ...`, `versions ...`, `predict`."""
    if args.group == 'local':
        return local_predict(args, out)
    action = serving_action(args, err)
    if action is not None:
        return serving_pipeline.run(action, backend, out, err, environ)
    vertex = backend_lib.connect_serving(backend, args.model, args.project, args.region,
                                         environ, err)
    endpoint = endpoints.find_model(vertex, args.model)
    if args.group == 'models':  # describe
        out.write(gcloud_output.formatted(endpoints.legacy_model(
            endpoint, endpoints.models_of(vertex, endpoint.get('deployedModels') or []),
            vertex.project), args.format))
    elif args.command == 'list':
        gcloud_output.print_versions(endpoint, endpoints.models_of(
            vertex, endpoint.get('deployedModels') or []), vertex.project, args.format, out)
    elif args.command == 'describe':
        deployed = endpoints.find_version(endpoint, args.version)
        out.write(gcloud_output.formatted(endpoints.legacy_version(
            endpoint, deployed, endpoints.models_of(vertex, [deployed]).get(
                deployed.get('model', '')), vertex.project), args.format))
    else:  # set-default
        updated = endpoints.set_default(vertex, endpoint, args.version)
        err.write('Version [%s] is the default of model [%s]: it takes all of its traffic.\n'
                  % (args.version, args.model))
        out.write(gcloud_output.formatted(endpoints.legacy_version(
            updated, endpoints.find_version(updated, args.version), None, vertex.project),
            'yaml'))
    return 0


def serving_action(args: argparse.Namespace, err: TextIO
                   ) -> Optional[actions.ServingAction]:
    """The serving pipeline's action of a command, or None for a command that
    only reads or sets an endpoint (`describe`, `versions list`, `set-default`)."""
    common = dict(project=args.project, region_flag=args.region,
                  poll_interval=args.poll_interval, dry_run=getattr(args, 'dry_run', False))
    command = (args.group, args.command)
    if command == ('versions', 'create'):
        return actions.Deploy(plan=version_plan(args),
                              on_created=gcloud_output.print_deployed, **common)
    if command == ('models', 'create'):
        return create_model(args, err, common)
    if args.group == 'predict':
        return predict(args, err, common)
    if command == ('models', 'list'):
        return actions.ListModels(on_listed=functools.partial(
            gcloud_output.print_models, fmt=args.format), **common)
    if args.command == 'delete':
        version = getattr(args, 'version', None)
        what = ('version [%s] of model [%s]' % (version, args.model) if version else
                'model [%s]' % args.model)
        return actions.Remove(model=args.model, version=version, on_removed=functools.partial(
            gcloud_output.print_removed, what), **common)
    return None


def version_plan(args: argparse.Namespace) -> plan_lib.ServingPlan:
    """`versions create VERSION --model M --origin gs://...`: its `plan.ServingPlan`."""
    for flag, why in gcloud_parser.REFUSED_VERSION_FLAGS.items():
        if getattr(args, flag[2:].replace('-', '_')) is not None:
            raise UserInputError('%s: not carried over: %s' % (flag, why), flag=flag)
    check = (instances.read(instances.JSON_INSTANCES, args.check_instances,
                            instances.ONLINE_MAX_INSTANCES).values
             if args.check_instances else ())
    return endpoints.version_plan(
        args.version, args.model, args.origin, runtime_version=args.runtime_version,
        python_version=args.python_version, framework=args.framework,
        machine_type=args.machine_type, accelerator=args.accelerator,
        min_nodes=args.min_nodes, max_nodes=args.max_nodes, description=args.description,
        labels=args.labels, service_account=args.service_account, image_uri=args.image_uri,
        signature_name=args.signature_name, check_instances=check, wait=not args.async_)


def create_model(args: argparse.Namespace, err: TextIO,
                 common: Dict[str, Any]) -> actions.CreateModel:
    """`models create MODEL`: an endpoint of that name (free until a version is deployed)."""
    plan_lib.check_serving_name(args.model, 'MODEL')
    if args.regions and ',' in args.regions:
        raise UserInputError('--regions %s: Vertex AI endpoints are regional; give one region'
                             % args.regions, flag='--regions')
    if args.labels:
        configs.check_labels(args.labels)
    if args.enable_console_logging:
        err.write('note: --enable-console-logging: Vertex AI sends the serving container\'s '
                  'logs to Cloud Logging by default\n')
    return actions.CreateModel(
        model=args.model, description=args.description, labels=args.labels,
        access_logging=args.enable_logging,
        on_created=lambda project, endpoint, err: gcloud_output.print_model_created(
            project, endpoint, args.model, err),
        **dict(common, region_flag=args.region or args.regions))


def predict(args: argparse.Namespace, err: TextIO, common: Dict[str, Any]) -> actions.Predict:
    """`predict --model M [--version V]`: the endpoint's :predict, printed as gcloud did."""
    read = _instances_of(args, instances.ONLINE_MAX_INSTANCES)
    if args.signature_name:
        err.write('note: --signature-name %s: not sent; Vertex AI\'s TensorFlow image calls '
                  'serving_default (`local predict --signature-name` calls others)\n'
                  % args.signature_name)
    return actions.Predict(model=args.model, version=args.version, instances=read.values,
                           on_predicted=functools.partial(gcloud_output.print_predictions,
                                                          fmt=args.format), **common)


def local_predict(args: argparse.Namespace, out: TextIO) -> int:
    """`local predict`: the export's signature on the instances, printed as gcloud did."""
    if args.framework.lower() != 'tensorflow':
        raise UserInputError('--framework %s: this tool serves TensorFlow SavedModels '
                             '(--framework tensorflow)' % args.framework, flag='--framework')
    read = _instances_of(args)
    # The instances are read without TensorFlow; the export needs it.
    logs_lib.import_tensorflow()
    from estimator_trainers import serving  # pylint: disable=import-outside-toplevel
    signature = serving.load(serving.find_export(args.model_dir), args.signature_name)
    predictions = signature.predict(list(read.values), read.where)
    out.write(instances.render({'predictions': predictions}, args.format))
    return 0


def _instances_of(args: argparse.Namespace, limit: Optional[int] = None) -> instances.Instances:
    for flag in instances.FLAGS:
        path = getattr(args, flag[2:].replace('-', '_'))
        if path is not None:
            return instances.read(flag, path, limit)
    raise UserInputError('one of %s is required' % ', '.join(instances.FLAGS))


if __name__ == '__main__':
    logs_lib.quiet_console(flags.verbosity_in(sys.argv[1:]), for_children=True)
    errors.run_cli(main)
