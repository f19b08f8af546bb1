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

from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import roles

PORT = 2222


def manifest(plan):
    """The TFJob (kubeflow.org/v1) of `plan`, as a dict.

    Raises:
      UserInputError: a pool without an image (`--image-uri`), or a tuning
        config (use Vertex AI).
    """
    if any(plan.image_for(pool.role) is None for pool in plan.config.pools):
        raise UserInputError('--target tfjob needs --image-uri (a container built '
                             'from Dockerfile and pushed where the cluster can pull it)')
    if plan.config.is_tuning:
        raise UserInputError('%s: hyperparameter tuning runs on Vertex AI only; drop '
                             '--target tfjob' % plan.config.source)
    replicas = {}
    for pool in plan.config.pools:
        launch = plan.launch(pool.role)
        container = {'name': 'tensorflow',  # the container name the operator looks for
                     'image': launch.image}
        if launch.command:
            container['command'] = list(launch.command)
        container.update(args=list(launch.args),
                         ports=[{'name': 'tfjob-port', 'containerPort': PORT}])
        if pool.accelerator_count:
            container['resources'] = {'limits': {'nvidia.com/gpu': pool.accelerator_count}}
        replicas[roles.role(pool.role).kubernetes] = {
            'replicas': pool.replica_count,
            'restartPolicy': 'OnFailure',
            'template': {'spec': {'containers': [container]}},
        }
    metadata = {'name': k8s_name(plan.name)}
    if plan.config.labels:
        metadata['labels'] = dict(plan.config.labels)
    return {
        'apiVersion': 'kubeflow.org/v1',
        'kind': 'TFJob',
        'metadata': metadata,
        # Parameter servers never exit on their own: remove running pods once
        # the chief has finished.
        'spec': {'runPolicy': {'cleanPodPolicy': 'Running'}, 'tfReplicaSpecs': replicas},
    }


def render(plan):
    """The manifest as YAML, ready for `kubectl apply -f -`."""
    return yaml.safe_dump(manifest(plan), sort_keys=False)


def k8s_name(job_name):
    """A job name as a Kubernetes object name (lowercase, dashes, <= 63 chars)."""
    return job_name.lower().replace('_', '-')[:63].rstrip('-')
