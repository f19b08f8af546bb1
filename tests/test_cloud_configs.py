"""AI Platform trainingInput configs: shipped files, translation table, bad input."""
import glob
import json
import os
import resource
import subprocess
import sys

import pytest
import yaml

import cloud_fakes
import processes
from conftest import REPO_ROOT
from conftest import cli_env
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import machines
from estimator_trainers.tools.cloud import schema
from estimator_trainers.errors import UserInputError

T4 = 'NVIDIA_TESLA_T4'

# file -> {role: (replicas, machine type, GPU type, GPU count)}
SHIPPED = {
    'cmle_config.yaml': {
        'chief': (1, 'n1-standard-16', None, 0),
        'worker': (1, 'n1-standard-16', None, 0),
        'ps': (1, 'n1-standard-16', None, 0)},
    'cmle_config_gpu.yaml': {
        'chief': (1, 'n1-standard-16', T4, 4),
        'worker': (2, 'n1-standard-16', T4, 4),
        'ps': (1, 'n1-highmem-8', None, 0)},
    'config_ps.yaml': {
        'chief': (1, 'n1-standard-4', None, 0),
        'worker': (4, 'n1-standard-4', None, 0),
        'ps': (1, 'n1-standard-4', None, 0)},
    'config_mwms.yaml': {
        'chief': (1, 'n1-standard-8', None, 0),
        'worker': (2, 'n1-standard-8', None, 0)},
    'hptuning_config.yaml': {
        'chief': (1, 'n1-standard-8', T4, 1)},
}


def _shape(config):
    return {p.role.name: (p.replica_count, p.machine_type, p.accelerator_type,
                     p.accelerator_count) for p in config.pools}


def _parse(text):
    return configs.parse_config(yaml.safe_load(text), 'cfg.yaml')


def test_every_shipped_config_is_covered():
    shipped = {os.path.basename(p) for p in glob.glob(os.path.join(REPO_ROOT, 'configs', '*.yaml'))}
    assert shipped == set(SHIPPED)


@pytest.mark.parametrize('name', sorted(SHIPPED))
def test_shipped_config_validates_and_translates(name):
    config = configs.load_config(os.path.join(REPO_ROOT, 'configs', name))
    assert _shape(config) == SHIPPED[name]
    assert config.notes == () and config.warnings == ()
    assert config.is_tuning == (name == 'hptuning_config.yaml')


def test_shipped_special_settings():
    mwms = configs.load_config(os.path.join(REPO_ROOT, 'configs', 'config_mwms.yaml'))
    assert mwms.args == ('--distribution-strategy=multi_worker_mirrored',)
    assert mwms.use_chief_in_tf_config is True
    study = configs.load_config(os.path.join(REPO_ROOT, 'configs',
                                             'hptuning_config.yaml')).hyperparameters
    assert study is not None
    assert (study.metric_tag, study.goal) == ('accuracy', 'MAXIMIZE')
    assert [p.name for p in study.params] == ['learning-rate', 'weight-decay']
    assert (study.max_trials, study.max_parallel_trials) == (8, 2)


def test_legacy_machine_table_uses_gpus_vertex_knows():
    vertex_gpus = schema.discovery_document('aiplatform', 'v1')['schemas'][
        'GoogleCloudAiplatformV1MachineSpec']['properties']['acceleratorType']['enum']
    for name, (machine, gpu, count) in machines.LEGACY_MACHINE_TYPES.items():
        machine_type, vertex_gpu, vertex_count, note = machines.translate_machine(name)
        assert machine_type == machine
        assert vertex_count == count
        if gpu is None:
            assert vertex_gpu is None and note is None
        else:
            assert vertex_gpu in vertex_gpus and vertex_gpu != machines.K80
            assert (note is not None) == (gpu == machines.K80)


@pytest.mark.parametrize('legacy,expected', [
    ('standard', ('n1-standard-4', None, 0)),
    ('large_model', ('n1-highmem-8', None, 0)),
    ('complex_model_m', ('n1-highcpu-16', None, 0)),
    ('standard_gpu', ('n1-standard-4', T4, 1)),
    ('complex_model_m_gpu', ('n1-highcpu-16', T4, 4)),
    ('complex_model_l_gpu', ('n1-highcpu-32', 'NVIDIA_TESLA_V100', 8)),
    ('complex_model_m_p100', ('n1-highcpu-16', 'NVIDIA_TESLA_P100', 4)),
    ('large_model_v100', ('n1-highmem-8', 'NVIDIA_TESLA_V100', 1)),
])
def test_legacy_machine_translation(legacy, expected):
    assert machines.translate_machine(legacy)[:3] == expected


def test_k80_substitution_is_reported():
    config = _parse("""
trainingInput:
  scaleTier: CUSTOM
  masterType: complex_model_m_gpu
  workerType: n1-standard-8
  workerCount: 1
  workerConfig: {acceleratorConfig: {count: 2, type: NVIDIA_TESLA_K80}}
""")
    assert _shape(config) == {'chief': (1, 'n1-highcpu-16', T4, 4),
                              'worker': (1, 'n1-standard-8', T4, 2)}
    assert config.notes == (
        'complex_model_m_gpu: NVIDIA_TESLA_K80 is retired on Vertex AI; using 4 x NVIDIA_TESLA_T4',
        'n1-standard-8: NVIDIA_TESLA_K80 is retired on Vertex AI; using 2 x NVIDIA_TESLA_T4')


@pytest.mark.parametrize('tier,expected', [
    ('BASIC', {'chief': (1, 'n1-standard-4', None, 0)}),
    ('BASIC_GPU', {'chief': (1, 'n1-standard-4', T4, 1)}),
    ('STANDARD_1', {'chief': (1, 'n1-highcpu-16', None, 0),
                    'worker': (4, 'n1-highcpu-16', None, 0),
                    'ps': (3, 'n1-standard-4', None, 0)}),
    ('PREMIUM_1', {'chief': (1, 'n1-highcpu-16', None, 0),
                   'worker': (19, 'n1-highcpu-16', None, 0),
                   'ps': (11, 'n1-highmem-8', None, 0)}),
])
def test_scale_tiers(tier, expected):
    assert _shape(_parse('trainingInput: {scaleTier: %s}' % tier)) == expected


def test_default_config_is_basic():
    assert _shape(configs.default_config()) == {'chief': (1, 'n1-standard-4', None, 0)}


def test_compute_engine_types_with_gpus_and_disks():
    config = _parse("""
trainingInput:
  scaleTier: CUSTOM
  masterType: a2-highgpu-2g
  masterConfig:
    acceleratorConfig: {count: 2, type: NVIDIA_TESLA_A100}
    diskConfig: {bootDiskType: pd-ssd, bootDiskSizeGb: 200}
  evaluatorType: g2-standard-8
  evaluatorCount: 1
  evaluatorConfig: {acceleratorConfig: {count: 1, type: NVIDIA_L4}}
  scheduling: {maxRunningTime: 7200s, maxWaitTime: 600s, strategy: FLEX_START}
""")
    assert _shape(config) == {'chief': (1, 'a2-highgpu-2g', 'NVIDIA_TESLA_A100', 2),
                              'evaluator': (1, 'g2-standard-8', 'NVIDIA_L4', 1)}
    assert config.pools[0].boot_disk == {'bootDiskType': 'pd-ssd', 'bootDiskSizeGb': 200}
    assert config.scheduling.as_json() == {'timeout': '7200s', 'maxWaitDuration': '600s',
                                           'strategy': 'FLEX_START'}
    assert config.warnings == ()


def test_vertex_scheduling_and_tensorboard_are_taken_as_written():
    config = _parse("""
trainingInput:
  scaleTier: BASIC
  tensorboard: projects/my-project/locations/us-central1/tensorboards/123
  scheduling: {strategy: SPOT, restartJobOnWorkerRestart: true, disableRetries: false}
""")
    assert config.scheduling.as_json() == {'strategy': 'SPOT',
                                           'restartJobOnWorkerRestart': True,
                                           'disableRetries': False}
    assert config.tensorboard == 'projects/my-project/locations/us-central1/tensorboards/123'


def test_a_machine_type_without_count_runs_nothing_with_one_warning():
    config = _parse(cloud_fakes.COURSE_CONFIG)
    assert _shape(config) == {'chief': (1, 'n1-standard-16', None, 0),
                              'worker': (1, 'n1-standard-16', None, 0)}
    assert config.warnings == (
        'cfg.yaml: trainingInput.parameterServerType set but parameterServerCount is '
        'unset: no ps replica runs (as on AI Platform); set parameterServerCount to run one',)
    config = _parse(CUSTOM + '  evaluatorType: n1-standard-4\n  evaluatorCount: 0\n'
                    '  evaluatorConfig: {diskConfig: {bootDiskSizeGb: 100}}\n')
    assert _shape(config) == {'chief': (1, 'n1-standard-8', None, 0)}
    assert config.warnings == (
        'cfg.yaml: trainingInput.evaluatorType and trainingInput.evaluatorConfig set but '
        'evaluatorCount is 0: no evaluator replica runs (as on AI Platform); set '
        'evaluatorCount to run one',)
    assert _parse(CUSTOM).warnings == ()


def test_int64_fields_as_the_api_writes_them():
    """A Job as `gcloud ai-platform jobs describe` prints it (and gcloud sends it) has
    its int64 fields as text: read as the numbers; other text is still refused."""
    config = _parse(CUSTOM + "  workerType: n1-standard-4\n  workerCount: '2'\n"
                    "  masterConfig: {acceleratorConfig: {count: '2', type: NVIDIA_TESLA_T4}}\n")
    assert _shape(config) == {'chief': (1, 'n1-standard-8', 'NVIDIA_TESLA_T4', 2),
                              'worker': (2, 'n1-standard-4', None, 0)}
    with pytest.raises(UserInputError, match="workerCount: expected an integer >= 0, got "
                                             "text '02'"):
        _parse(CUSTOM + "  workerType: n1-standard-4\n  workerCount: '02'\n")


def test_every_machine_type_in_use_is_in_the_vertex_table():
    used = {machine for machine, _, _ in machines.LEGACY_MACHINE_TYPES.values()}
    for name in SHIPPED:
        config = configs.load_config(os.path.join(REPO_ROOT, 'configs', name))
        used.update(pool.machine_type for pool in config.pools)
    assert used <= set(machines.MACHINE_TYPES)
    for prefix, _ in machines.GPU_FAMILIES:
        assert any(m.startswith(prefix) for m in machines.MACHINE_TYPES), prefix


CUSTOM = 'trainingInput:\n  scaleTier: CUSTOM\n  masterType: n1-standard-8\n'
HP = CUSTOM + """  hyperparameters:
    goal: MAXIMIZE
    hyperparameterMetricTag: accuracy
    params:
"""


@pytest.mark.parametrize('text,message', [
    ('- 1\n', '(top level): expected a mapping, got a list [1]'),
    ('labels: {a: b}\n', 'trainingInput: required'),
    ('jobId: x\ntrainingInput: {}\n', 'jobId: unknown field (expected one of trainingInput, labels, budget)'),
    ('trainingInput: {scaleTier: STANDARD_2}\n',
     "trainingInput.scaleTier: unknown tier 'STANDARD_2' (expected one of BASIC, "
     'BASIC_GPU, STANDARD_1, PREMIUM_1, CUSTOM)'),
    ('trainingInput: {scaleTier: BASIC_TPU}\n', 'trainingInput.scaleTier: BASIC_TPU: TPUs need'),
    ('trainingInput: {scaleTier: CUSTOM}\n',
     'trainingInput.masterType: required with scaleTier: CUSTOM'),
    ('trainingInput: {scaleTier: BASIC, masterType: standard}\n',
     'trainingInput.masterType: only allowed with scaleTier: CUSTOM (scaleTier is BASIC)'),
    ('trainingInput: {masterType: standard}\n',
     'trainingInput.masterType: only allowed with scaleTier: CUSTOM'),
    (CUSTOM + '  workerCont: 2\n', 'trainingInput.workerCont: unknown field (expected one of '),
    (CUSTOM + '  workerCount: 2\n',
     'trainingInput.workerCount: 2 replicas need trainingInput.workerType'),
    (CUSTOM + '  workerType: standard\n  workerCount: 99999999999999999999\n',
     'trainingInput.workerCount: expected at most 1000, got 99999999999999999999'),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: n9-superduper-1024\n',
     "trainingInput.masterType: unknown machine type 'n9-superduper-1024' (closest: "),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: n1-standard-5\n',
     "trainingInput.masterType: unknown machine type 'n1-standard-5': Vertex AI offers "
     'n1-standard in sizes 4, 8, 16, 32, 64, 96'),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: n1-standad-8\n',
     "trainingInput.masterType: unknown machine type 'n1-standad-8' (closest: n1-standard-8;"),
    (CUSTOM + '  masterConfig: {acceleratorConfig: {count: 99999999999, type: NVIDIA_TESLA_T4}}\n',
     'trainingInput.masterConfig.acceleratorConfig.count: expected at most 2147483647'),
    (CUSTOM + '  workerType: standard\n  workerCount: two\n',
     "trainingInput.workerCount: expected an integer >= 0, got text 'two'"),
    (CUSTOM + '  workerType: standard\n  workerCount: true\n',
     'trainingInput.workerCount: expected an integer >= 0, got a boolean True'),
    (CUSTOM + '  workerType: standard\n  workerCount: -1\n',
     'trainingInput.workerCount: expected an integer >= 0, got int -1'),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: 16\n',
     'trainingInput.masterType: expected text, got int 16'),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: complex_model_xl\n',
     "trainingInput.masterType: unknown machine type 'complex_model_xl'"),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: cloud_tpu\n',
     'trainingInput.masterType: cloud_tpu: TPUs need TPUEstimator'),
    (CUSTOM + '  masterConfig: {acceleratorconfig: {count: 1, type: NVIDIA_TESLA_T4}}\n',
     'trainingInput.masterConfig.acceleratorconfig: unknown field (expected one of '
     'acceleratorConfig, diskConfig)'),
    (CUSTOM + '  masterConfig: {imageUri: gcr.io/p/i}\n',
     'trainingInput.masterConfig.imageUri: not supported: pass --image-uri for a custom container'),
    (CUSTOM + '  masterConfig: {acceleratorConfig: {count: 1, type: NVIDIA_TESLA_K90}}\n',
     "trainingInput.masterConfig.acceleratorConfig.type: unknown GPU 'NVIDIA_TESLA_K90'"),
    (CUSTOM + '  masterConfig: {acceleratorConfig: {type: NVIDIA_TESLA_T4}}\n',
     'trainingInput.masterConfig.acceleratorConfig.count: required'),
    (CUSTOM + '  masterConfig: {acceleratorConfig: {count: 0, type: NVIDIA_TESLA_T4}}\n',
     'trainingInput.masterConfig.acceleratorConfig.count: expected an integer >= 1, got int 0'),
    (CUSTOM + '  masterConfig: {acceleratorConfig: {count: 3, type: NVIDIA_TESLA_T4}}\n',
     'trainingInput.masterConfig.acceleratorConfig: NVIDIA_TESLA_T4 attaches 1, 2 or 4 '
     'at a time to n1-* machines, not 3'),
    (CUSTOM + '  masterConfig: {acceleratorConfig: {count: 1, type: NVIDIA_L4}}\n',
     'trainingInput.masterConfig.acceleratorConfig: NVIDIA_L4 does not attach to '
     'n1-standard-8 (n1-* machines take '),
    (CUSTOM + '  masterConfig: {acceleratorConfig: {count: 1, type: TPU_V3}}\n',
     'trainingInput.masterConfig.acceleratorConfig.type: TPU_V3 is not supported: TPUs need'),
    (CUSTOM + '  masterConfig: {acceleratorConfig: {count: 8, type: NVIDIA_B200}}\n',
     'NVIDIA_B200 is not supported: needs CUDA 12.8'),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: e2-standard-8\n'
     '  masterConfig: {acceleratorConfig: {count: 1, type: NVIDIA_TESLA_T4}}\n',
     'trainingInput.masterConfig.acceleratorConfig: e2-standard-8 takes no GPUs'),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: standard_gpu\n'
     '  masterConfig: {acceleratorConfig: {count: 1, type: NVIDIA_TESLA_T4}}\n',
     "trainingInput.masterConfig.acceleratorConfig: legacy machine type 'standard_gpu' "
     'has fixed GPUs'),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: a2-highgpu-1g\n',
     'trainingInput.masterType: a2-highgpu-1g needs an acceleratorConfig with NVIDIA_TESLA_A100'),
    ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: a2-highgpu-2g\n'
     '  masterConfig: {acceleratorConfig: {count: 4, type: NVIDIA_TESLA_A100}}\n',
     'trainingInput.masterConfig.acceleratorConfig: a2-highgpu-2g comes with exactly 2 GPUs, not 4'),
    (CUSTOM + '  masterConfig: {diskConfig: {bootDiskSizeGb: 50}}\n',
     'trainingInput.masterConfig.diskConfig.bootDiskSizeGb: expected an integer >= 100, got int 50'),
    (CUSTOM + '  packageUris: [gs://b/p.tar.gz]\n',
     'trainingInput.packageUris: not supported: the package is built and staged'),
    (CUSTOM + '  args: --train-steps=5\n',
     "trainingInput.args: expected a list of text, got text '--train-steps=5'"),
    (CUSTOM + '  jobDir: /tmp/job\n',
     "trainingInput.jobDir: '/tmp/job': expected a gs:// path (the job's machines cannot "
     'read files on this one)'),
    (CUSTOM + '  useChiefInTfConfig: yes please\n',
     "trainingInput.useChiefInTfConfig: expected true or false, got text 'yes please'"),
    (CUSTOM + '  scheduling: {maxRunningTime: 2h}\n',
     "trainingInput.scheduling.maxRunningTime: expected seconds like 7200s, got '2h'"),
    (CUSTOM + '  scheduling: {maxRunningTime: 0.0s}\n',
     "trainingInput.scheduling.maxRunningTime: expected more than 0s (no job runs in 0s; leave "
     "it out for Vertex AI's 7-day default)"),
    (CUSTOM + '  scheduling: {maxWaitTime: 315576000001s}\n',
     "trainingInput.scheduling.maxWaitTime: '315576000001s' is longer than Vertex AI accepts"),
    (CUSTOM + '  args: [--a=1, "--b=\\0x"]\n',
     "trainingInput.args[1]: '--b=\\x00x': a NUL character cannot be passed to a program"),
    (CUSTOM + '  serviceAccount: trainer\n',
     "trainingInput.serviceAccount: expected a service account email like "
     "trainer@my-project.iam.gserviceaccount.com, got 'trainer'"),
    (CUSTOM + '  network: projects/my-project/global/networks/vpc\n',
     'trainingInput.network: expected projects/PROJECT_NUMBER/global/networks/NETWORK (the '
     "project number, not its id), got 'projects/my-project/global/networks/vpc'"),
    (CUSTOM + '  jobDir: gs://bucket/a/../b\n',
     "trainingInput.jobDir: 'gs://bucket/a/../b': '.' and '..' are not directories in Cloud "
     'Storage'),
    (CUSTOM + 'labels: {team: Vision}\n',
     "labels.team: label value 'Vision': 'V' is not allowed (lowercase letters, digits, _ "
     'and - only)'),
    (CUSTOM + 'labels: {%s: x}\n' % ('k' * 65),
     "labels.%s...: label key '%s" % ('k' * 57, 'k' * 65)),
    (CUSTOM + 'labels: {1st: x}\n',
     "labels.1st: label key '1st': '1' is not allowed (a key starts with a lowercase letter)"),
    (CUSTOM + 'labels: {"": x}\n', 'labels.: empty label key'),
    (CUSTOM + 'labels: {%s}\n' % ', '.join('k%d: v' % i for i in range(65)),
     'labels: 65 labels; Vertex AI takes at most 64'),
    (HP + '      - {parameterName: bs, type: INTEGER, minValue: 1, maxValue: 1.0e+30}\n',
     'params[0].maxValue: expected an INTEGER parameter within int64, got 1e+30'),
    (CUSTOM + '  hyperparameters: {goal: MAXIMIZE, params: []}\n',
     'trainingInput.hyperparameters.hyperparameterMetricTag: required'),
    (CUSTOM + '  hyperparameters: {goal: BEST, hyperparameterMetricTag: auc, params: []}\n',
     "trainingInput.hyperparameters.goal: expected one of MAXIMIZE, MINIMIZE, got text 'BEST'"),
    (CUSTOM + '  hyperparameters: {goal: MAXIMIZE, hyperparameterMetricTag: auc, params: []}\n',
     'trainingInput.hyperparameters.params: expected a non-empty list of parameters, got a list []'),
    (CUSTOM + '  hyperparameters: {goal: MAXIMIZE, hyperparameterMetricTag: auc, '
     'enableTrialEarlyStopping: true}\n',
     'trainingInput.hyperparameters.enableTrialEarlyStopping: not supported: not translated'),
    (HP + '      - {parameterName: lr, type: DOUBLE, minValue: 1e-4, maxValue: 0.1}\n',
     "trainingInput.hyperparameters.params[0].minValue: expected a number, got text '1e-4' "
     '(YAML reads an exponent as a number only with a dot and a sign: write 1.0e-4 or '
     '1.0e+6)'),
    (HP + '      - {parameterName: lr, type: DOUBLE, minValue: 0.5, maxValue: 0.1}\n',
     'trainingInput.hyperparameters.params[0].minValue: 0.5 is above maxValue 0.1'),
    (HP + '      - {parameterName: lr, type: DOUBLE, maxValue: 0.1}\n',
     'trainingInput.hyperparameters.params[0].minValue: required with type DOUBLE'),
    (HP + '      - {parameterName: layers, type: INTEGER, minValue: 1.5, maxValue: 4}\n',
     'params[0].minValue: expected a whole number for an INTEGER parameter, got 1.5'),
    (HP + '      - {parameterName: lr, type: DOUBLE, minValue: 0, maxValue: 1, '
     'scaleType: UNIT_LOG_SCALE}\n',
     'trainingInput.hyperparameters.params[0].scaleType: UNIT_LOG_SCALE needs values > 0'),
    (HP + '      - {parameterName: opt, type: CATEGORICAL, categoricalValues: [a], minValue: 1}\n',
     'trainingInput.hyperparameters.params[0].minValue: not used with type CATEGORICAL'),
    (HP + '      - {parameterName: bs, type: DISCRETE, discreteValues: [64, 32]}\n',
     'trainingInput.hyperparameters.params[0].discreteValues: must be strictly increasing'),
    (HP + '      - {parameterName: bs, type: FLOAT}\n',
     "trainingInput.hyperparameters.params[0].type: expected one of DOUBLE, INTEGER, "
     "CATEGORICAL, DISCRETE, got text 'FLOAT'"),
    (HP + '      - {parameterName: job-dir, type: CATEGORICAL, categoricalValues: [a]}\n',
     'trainingInput.hyperparameters.params[0].parameterName: --job-dir is set by the submission'),
    (HP + '      - {parameterName: --lr, type: DOUBLE, minValue: 0.1, maxValue: 1}\n',
     "params[0].parameterName: expected a trainer flag name like learning-rate, got '--lr'"),
    (HP + '      - {parameterName: a, type: CATEGORICAL, categoricalValues: [x]}\n'
          '      - {parameterName: a, type: CATEGORICAL, categoricalValues: [y]}\n',
     "trainingInput.hyperparameters.params[1].parameterName: duplicate 'a'"),
    (HP.replace('params:', 'algorithm: GRID_SEARCH\n    params:') +
     '      - {parameterName: lr, type: DOUBLE, minValue: 0.1, maxValue: 1}\n',
     'trainingInput.hyperparameters.params[0].type: GRID_SEARCH needs INTEGER, '
     'CATEGORICAL or DISCRETE parameters'),
    (HP.replace('params:', 'maxTrials: 2\n    maxParallelTrials: 4\n    params:') +
     '      - {parameterName: a, type: CATEGORICAL, categoricalValues: [x]}\n',
     'trainingInput.hyperparameters.maxParallelTrials: 4 is more than maxTrials (2)'),
])
def test_bad_config_is_one_clear_error(text, message):
    with pytest.raises(UserInputError) as raised:
        _parse(text)
    text = str(raised.value)
    assert text.startswith('cfg.yaml: ')
    assert message in text
    assert '\n' not in text


@pytest.mark.parametrize('text,message', [
    (CUSTOM + '  workerType: standard\n  workerCount: 010\n',
     "line 5: trainingInput.workerCount: write '010' as a plain decimal number: YAML 1.1 reads "
     'it as 8'),
    (CUSTOM + '  workerType: standard\n  workerCount: 0x10\n',
     "line 5: trainingInput.workerCount: write '0x10' as a plain decimal number: YAML 1.1 "
     'reads it as 16'),
    (CUSTOM + '  region: no\n',
     "line 4: trainingInput.region: expected text, got a boolean False (written 'no')"),
    (CUSTOM + '  scheduling: {maxRunningTime: 1:30:00}\n',
     'line 4: trainingInput.scheduling.maxRunningTime: expected text, got int 5400 (written '
     "'1:30:00')"),
])
def test_what_yaml_1_1_reads_differently_is_named_as_written(tmp_path, text, message):
    path = tmp_path / 'cfg.yaml'
    path.write_text(text)
    with pytest.raises(UserInputError) as raised:
        configs.load_config(str(path))
    assert str(raised.value) == '%s %s' % (path, message)


def test_labels_vertex_accepts():
    config = _parse(CUSTOM + 'labels: {team: vision, owner_2: ana-b, équipe: é, empty: ""}\n')
    assert config.labels == {'team': 'vision', 'owner_2': 'ana-b', 'équipe': 'é', 'empty': ''}


def test_load_config_names_the_file_and_the_line(tmp_path):
    path = tmp_path / 'my_config.yaml'
    path.write_text('trainingInput:\n  scaleTier: CUSTOM\n  masterType: [n1]\n')
    with pytest.raises(UserInputError, match=r"^%s line 3: trainingInput.masterType: expected "
                       r"text, got a list \['n1'\]$" % path):
        configs.load_config(str(path))
    path.write_text('trainingInput:\n  scaleTier: CUSTOM\n   masterType: x\n')
    with pytest.raises(UserInputError, match=r'^%s line 3: not valid YAML \(' % path):
        configs.load_config(str(path))
    path.write_text(CUSTOM + '  workerType: n1-standard-4\n  workerCount: 2\n'
                    '  hyperparameters:\n    goal: MAXIMIZE\n    hyperparameterMetricTag: x\n'
                    '    params:\n    - {parameterName: lr, type: DOUBLE, minValue: .nan, '
                    'maxValue: 1.0}\n')
    with pytest.raises(UserInputError, match=r'^%s line 10: trainingInput.hyperparameters.'
                       r'params\[0\].minValue: expected a finite number, got nan$' % path):
        configs.load_config(str(path))
    with pytest.raises(UserInputError,
                       match=r'^--config %s: no such file$' % (tmp_path / 'none.yaml')):
        configs.load_config(str(tmp_path / 'none.yaml'))


# ------------------------------------------- hostile config files, real CLI

MODULE = 'estimator_trainers.tools.cloud'
IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/estimator-trainers:cpu'
# The command is refused long before this; a config that expanded its aliases
# or recursed would hit it (MemoryError, a traceback) instead of the line.
MEMORY_LIMIT_BYTES = 1 << 30


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def _submit_dry_run(*args):
    """`submit taxi ... --dry-run` in a subprocess with bounded memory and time."""
    return processes.run(
        [sys.executable, '-m', MODULE, 'submit', 'taxi', '--dry-run', '--image-uri', IMAGE,
         *args], 120, cwd=REPO_ROOT, env=cli_env(cloud_fakes.OFFLINE_ENV),
        stdin=subprocess.DEVNULL, preexec_fn=_limit_memory)


def _billion_laughs():
    """The classic: nine levels of nine aliases, 10**9 strings once expanded."""
    lines = ['a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]']
    for previous, name in zip('abcdefgh', 'bcdefghi'):
        lines.append('%s: &%s [%s]' % (name, name, ', '.join(['*' + previous] * 9)))
    return '\n'.join(lines + ['trainingInput: {scaleTier: BASIC}', 'labels: {x: *i}', ''])


FEW = 'a trainingInput config holds a few dozen values in a few hundred bytes'
HOSTILE_CONFIGS = [
    ('not-utf-8', b'trainingInput:\n  scaleTier: BASIC\nlabels: {team: caf\xe9}\n',
     'F line 3: not UTF-8 text (byte 0xe9 at column 19); save the file as UTF-8'),
    ('utf-16', 'trainingInput: {scaleTier: BASIC}\n'.encode('utf-16'),
     'F: saved as UTF-16; save it as UTF-8'),
    ('deeply nested', ('trainingInput:\n  args: ' + '[' * 3000 + ']' * 3000 + '\n').encode(),
     'F line 2: trainingInput.args[0]...: nested more than 32 levels deep'),
    ('billion laughs', _billion_laughs().encode(),
     'F line 5: e[0]: more than 10000 values once aliases are expanded; %s' % FEW),
    ('a list of 300,000 values', ('trainingInput: {scaleTier: BASIC, args: [%sa]}\n'
                                  % ('a, ' * 300000)).encode(),
     'F line 1: trainingInput.args[9996]: more than 10000 values once aliases are expanded; '
     + FEW),
    ('recursive alias', b'trainingInput: {scaleTier: BASIC, args: &a [x, *a]}\n',
     'F line 1: trainingInput.args[1]: alias *a refers to a value that contains it'),
    ('duplicated key', b'trainingInput:\n  scaleTier: CUSTOM\n  masterType: n1-standard-4\n'
                       b'  workerType: n1-standard-4\n  workerCount: 2\n  workerCount: 4\n',
     'F line 6: trainingInput.workerCount: duplicated key (first on line 5); YAML would '
     'silently keep only the last value: remove one'),
    ('wait without FLEX_START', b'trainingInput:\n  scaleTier: BASIC\n  scheduling:\n'
                                b'    maxWaitTime: 600s\n',
     'F line 4: trainingInput.scheduling.maxWaitTime: Vertex AI bounds the wait for machines '
     'only under strategy: FLEX_START (Dynamic Workload Scheduler); add it to wait at most '
     '600s, or drop maxWaitTime (a job then waits as long as Vertex AI queues it)'),
    ('strategy', b'trainingInput:\n  scaleTier: BASIC\n  scheduling: {strategy: PREEMPTIBLE}\n',
     "F line 3: trainingInput.scheduling.strategy: expected one of STANDARD, SPOT, FLEX_START, "
     "got text 'PREEMPTIBLE'"),
    ('tensorboard', b'trainingInput:\n  scaleTier: BASIC\n  tensorboard: my-board\n',
     "F line 3: trainingInput.tensorboard: expected a Vertex AI TensorBoard like projects/"
     "PROJECT/locations/REGION/tensorboards/ID, got 'my-board'"),
    ('duration beyond Vertex', b'trainingInput:\n  scaleTier: BASIC\n  scheduling:\n'
                               b'    maxRunningTime: 99999999999999999999s\n',
     "F line 4: trainingInput.scheduling.maxRunningTime: '99999999999999999999s' is longer "
     'than Vertex AI accepts (a google.protobuf.Duration: at most 315576000000s)'),
    ('label key', b'trainingInput: {scaleTier: BASIC}\nlabels:\n  "Bad Key!": x\n',
     "F line 3: labels.Bad Key!: label key 'Bad Key!': 'B' is not allowed (a key starts "
     'with a lowercase letter)'),
    ('integer of 5000 digits', ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: '
                                'n1-standard-4\n  workerCount: %s\n' % ('9' * 5000)).encode(),
     'F: not a usable YAML value (Exceeds the limit (4300 digits) for integer string '
     'conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the '
     'limit)'),
    ('control character', b'trainingInput: {scaleTier: "BASIC\x01"}\n',
     "F line 1: not valid YAML (character '\\x01' is not allowed in YAML)"),
    ('a megabyte machine name', ('trainingInput:\n  scaleTier: CUSTOM\n  masterType: %s\n'
                                 % ('n1-standard-8' * 70000)).encode(),
     "F line 3: trainingInput.masterType: unknown machine type 'n1-standard-8n1-standard-8"
     "n1-standard-8n'...: longer than any machine type"),
    ('over a megabyte', b'trainingInput: {scaleTier: BASIC}\n' + b'#' * (1 << 20),
     '--config F is larger than 1 MiB; ' + FEW),
]


@pytest.mark.parametrize('name,content,expected', HOSTILE_CONFIGS,
                         ids=[case[0] for case in HOSTILE_CONFIGS])
def test_a_hostile_config_is_one_line_in_bounded_time_and_memory(tmp_path, name, content,
                                                                  expected):
    path = tmp_path / 'config.yaml'
    path.write_bytes(content)
    proc = _submit_dry_run('--config', str(path))
    assert (proc.returncode, proc.stdout) == (2, ''), proc.stderr[-3000:]
    assert proc.stderr.splitlines() == ['error: ' + expected.replace('F', str(path), 1)], name


@pytest.mark.parametrize('job_dir,expected', [
    ('gs://', '--job-dir gs://: no bucket name after gs://'),
    ('gs:///jobs/x', '--job-dir gs:///jobs/x: no bucket name after gs://'),
    ('gs://My_Bucket/x', "--job-dir gs://My_Bucket/x: bucket name 'My_Bucket' is not valid: "
     '3 to 63 lowercase letters, digits, dashes, underscores or dots, starting and ending '
     'with a letter or digit'),
    ('gs://bucket/jobs/./x', "--job-dir gs://bucket/jobs/./x: '.' and '..' are not "
     'directories in Cloud Storage (object names are taken literally)'),
    ('/tmp/x', "--job-dir /tmp/x: expected a gs:// path (the job's machines cannot read "
     'files on this one)'),
])
def test_a_job_dir_says_what_is_wrong_with_it(job_dir, expected):
    proc = _submit_dry_run('--job-dir', job_dir)
    assert (proc.returncode, proc.stdout) == (2, ''), proc.stderr[-3000:]
    assert proc.stderr.splitlines() == ['error: ' + expected]


def test_a_job_dir_and_a_data_path_with_empty_segments_read_as_one_rule():
    """`$BUCKET/x` with `BUCKET=gs://b/`: the flag, the config's jobDir and the trainer
    flags all read `gs://b//x` as `gs://b/x`, each said in one note."""
    proc = _submit_dry_run('--job-dir', 'gs://bucket//jobs/x/', '--',
                           '--train-files=gs://bucket//data/train.csv',
                           '--eval-files', 'gs://bucket//data/eval.csv')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert cloud_fakes.said(proc.stderr) == [
        'note: gs://bucket//jobs/x/ is read as gs://bucket/jobs/x (empty path segments '
        'dropped)',
        'note: gs://bucket//data/train.csv is read as gs://bucket/data/train.csv (empty path '
        'segments dropped)',
        'note: gs://bucket//data/eval.csv is read as gs://bucket/data/eval.csv (empty path '
        'segments dropped)']
    (pool,) = json.loads(proc.stdout)['request']['body']['jobSpec']['workerPoolSpecs']
    assert pool['containerSpec']['args'] == [
        '--train-files=gs://bucket/data/train.csv', '--eval-files',
        'gs://bucket/data/eval.csv', '--job-dir=gs://bucket/jobs/x']


def test_read_config_has_the_same_bounds(tmp_path):
    path = tmp_path / 'config.yaml'
    path.write_bytes(_billion_laughs().encode())
    with pytest.raises(UserInputError, match=r'^%s line 5: e\[0\]: more than 10000 values'
                       % path):
        configs.read_config(str(path))
    path.write_text('{"trainingInput": {"scaleTier": "BASIC"}, "labels": {"a": "b"}}')
    assert configs.read_config(str(path)) == {'trainingInput': {'scaleTier': 'BASIC'},
                                              'labels': {'a': 'b'}}


def test_config_and_flag_share_the_job_dir_rule(tmp_path):
    path = tmp_path / 'config.yaml'
    path.write_text('trainingInput:\n  scaleTier: BASIC\n  jobDir: gs://\n')
    with pytest.raises(UserInputError) as raised:
        configs.load_config(str(path))
    assert str(raised.value) == ("%s line 3: trainingInput.jobDir: 'gs://': no bucket name "
                                 'after gs://' % path)
    path.write_text('trainingInput:\n  scaleTier: BASIC\n  jobDir: gs://bkt//jobs/x\n')
    config = configs.load_config(str(path))
    assert config.job_dir == 'gs://bkt/jobs/x'
    assert config.notes == ('gs://bkt//jobs/x is read as gs://bkt/jobs/x (empty path segments '
                            'dropped)',)
