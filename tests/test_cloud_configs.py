"""AI Platform trainingInput configs: shipped files, translation table, bad input."""
import glob
import os

import pytest
import yaml

import cloud_fakes
from conftest import REPO_ROOT
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
    return {p.role: (p.replica_count, p.machine_type, p.accelerator_type,
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
    assert mwms.training_input['useChiefInTfConfig'] is True
    hp = configs.load_config(os.path.join(REPO_ROOT, 'configs', 'hptuning_config.yaml'))
    assert hp.hyperparameters['hyperparameterMetricTag'] == 'accuracy'
    assert hp.hyperparameters['goal'] == 'MAXIMIZE'
    assert [p['parameterName'] for p in hp.hyperparameters['params']] == [
        'learning-rate', 'weight-decay']
    assert (hp.hyperparameters['maxTrials'], hp.hyperparameters['maxParallelTrials']) == (8, 2)


def test_legacy_machine_table_uses_gpus_vertex_knows():
    vertex_gpus = schema.discovery_document('aiplatform', 'v1')['schemas'][
        'GoogleCloudAiplatformV1MachineSpec']['properties']['acceleratorType']['enum']
    for name, (machine, gpu, count) in configs.LEGACY_MACHINE_TYPES.items():
        machine_type, vertex_gpu, vertex_count, note = configs.translate_machine(name)
        assert machine_type == machine
        assert vertex_count == count
        if gpu is None:
            assert vertex_gpu is None and note is None
        else:
            assert vertex_gpu in vertex_gpus and vertex_gpu != configs.K80
            assert (note is not None) == (gpu == configs.K80)


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
    assert configs.translate_machine(legacy)[:3] == expected


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
  scheduling: {maxRunningTime: 7200s, maxWaitTime: 600s}
""")
    assert _shape(config) == {'chief': (1, 'a2-highgpu-2g', 'NVIDIA_TESLA_A100', 2),
                              'evaluator': (1, 'g2-standard-8', 'NVIDIA_L4', 1)}
    assert config.pools[0].boot_disk == {'bootDiskType': 'pd-ssd', 'bootDiskSizeGb': 200}
    assert config.scheduling == {'timeout': '7200s', 'maxWaitDuration': '600s'}


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


def test_every_machine_type_in_use_is_in_the_vertex_table():
    used = {machine for machine, _, _ in configs.LEGACY_MACHINE_TYPES.values()}
    for name in SHIPPED:
        config = configs.load_config(os.path.join(REPO_ROOT, 'configs', name))
        used.update(pool.machine_type for pool in config.pools)
    assert used <= set(machines.MACHINE_TYPES)
    for prefix, _ in configs.GPU_FAMILIES:
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
    ('jobId: x\ntrainingInput: {}\n', 'jobId: unknown field (expected one of trainingInput, labels)'),
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
     "trainingInput.jobDir: expected a gs:// path, got '/tmp/job'"),
    (CUSTOM + '  useChiefInTfConfig: yes please\n',
     "trainingInput.useChiefInTfConfig: expected true or false, got text 'yes please'"),
    (CUSTOM + '  scheduling: {maxRunningTime: 2h}\n',
     "trainingInput.scheduling.maxRunningTime: expected seconds like 7200s, got '2h'"),
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
     '(YAML reads exponents without a dot as text: write 1.0e-4)'),
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


def test_load_config_names_the_file(tmp_path):
    path = tmp_path / 'my_config.yaml'
    path.write_text('trainingInput:\n  scaleTier: CUSTOM\n  masterType: [n1]\n')
    with pytest.raises(UserInputError, match=r"^%s: trainingInput.masterType: expected text, "
                       r"got a list \['n1'\]$" % path):
        configs.load_config(str(path))
    path.write_text('trainingInput:\n  scaleTier: CUSTOM\n   masterType: x\n')
    with pytest.raises(UserInputError, match=r'^%s: not valid YAML at line 3 ' % path):
        configs.load_config(str(path))
    with pytest.raises(UserInputError,
                       match=r'^--config %s: No such file or directory$' % (tmp_path / 'none.yaml')):
        configs.load_config(str(tmp_path / 'none.yaml'))
