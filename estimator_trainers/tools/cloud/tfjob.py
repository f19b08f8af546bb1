"""Kubeflow `TFJob` manifest for users who train on Kubernetes.

The Kubeflow training operator starts one pod per replica and sets
`TF_CONFIG` with lowercase `chief`/`worker`/`ps` keys on port 2222 (the
evaluator outside `cluster`), which the trainers read like Vertex AI's.
Pods run the custom container (Dockerfile) with `python -m <trainer>`;
the config's GPUs become `nvidia.com/gpu` limits. Compute Engine machine
types have no Kubernetes meaning: choose nodes with your cluster's own
node selectors.
"""
import yaml

from estimator_trainers.tools.cloud import configs
from estimator_trainers.errors import UserInputError

PORT = 2222
_REPLICA_TYPES = {configs.CHIEF: 'Chief', configs.WORKER: 'Worker',
                  configs.PS: 'PS', configs.EVALUATOR: 'Evaluator'}


def manifest(submission):
    """The TFJob (kubeflow.org/v1) for `submission`, as a dict.

    Raises:
      UserInputError: no `--image-uri`, or a tuning config (use Vertex AI).
    """
    if not submission.image_uri:
        raise UserInputError('--target tfjob needs --image-uri (a container built '
                             'from Dockerfile and pushed where the cluster can pull it)')
    if submission.config.is_tuning:
        raise UserInputError('%s: hyperparameter tuning runs on Vertex AI only; drop '
                             '--target tfjob' % submission.config.source)
    args = submission.trainer_args(job_dir_flag=True)
    replicas = {}
    for pool in submission.config.pools:
        container = {
            'name': 'tensorflow',  # the container name the operator looks for
            'image': submission.image_uri,
            'command': ['python', '-m', submission.trainer.module],
            'args': list(args),
            'ports': [{'name': 'tfjob-port', 'containerPort': PORT}],
        }
        if pool.accelerator_count:
            container['resources'] = {'limits': {'nvidia.com/gpu': pool.accelerator_count}}
        replicas[_REPLICA_TYPES[pool.role]] = {
            'replicas': pool.replica_count,
            'restartPolicy': 'OnFailure',
            'template': {'spec': {'containers': [container]}},
        }
    metadata = {'name': k8s_name(submission.job_name)}
    if submission.config.labels:
        metadata['labels'] = dict(submission.config.labels)
    return {
        'apiVersion': 'kubeflow.org/v1',
        'kind': 'TFJob',
        'metadata': metadata,
        # Parameter servers never exit on their own: remove running pods once
        # the chief has finished.
        'spec': {'runPolicy': {'cleanPodPolicy': 'Running'}, 'tfReplicaSpecs': replicas},
    }


def render(submission):
    """The manifest as YAML, ready for `kubectl apply -f -`."""
    return yaml.safe_dump(manifest(submission), sort_keys=False)


def k8s_name(job_name):
    """A job name as a Kubernetes object name (lowercase, dashes, <= 63 chars)."""
    return job_name.lower().replace('_', '-')[:63].rstrip('-')
