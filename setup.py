"""Packaging for estimator-trainers.

`python setup.py sdist` makes the archive that `gcloud ... --package-path` or a
Vertex AI `pythonPackageSpec.packageUris` installs on every task of a job. It
carries the runtime (`estimator_trainers`), its tools and every trainer package.
"""
import os
import sys

import setuptools

# TensorFlow 2.15.1, the last release with tf.estimator, has wheels for Python
# 3.9-3.11, and the pinned Google client libraries have none for 3.9: 3.10 and
# 3.11 remain. Development uses 3.11 (scripts/setup-venv.sh); the prebuilt
# Vertex AI TF 2.15 images run 3.10 and install this package as an sdist.
if not (3, 10) <= sys.version_info[:2] <= (3, 11):
    sys.exit('estimator-trainers needs Python 3.10 or 3.11: TensorFlow 2.15.1 (the '
             'last release with tf.estimator) and its pinned dependencies have no '
             'wheels for Python %d.%d.' % sys.version_info[:2])

_HERE = os.path.dirname(os.path.abspath(__file__))


def _requirements():
    """Reads the runtime pins from requirements.txt (one place for them)."""
    with open(os.path.join(_HERE, 'requirements.txt')) as f:
        return [line.strip() for line in f
                if line.strip() and not line.startswith(('#', '-'))]


setuptools.setup(
    name='estimator-trainers',
    version='0.1.0',
    description='TensorFlow Estimator trainers (CIFAR-10 ResNet, Chicago Taxi '
                'wide-and-deep) that run locally, on a local cluster and on '
                'Google Cloud.',
    python_requires='>=3.10,<3.12',
    # Every package of the repository: the runtime, its tools and each trainer
    # package (trainers are discovered, so a new one ships without an edit here).
    packages=setuptools.find_packages(exclude=['tests', 'tests.*', 'benchmarks',
                                               'benchmarks.*']),
    install_requires=_requirements(),
    extras_require={'gpu': ['tensorflow[and-cuda]==2.15.1']},
    include_package_data=True,
)
