"""The classic entry point: `python setup.py sdist --formats=gztar` (Vertex AI's
docs) and gcloud's `setup.py egg_info ... build ... sdist` still build this
repository's package; `pyproject.toml` (PEP 621) holds all of its metadata."""
from setuptools import setup

setup()
