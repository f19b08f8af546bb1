"""What a cloud job costs: the price table, its refresh, the estimate, the budget, the bill.

The refresh reads recorded Cloud Billing Catalog answers (`HttpMockSequence`,
SKUs in the API's documented shape); estimates and budgets go through the
real fronts' dry runs, whose requests are checked against the bundled
aiplatform v1 discovery schema.
"""
import datetime
import io
import json
import os
import types

import pytest

import cloud_fakes
from conftest import REPO_ROOT
from estimator_trainers import perf_model
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import estimate
from estimator_trainers.tools.cloud import pricing
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud import train_cloud
from test_cloud_cli import FakeBackend

TODAY = datetime.date(2026, 11, 28)
IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/mnist:1'
PARENT = 'projects/my-project/locations/us-central1'
SERVICE = 'C7E2-9256-1C43'


@pytest.fixture
def environ(tmp_path):
    """A cache of the test's own (conftest gives the suite one; this test writes)."""
    return {'XDG_CACHE_HOME': str(tmp_path / 'cache')}


def _pools(name):
    return estimate.pool_specs(configs.load_config(
        os.path.join(REPO_ROOT, 'configs', name)).pools)


# ------------------------------------------------------------------ the table


def test_shipped_table_is_dated_sourced_and_covers_the_shipped_shapes():
    table = pricing.read_table(pricing.SHIPPED)
    assert all(rate.source and rate.read_on and rate.status in pricing.STATUSES
               for rate in table.rates)
    listed = table.machine('us-central1', 'n1-standard-4')
    assert listed.usd_per_hour == 0.21849885 and not listed.derived  # Google's page, 2026-10
    for region in ('us-central1', 'us-east1', 'europe-west4', 'asia-east1'):
        for spot in (False, True):
            # Every machine of the shipped configs and the legacy translation, and T4s.
            for machine in ('n1-standard-4', 'n1-standard-8', 'n1-standard-16',
                            'n1-highmem-8', 'n1-highcpu-16', 'n1-highcpu-32'):
                assert table.machine(region, machine, spot), (region, machine, spot)
            assert table.accelerator(region, 'NVIDIA_TESLA_T4', spot), region
    # The derivation (Compute Engine x 1.15, per-vCPU and per-GiB rates) reproduces
    # the listed figure it was checked against.
    core = table._find('us-central1', 'core', 'n1', 'on-demand')
    ram = table._find('us-central1', 'ram', 'n1', 'on-demand')
    assert 4 * core.usd_per_hour + 15 * ram.usd_per_hour == pytest.approx(0.21849885, rel=1e-4)
    assert table.accelerator('us-central1', 'NVIDIA_TESLA_V100') is None  # not known: none


@pytest.mark.parametrize('text, message', [
    ('region,kind\n', 'expected a price table whose first line is region,kind,name'),
    (','.join(pricing.COLUMNS) + '\nus-central1,cpu,n1,on-demand,1,2026-01-01,listed,x\n',
     'line 2: kind, pricing or status is not one of'),
    (','.join(pricing.COLUMNS) + '\nus-central1,core,n1,on-demand,-1,2026-01-01,listed,x\n',
     "line 2: usd_per_hour '-1' is not a price"),
    (','.join(pricing.COLUMNS) + '\n', 'the price table has no rows'),
])
def test_a_broken_cache_is_said_and_the_shipped_table_used(environ, text, message):
    path = pricing.cache_path(environ)
    os.makedirs(os.path.dirname(path))
    with open(path, 'w') as f:
        f.write(text)
    warnings = []
    table = pricing.load(environ, warn=warnings.append)
    assert table.path == pricing.SHIPPED and not table.from_cache
    assert len(warnings) == 1 and message in warnings[0] and path in warnings[0]


def test_prices_older_than_90_days_are_warned_of():
    assert pricing.stale_warning(datetime.date(2026, 8, 30), TODAY, 'x') is None
    warning = pricing.stale_warning(datetime.date(2026, 8, 29), TODAY, 'the prices')
    assert warning.startswith('the prices were read on 2026-08-29, 91 days ago')
    assert 'prices refresh' in warning


# ---------------------------------------------------------------- the refresh


def _money(usd):
    units = int(usd)
    return {'currencyCode': 'USD', 'units': str(units), 'nanos': round((usd - units) * 1e9)}


def _sku(sku_id, description, usd, unit='h', usage='OnDemand', regions=('us-central1',),
         tiers=None):
    """A Sku as `services.skus.list` documents it."""
    return {
        'name': 'services/%s/skus/%s' % (SERVICE, sku_id), 'skuId': sku_id,
        'description': description,
        'category': {'serviceDisplayName': 'Vertex AI', 'resourceFamily': 'Compute',
                     'resourceGroup': 'CPU', 'usageType': usage},
        'serviceRegions': list(regions),
        'pricingInfo': [{
            'summary': '', 'effectiveTime': '2026-11-27T12:00:00Z',
            'currencyConversionRate': 1,
            'pricingExpression': {
                'usageUnit': unit, 'usageUnitDescription': 'hour', 'baseUnit': 's',
                'baseUnitDescription': 'second', 'baseUnitConversionFactor': 3600,
                'displayQuantity': 1,
                'tieredRates': tiers or [{'startUsageAmount': 0, 'unitPrice': _money(usd)}]},
            'aggregationInfo': {'aggregationLevel': 'ACCOUNT', 'aggregationInterval': 'DAILY',
                                'aggregationCount': 1}}],
        'serviceProviderName': 'Google',
        'geoTaxonomy': {'type': 'REGIONAL', 'regions': list(regions)}}


SKUS_PAGE_1 = [
    _sku('A1', 'Custom Training N1 Predefined Instance Core running in Americas', 0.0363522,
         regions=('us-central1', 'us-east1')),
    _sku('A2', 'Custom Training N1 Predefined Instance Ram running in Americas', 0.0048725,
         unit='GiBy.h', regions=('us-central1', 'us-east1')),
    _sku('A3', 'Custom Training Nvidia Tesla T4 GPU running in Americas', 0.4025),
    _sku('A4', 'Custom Training N1 Predefined Instance Core running in Americas (Spot)',
         0.0101, usage='Preemptible'),
    _sku('A5', 'Custom Training N1 Predefined Instance Core Commitment', 0.02,
         usage='Commit1Yr'),
    _sku('A6', 'Online Prediction N1 Predefined Instance Core running in Americas', 0.0365),
]
SKUS_PAGE_2 = [
    _sku('B1', 'Custom Training N1 and N2 Instance Core running in Europe', 0.04,
         regions=('europe-west4',)),
    _sku('B2', 'Custom Training Nvidia Tesla V100 GPU running in Europe', 2.0,
         tiers=[{'startUsageAmount': 0, 'unitPrice': _money(2.0)},
                {'startUsageAmount': 100, 'unitPrice': _money(1.8)}]),
    _sku('B3', 'Custom Training N2 Predefined Instance Ram running in Europe', 0.005,
         unit='GiBy.mo', regions=('europe-west4',)),
    _sku('B4', 'Custom Training Nvidia Tesla P4 GPU running in Asia', 0.7,
         regions=('asia-east1',)),
    _sku('B5', 'Custom Training Nvidia Tesla P4 GPU in Asia (other)', 0.8,
         regions=('asia-east1',)),
]
ANSWERS = [
    (200, {'services': [{'name': 'services/6F81-5844-456A', 'serviceId': '6F81-5844-456A',
                         'displayName': 'Compute Engine'}], 'nextPageToken': 'p2'}),
    (200, {'services': [{'name': 'services/' + SERVICE, 'serviceId': SERVICE,
                         'displayName': 'Vertex AI'}]}),
    (200, {'skus': SKUS_PAGE_1, 'nextPageToken': 's2'}),
    (200, {'skus': SKUS_PAGE_2}),
]


def test_refresh_reads_what_it_can_and_says_what_it_skipped():
    http = cloud_fakes.RecordingHttp(ANSWERS)
    found = pricing.refresh(api.build('cloudbilling', 'v1', http), TODAY, api_key='k3y')
    rates = {(r.region, r.kind, r.name, r.pricing): r.usd_per_hour for r in found.rates}
    assert rates == {
        ('us-central1', 'core', 'n1', 'on-demand'): pytest.approx(0.0363522),
        ('us-east1', 'core', 'n1', 'on-demand'): pytest.approx(0.0363522),
        ('us-central1', 'ram', 'n1', 'on-demand'): pytest.approx(0.0048725),
        ('us-east1', 'ram', 'n1', 'on-demand'): pytest.approx(0.0048725),
        ('us-central1', 'gpu', 'NVIDIA_TESLA_T4', 'on-demand'): pytest.approx(0.4025),
        ('us-central1', 'core', 'n1', 'spot'): pytest.approx(0.0101)}
    assert all(r.status == 'listed' and r.read_on == TODAY and 'skus/A' in r.source
               for r in found.rates)
    assert found.skipped == (
        'Custom Training N1 and N2 Instance Core running in Europe (B1): names more than '
        'one machine family',
        'Custom Training Nvidia Tesla V100 GPU running in Europe (B2): has 2 price tiers',
        "Custom Training N2 Predefined Instance Ram running in Europe (B3): unit 'GiBy.mo', "
        "expected 'GiBy.h'",
        'asia-east1 gpu NVIDIA_TESLA_P4 on-demand: two SKUs give different prices; neither '
        'is used')
    uris = [r.uri for r in http.requests]
    assert uris[0].startswith('https://cloudbilling.googleapis.com/v1/services?')
    assert 'pageToken=p2' in uris[1]
    assert uris[2].startswith('https://cloudbilling.googleapis.com/v1/services/%s/skus?'
                              % SERVICE)
    assert 'currencyCode=USD' in uris[2] and 'pageToken=s2' in uris[3]
    assert all('key=k3y' in uri for uri in uris)


def test_prices_refresh_writes_the_cache_the_estimates_then_use(environ, monkeypatch):
    http = cloud_fakes.RecordingHttp(ANSWERS)
    build = api.build
    monkeypatch.setattr(api, 'build', lambda name, version, transport, endpoint=None:
                        build(name, version, http, endpoint))
    out, err = io.StringIO(), io.StringIO()
    assert train_cloud.main(['prices', 'refresh', '--api-key', 'k3y'], backend=FakeBackend(),
                            out=out, err=err, environ=environ) == 0
    assert out.getvalue() == 'wrote 6 training rates of services/%s in 2 regions to %s\n' % (
        SERVICE, pricing.cache_path(environ))
    assert 'skipped: Custom Training Nvidia Tesla V100 GPU' in err.getvalue()
    table = pricing.load(environ)
    assert table.from_cache
    price = estimate.price_pool(table, 'us-central1', estimate.PoolSpec(
        'chief', 2, 'n1-standard-4', 'NVIDIA_TESLA_T4', 1), spot=False)
    assert price.usd_per_hour == pytest.approx(2 * (4 * 0.0363522 + 15 * 0.0048725 + 0.4025))
    out = io.StringIO()
    train_cloud.main(['prices', 'show', '--region', 'us-east1'], backend=FakeBackend(),
                     out=out, err=io.StringIO(), environ=environ)
    assert len(out.getvalue().splitlines()) == 3  # where from, and the two us-east1 rates


# --------------------------------------------------------------- the estimate


def test_a_parameter_server_taxi_cluster_is_called_out_with_the_cheaper_shape():
    table = pricing.read_table(pricing.SHIPPED)
    work = estimate.Workload('taxi', train_steps=20000, batch_size=128, intra_threads=1)
    found = estimate.make(_pools('config_ps.yaml'), 'us-central1', False, work, table,
                          today=TODAY)
    assert found.usd_per_hour == pytest.approx(6 * 0.21849885, rel=1e-4)
    assert 0 < found.low_secs < found.high_secs
    assert found.cost_range[0] < found.cost_range[1]
    assert len(found.notes) == 1 and 'one n1-standard-4 alone' in found.notes[0]
    assert 'train on one machine' in found.notes[0]
    printed = estimate.lines(found)
    assert printed[0].startswith('estimate: chief     1 x n1-standard-4: $0.22/h, $')
    assert printed[3].startswith('estimate: total $1.31/h x ')
    assert any('performance model alone' in line and 'parameter servers' in line
               for line in printed)
    # One machine alone is not called out.
    alone = estimate.make([estimate.PoolSpec('chief', 1, 'n1-standard-4')], 'us-central1',
                          False, work, table, today=TODAY)
    assert alone.notes == () and alone.high_secs < found.high_secs


def test_gpu_pools_and_unknown_models_get_the_hourly_price_only():
    table = pricing.read_table(pricing.SHIPPED)
    gpu = estimate.make(_pools('cmle_config_gpu.yaml'), 'us-central1', False,
                        estimate.Workload('cifar10', 1000, 128, 44), table, today=TODAY)
    assert gpu.low_secs is None and gpu.time_source.startswith('unknown: GPU')
    assert gpu.usd_per_hour == pytest.approx(
        3 * (0.21849885 * 4 + 4 * 0.4025) + table.machine('us-central1', 'n1-highmem-8')
        .usd_per_hour, rel=1e-3)
    assert 'estimate: total $%.2f/h; time unknown: GPU throughput is not modelled' % (
        gpu.usd_per_hour) in estimate.lines(gpu)
    package = estimate.make(_pools('config_mwms.yaml'), 'europe-west4', True,
                            estimate.Workload(None), table, today=TODAY)
    assert package.time_source == 'unknown' and package.usd_per_hour is not None
    unpriced = estimate.make([estimate.PoolSpec('chief', 1, 'n2-standard-8')], 'us-central1',
                             False, estimate.Workload(None), table, today=TODAY)
    assert unpriced.usd_per_hour is None
    assert 'no price in the table for n2-standard-8' in estimate.lines(unpriced)[0]


def _record(tmp_path, **session):
    job_dir = tmp_path / 'job'
    job_dir.mkdir(parents=True)
    base = {'status': 'succeeded', 'started_at': '2026-11-28T10:00:00+00:00',
            'wall_secs': 100.0, 'cpu_secs': 100.0, 'examples_per_sec': 2000.0,
            'examples_per_global_step': 128, 'steps': {'from': 0, 'to': 1000, 'target': 1000},
            'phases': {'startup_secs': 6.0, 'evaluating_secs': 3.0, 'checkpointing_secs': 1.0},
            'hardware': {'cpu_cores': 2}, 'cluster': {'chief': 1}}
    base.update(session)
    (job_dir / 'run_record.json').write_text(json.dumps({'format': 1, 'sessions': [base]}))
    return str(job_dir)


def test_a_run_record_is_the_evidence_and_is_kept_for_the_same_job(tmp_path, environ):
    evidence = estimate.read_evidence(_record(tmp_path))
    assert evidence.cpu_per_example == pytest.approx(1 / 2000)  # one CPU busy of two
    assert evidence.cpus_used == pytest.approx(1.0)
    assert evidence.overhead_secs_per_step == pytest.approx(0.004)
    found = estimate.make([estimate.PoolSpec('chief', 1, 'n1-standard-8')], 'us-central1',
                          False, estimate.Workload('taxi', 10000, 128),
                          pricing.read_table(pricing.SHIPPED), evidence, today=TODAY)
    # 10000 steps x 128 examples at 1000-2000 examples/s (one CPU, worth 0.5-1 here), the
    # start-up measured (6 s) and provisioning, 4 ms a step of evaluation and checkpoints.
    assert found.low_secs == pytest.approx(60 + 6 + 640 + 40)
    assert found.high_secs == pytest.approx(600 + 6 + 1280 + 40)
    assert found.time_source.startswith('measured: %s' % os.path.join(
        str(tmp_path), 'job', 'run_record.json'))
    key = estimate.rehearsal_key('taxi_estimator.trainer', ['--job-dir=/a', '--train-steps=9'])
    assert key == estimate.rehearsal_key('taxi_estimator.trainer',
                                         ['--job-dir=/b', '--train-steps=9'])
    assert estimate.remembered(key, environ) is None
    estimate.remember(key, evidence, environ)
    assert estimate.remembered(key, environ) == evidence
    with pytest.raises(UserInputError, match='--throughput-from .*: no succeeded training '
                       'session with a rate'):
        estimate.read_evidence(_record(tmp_path / 'x', status='failed'))


# ------------------------------------------------------------------ the budget


def _dry_run(*extra, config=None):
    out, err = io.StringIO(), io.StringIO()
    argv = ['jobs', 'submit', 'training', 'job_1', '--project', 'my-project', '--dry-run',
            '--master-image-uri', IMAGE, '--scale-tier', 'custom', '--master-machine-type',
            'n1-standard-8', '--worker-machine-type', 'n1-standard-4', '--worker-count', '2',
            *(['--config', config] if config else []), *extra]
    code = ai_platform.main(argv, backend=FakeBackend(), out=out, err=err)
    body = json.loads(out.getvalue())['request']['body']
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob', body)
    return code, body, err.getvalue()


def test_max_cost_bounds_the_job_and_labels_carry_the_run_id(tmp_path):
    code, body, err = _dry_run('--max-cost', '2.5')
    table = pricing.read_table(pricing.SHIPPED)
    per_hour = (table.machine('us-central1', 'n1-standard-8').usd_per_hour
                + 2 * table.machine('us-central1', 'n1-standard-4').usd_per_hour)
    assert code == 0
    assert body['jobSpec']['scheduling'] == {'timeout': '%ds' % int(2.5 / per_hour * 3600)}
    assert body['labels'] == {'et-run-id': 'job_1', 'et-price-table': '2026-10-01'}
    assert 'estimate: total $0.87/h; time unknown' in err
    assert 'note: --max-cost 2.50: scheduling.timeout %ss' % int(2.5 / per_hour * 3600) in err
    # The config's budget, and a shorter maxRunningTime kept.
    config = tmp_path / 'job.yaml'
    config.write_text('budget: {maxCostUsd: 100}\n'
                      'trainingInput: {scheduling: {maxRunningTime: 60s}}\n')
    _, body, _ = _dry_run(config=str(config))
    assert body['jobSpec']['scheduling'] == {'timeout': '60s'}


def test_max_cost_refuses_a_job_above_it_or_that_cannot_be_priced():
    table = pricing.read_table(pricing.SHIPPED)
    found = estimate.make(_pools('config_ps.yaml'), 'us-central1', False,
                          estimate.Workload('taxi', 10 ** 8, 128, intra_threads=1), table,
                          today=TODAY)
    with pytest.raises(UserInputError, match=r'^--max-cost 1.00: the job is estimated to cost '
                       r'up to \$[0-9.]+ \(\$1.31/h for up to [0-9.]+ h\); raise the budget'):
        estimate.check_budget(found, 1.0)
    estimate.check_budget(found, 10 ** 6)
    with pytest.raises(UserInputError, match='cannot be priced'):
        _dry_run('--max-cost', '5', '--region', 'me-west1')


# --------------------------------------------------------------- after the job


def test_status_shows_the_metered_cost_beside_the_estimate():
    job = {'name': PARENT + '/customJobs/7', 'displayName': 'job_1',
           'state': 'JOB_STATE_SUCCEEDED', 'createTime': '2026-11-28T09:58:00Z',
           'startTime': '2026-11-28T10:00:00.123456789Z', 'endTime': '2026-11-28T12:00:00.123Z',
           'labels': {'et-run-id': 'job_1', 'et-estimate-cents': '40-95',
                      'et-estimate-secs': '3600-9000'},
           'jobSpec': {'workerPoolSpecs': [
               {'machineSpec': {'machineType': 'n1-standard-4'}, 'replicaCount': '1'},
               {'machineSpec': {'machineType': 'n1-standard-4'}, 'replicaCount': '2'}]}}
    out = io.StringIO()
    assert train_cloud.main(['status', PARENT + '/customJobs/7'],
                            backend=FakeBackend([(200, job)]), out=out,
                            err=io.StringIO()) == 0
    assert out.getvalue().splitlines()[-4:] == [
        'cost: chief     1 x n1-standard-4: 2.0 h metered (startTime to endTime) x $0.22/h '
        '= $0.44',
        'cost: worker    2 x n1-standard-4: 2.0 h metered (startTime to endTime) x $0.44/h '
        '= $0.87',
        "cost: total $1.31 at the table's list rates; estimated $0.40-0.95 over 60 min-2.5 h",
        'cost: the billed figure: your billing export, label et-run-id=job_1 (docs/cloud.md)']
    running = dict(job, state='JOB_STATE_RUNNING', endTime=None)
    assert estimate.after_job(running, pricing.read_table(pricing.SHIPPED)) == []


def test_estimate_only_prints_the_figures_a_sweep_sums(environ):
    out, err = io.StringIO(), io.StringIO()
    assert train_cloud.main(['submit', 'taxi', '--config', os.path.join(
        REPO_ROOT, 'configs', 'config_ps.yaml'), '--bucket', 'gs://my-bucket', '--project',
        'my-project', '--image-uri', IMAGE, '--estimate-only', '--', '--train-steps=2000'],
        backend=FakeBackend(), out=out, err=err, environ=environ) == 0
    figures = json.loads(out.getvalue())
    assert figures['usd_per_hour'] == pytest.approx(6 * 0.21849885, rel=1e-4)
    assert 0 < figures['low_usd'] < figures['high_usd']
    assert 'estimate: total $1.31/h x ' in err.getvalue()
    assert estimate.sweep_lines([figures, figures, dict(figures, low_usd=None,
                                                        high_usd=None)]) == [
        "estimate: the sweep's 3 jobs: $%.2f-$%.2f for the 2 with a predicted time" % (
            2 * figures['low_usd'], 2 * figures['high_usd']),
        'estimate: 1 more have no predicted time: $1.31/h together']


# ------------------------------------------------------------ the model behind


def test_the_model_in_the_package_is_the_fitted_one():
    from benchmarks import cost_model  # pylint: disable=import-outside-toplevel
    # benchmarks fit and print the package's model (taxi's traffic needs TensorFlow
    # to count its layers: `cost_model.step_traffic('taxi')` gave TAXI_TRAFFIC).
    assert cost_model.step_traffic('cifar10 ResNet-44') == perf_model.resnet_traffic(44)
    assert cost_model.overhead((1.0, 2.0), 3) == perf_model.overhead(perf_model.Params(1, 2), 3)
    params = perf_model.FITTED
    # One shared machine: a PS cluster's step costs b c + f + beta B on `cpus` CPUs.
    rate = perf_model.local_cluster_rate(128, 1e-5, 40872, params, trainers=5,
                                         parameter_servers=1, cpus=2, threads_per_task=1)
    assert rate == pytest.approx(2 * 128 / (128 * 1e-5 + perf_model.overhead(params, 40872)))
    # All-reduce: every worker's batch a step, each paying f and its share of the bytes.
    one = perf_model.local_cluster_rate(128, 1e-3, 0, params, 1, 0, 2, None)
    three = perf_model.local_cluster_rate(128, 1e-3, 2_000_000, params, 3, 0, 2, None)
    assert three < one  # same CPUs, more overhead
    assert perf_model.predict_allreduce(128, 1e-3, 2_000_000, params, 4, 8, 16) > \
        perf_model.predict_allreduce(128, 1e-3, 2_000_000, params, 2, 8, 16)
