"""A Vertex-native way out: a job as the file Google's own `gcloud ai` commands take.

`jobs submit training ... --dry-run --format yaml` (and `train-cloud.sh submit
--dry-run --format yaml`) prints, instead of the staging plan and the request,
the `--config` file of

- `gcloud ai custom-jobs create`: the request's `jobSpec` (a CustomJobSpec);
  the job's display name, labels and KMS key are that command's flags;
- `gcloud ai hp-tuning-jobs create` (a config with hyperparameters): the
  HyperparameterTuningJob without its display name, which is a flag there.

`command` is the line that creates the job from it: gcloud then sends the
request this project would have sent (tests/test_gcloud_reference.py checks
that against the real gcloud). What the spec names must exist first: the
archives and this project's image a dry run does not upload or build.
"""
import dataclasses
from typing import Any, Mapping

import yaml

from estimator_trainers.tools.cloud.plan import CUSTOM_JOBS, TUNING_JOBS, Collection

# The file name the printed command reads the spec from.
SPEC_FILE = 'spec.yaml'
GROUPS = {CUSTOM_JOBS: 'custom-jobs', TUNING_JOBS: 'hp-tuning-jobs'}


@dataclasses.dataclass(frozen=True)
class Spec:
    """The `--config` file's text and the gcloud command line that takes it."""
    text: str
    command: tuple[str, ...]


def spec(body: Mapping[str, Any], collection: Collection, project: str, region: str,
         path: str = SPEC_FILE) -> Spec:
    """The `--config` file of a create `body` of `collection`, and the command
    that creates the job from the file at `path`."""
    command = ['gcloud', 'ai', GROUPS[collection], 'create', '--project=%s' % project,
               '--region=%s' % region, '--display-name=%s' % body['displayName'],
               '--config=%s' % path]
    if collection == CUSTOM_JOBS:
        config = dict(body['jobSpec'])
        if body.get('labels'):
            command.append('--labels=%s' % ','.join(
                '%s=%s' % item for item in sorted(body['labels'].items())))
        if body.get('encryptionSpec'):
            command.append('--kms-key=%s' % body['encryptionSpec']['kmsKeyName'])
    else:
        config = {key: value for key, value in body.items() if key != 'displayName'}
    return Spec(yaml.safe_dump(config, sort_keys=False), tuple(command))
