"""The structured-data sample's setup.py: its trainer package and REQUIRED_PACKAGES."""
from setuptools import find_packages
from setuptools import setup

REQUIRED_PACKAGES = ['PyYAML>=5.1', 'cloudml-hypertune']

setup(
    name='trainer',
    version='0.1',
    install_requires=REQUIRED_PACKAGES,
    packages=find_packages(),
    include_package_data=True,
    description='AI Platform structured-data sample (taxi tips)',
)
