# Custom training container for Vertex AI (--image-uri) and Kubeflow TFJob:
# Python 3.11, TensorFlow 2.15.1 and this package. Build from the repo root:
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/estimator-trainers:cpu .
#   docker build --build-arg VARIANT=gpu -t .../estimator-trainers:gpu .
# Vertex AI and TFJob run `python -m <trainer module>` as the command; a plain
# `docker run IMAGE --data-dir ... --job-dir ...` runs $TRAINER_MODULE.
FROM python:3.11-slim

ARG VARIANT=cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/opt/estimator-trainers/constraints.txt \
    TRAINER_MODULE=cifar10_estimator.cifar10_main

WORKDIR /opt/estimator-trainers

# Pinned dependencies first, so code changes reuse this layer. PIP_CONSTRAINT
# keeps them at start-up too, when a job's own package is installed
# (estimator_trainers.tools.cloud.bootstrap).
COPY requirements.txt constraints.txt ./
RUN pip install -r requirements.txt -c constraints.txt \
    && if [ "${VARIANT}" = "gpu" ]; then \
         pip install -c constraints.txt 'tensorflow[and-cuda]==2.15.1'; \
       fi

# The rest of the repository: pyproject.toml, configs, the runtime and every trainer
# package (discovered, not listed); .dockerignore leaves out tests and tooling.
COPY . ./
RUN pip install --no-deps . \
    && useradd --create-home --uid 1000 trainer

USER trainer
ENTRYPOINT ["/bin/sh", "-c", "exec python -m \"${TRAINER_MODULE}\" \"$@\"", "trainer"]
