"""What `ai-platform.sh` prints: gcloud's shapes and words, from Vertex AI's resources.

Scripts written for `gcloud ai-platform` read its output: a job as `jobs
describe` showed it (`legacy_job`: ml v1's `jobId` and `state` names,
`LEGACY_STATES`), `--format yaml|json|value(FIELD,...)` (`formatted`), the
list tables, the closing lines of a submission or a deploy. The front
(`ai_platform`) hands the resources to these functions; they compute nothing
else and call nothing.
"""
import json
from typing import Any, Mapping, Sequence, TextIO

import yaml

from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import instances
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud.actions import Deployed, Json
from estimator_trainers.tools.cloud.plan import JobPlan, ServingPlan

PROG = 'bash scripts/ai-platform.sh'
# ml v1 job states, which scripts compare against (`--format='value(state)'`).
LEGACY_STATES = {
    'JOB_STATE_QUEUED': 'QUEUED', 'JOB_STATE_PENDING': 'PREPARING',
    'JOB_STATE_RUNNING': 'RUNNING', 'JOB_STATE_SUCCEEDED': 'SUCCEEDED',
    'JOB_STATE_FAILED': 'FAILED', 'JOB_STATE_CANCELLING': 'CANCELLING',
    'JOB_STATE_CANCELLED': 'CANCELLED', 'JOB_STATE_PAUSED': 'PREPARING',
    'JOB_STATE_EXPIRED': 'FAILED', 'JOB_STATE_UPDATING': 'RUNNING',
    'JOB_STATE_PARTIALLY_SUCCEEDED': 'FAILED', 'JOB_STATE_UNSPECIFIED': 'STATE_UNSPECIFIED',
}


def legacy_job(job: Json) -> Json:
    """A Vertex AI job resource in the shape `gcloud ai-platform jobs describe` printed."""
    info = jobs.parse_job_name(job.get('name', ''))
    legacy: Json = {'jobId': job.get('displayName', ''),
                    'state': LEGACY_STATES.get(job.get('state', 'JOB_STATE_UNSPECIFIED'),
                                               job.get('state'))}
    for key in ('createTime', 'startTime', 'endTime'):
        if job.get(key):
            legacy[key] = job[key]
    if job.get('error', {}).get('message'):
        legacy['errorMessage'] = job['error']['message']
    if job.get('labels'):
        legacy['labels'] = job['labels']
    best = jobs.best_trial(job)
    if best:
        legacy['bestTrial'] = best
    legacy['vertexJob'] = job.get('name', '')
    if info:
        legacy['consoleUrl'] = ('https://console.cloud.google.com/vertex-ai/locations/%s/'
                                'training/%s?project=%s' % (info['region'], info['id'],
                                                            info['project']))
    return legacy


def formatted(record: Any, fmt: str) -> str:
    """`record` as `--format` says: yaml, json, or value(FIELD,...) (tab-separated).

    Raises:
      UserInputError: another format.
    """
    if fmt == 'json':
        return json.dumps(record, indent=2) + '\n'
    if fmt == 'yaml':
        return yaml.safe_dump(record, sort_keys=False)
    if fmt.startswith('value(') and fmt.endswith(')'):
        fields = [f.strip() for f in fmt[len('value('):-1].split(',') if f.strip()]
        return '\t'.join(str(record.get(f, '')) for f in fields) + '\n'
    raise UserInputError("--format %s: expected yaml, json or value(FIELD,...)" % fmt,
                         flag='--format')


def formatted_list(records: Sequence[Json], fmt: str) -> str:
    """A list as `--format` says (value(...): one line per record)."""
    if fmt == 'json':
        return json.dumps(list(records), indent=2) + '\n'
    if fmt == 'yaml':
        return yaml.safe_dump(list(records), sort_keys=False)
    if fmt.startswith('value('):
        return ''.join(formatted(record, fmt) for record in records)
    raise UserInputError('--format %s: expected table, yaml, json or value(FIELD,...)' % fmt,
                         flag='--format')


def print_job(job: Json, fmt: str, out: TextIO) -> None:
    """`jobs describe`: `job` as gcloud's describe printed it (`legacy_job`) in `fmt`."""
    out.write(formatted(legacy_job(job), fmt))


def print_jobs(found: Sequence[Json], fmt: str, out: TextIO) -> None:
    """`jobs list`: a table of JOB_ID, STATUS, CREATED (or `fmt`)."""
    records = [legacy_job(job) for job in found]
    if fmt == 'table':
        out.write('%-40s %-12s %s\n' % ('JOB_ID', 'STATUS', 'CREATED'))
        for record in records:
            out.write('%-40s %-12s %s\n' % (record['jobId'], record['state'],
                                             record.get('createTime', '')))
        return
    out.write(formatted_list(records, fmt) if fmt.startswith('value(') else
              formatted(records, fmt))


def print_submitted(plan: JobPlan, job: Json, out: TextIO, err: TextIO,
                    fmt: str = 'yaml') -> None:
    """gcloud's closing lines, with this script's commands, and the job as gcloud showed
    it (in `fmt`: yaml, json or value(FIELD,...))."""
    err.write('Job [%s] submitted successfully (%s).\n'
              'Your job is still active. You may view the status of your job with the '
              'command\n\n  $ %s jobs describe %s\n\nor continue streaming the logs with '
              'the command\n\n  $ %s jobs stream-logs %s\n'
              % (plan.name, job['name'], PROG, plan.name, PROG, plan.name))
    out.write(formatted(legacy_job(dict(job, state=job.get('state', 'JOB_STATE_QUEUED'))),
                        fmt))
    out.flush()


def print_deployed(plan: ServingPlan, deployed: Deployed, out: TextIO, err: TextIO) -> None:
    """gcloud's closing line of versions create, with the Vertex AI names."""
    if deployed.deployed_model is None:
        err.write('Deploying version [%s] of model [%s]: Vertex AI model %s on endpoint %s '
                  '(not waited for: `versions list --model %s` shows it once deployed).\n'
                  % (plan.version, plan.model, deployed.model, deployed.endpoint, plan.model))
    else:
        err.write('Created version [%s] of model [%s]: Vertex AI model %s deployed on '
                  'endpoint %s as deployed model %s (%s, billed while deployed).\n' % (
                      plan.version, plan.model, deployed.model, deployed.endpoint,
                      deployed.deployed_model.get('id', '?'),
                      endpoints.machines_of(deployed.deployed_model)[1]))
    err.flush()


def print_models(found: Sequence[Json], project: str, region: str, out: TextIO, err: TextIO,
                 fmt: str = 'table') -> None:
    """`models list`: every endpoint of the region, its versions and the machines
    they keep; on `err`, what they cost while deployed."""
    records = [endpoints.legacy_model(e, project=project) for e in found]
    if fmt == 'table':
        out.write(instances.table(
            ['NAME', 'DEFAULT_VERSION_NAME', 'VERSIONS', 'MACHINES'],
            [[r['name'].rsplit('/', 1)[-1] + ('' if r['createdByThisTool'] else ' *'),
              r.get('defaultVersion', {}).get('name', '').rsplit('/', 1)[-1] or '-',
              str(len(r['versions'])), r['machines'] or '-'] for r in records]))
    else:
        out.write(formatted_list(records, fmt))
    nodes = sum(r['nodes'] for r in records)
    versions = sum(len(r['versions']) for r in records)
    if versions:
        err.write('%d version(s) deployed on %d model(s) in %s keep at least %d machine(s) '
                  'running, billed while deployed whether used or not; `models delete MODEL` '
                  'removes a model and its versions\n' % (
                      versions, sum(1 for r in records if r['versions']), region, nodes))
    else:
        err.write('nothing deployed in %s: no machines billed for serving\n' % region)
    if any(not r['createdByThisTool'] for r in records):
        err.write('* not created by this tool: `models delete` removes it only when named by '
                  'its resource name (`models list --format yaml` shows it as vertexEndpoint)\n')


def print_versions(endpoint: Json, models: Mapping[str, Json], project: str, fmt: str,
                   out: TextIO) -> None:
    """`versions list --model M`: gcloud's NAME, DEPLOYMENT_URI, STATE, and the machines
    (`models`: the Vertex AI models of its deployed models, by name)."""
    records = [endpoints.legacy_version(endpoint, d, models.get(d.get('model', '')), project)
               for d in endpoint.get('deployedModels') or []]
    if fmt == 'table':
        out.write(instances.table(
            ['NAME', 'DEPLOYMENT_URI', 'STATE', 'DEFAULT', 'MACHINES'],
            [[r['name'].rsplit('/', 1)[-1], r['deploymentUri'] or '-', r['state'],
              'yes' if r['isDefault'] else '', r['machines']] for r in records]))
    else:
        out.write(formatted_list(records, fmt))


def print_predictions(response: Json, out: TextIO, fmt: str) -> None:
    """`predict`: the response's predictions as gcloud printed them (`instances.render`)."""
    out.write(instances.render({'predictions': response.get('predictions', [])}, fmt))


def print_model_created(project: str, endpoint: Json, model: str, err: TextIO) -> None:
    """`models create`'s closing line."""
    err.write('Created ai platform model [projects/%s/models/%s] as Vertex AI endpoint [%s]; '
              'nothing is billed until a version is deployed on it.\n'
              % (project, model, endpoint.get('name', '?')))


def print_removed(what: str, removed: Sequence[str], err: TextIO) -> None:
    """`models delete`, `versions delete`: what was removed (`what`: `model [M]`...)."""
    err.write('Deleted %s: %s.\n' % (what, '; '.join(removed)))

