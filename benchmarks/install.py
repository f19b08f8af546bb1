"""Benchmark 6: installing the pinned requirements, pip vs uv, cold and warm cache.

The first `scripts/setup-venv.sh` run is the first thing every user waits
for. Each measurement installs `-r requirements.txt -c constraints.txt` into a
fresh venv (made untimed): "cold" with an empty cache directory of its own,
so everything comes from PyPI, "warm" into another fresh venv reusing that
cache. pip and uv run with no configuration files (the machine's pip.conf
mirrors and find-links would skew the cold figures), each with its own cache.

pip's HTTP cache only keeps responses that carry caching headers; where the
route to PyPI strips them (as on the machine of RESULTS.md), pip's "warm"
install downloads everything again. So pip is also timed installing from a
local wheelhouse (`pip download` first, untimed; then `--no-index
--find-links`): the local reads a warm pip cache would give.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple

from benchmarks import common

# The installers measured, and the caches each is timed with.
Installer = Literal['pip', 'uv']
Kind = Literal['cold', 'warm', 'wheelhouse']
INSTALLERS: Tuple[Installer, ...] = ('pip', 'uv')
KINDS: Dict[Installer, Tuple[Kind, ...]] = {'pip': ('cold', 'warm', 'wheelhouse'),
                                            'uv': ('cold', 'warm')}


def clean_env() -> Dict[str, str]:
    """This environment less pip's and uv's settings; no config files either."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(('PIP_', 'UV_'))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK='1', UV_NO_CONFIG='1')
    return env


REQUIREMENTS = ['-r', os.path.join(common.REPO_ROOT, 'requirements.txt'),
                '-c', os.path.join(common.REPO_ROOT, 'constraints.txt')]


def install_command(installer: Installer, uv: str, venv: str, cache_dir: str,
                    wheelhouse: Optional[str] = None) -> List[str]:
    python = os.path.join(venv, 'bin', 'python')
    if installer == 'uv':
        # Compiling bytecode, as pip does and scripts/setup-venv.sh asks uv to.
        return [uv, 'pip', 'install', '--quiet', '--compile-bytecode', '--python', python,
                '--cache-dir', cache_dir] + REQUIREMENTS
    local = ['--no-index', '--find-links', wheelhouse] if wheelhouse else []
    return ([python, '-m', 'pip', 'install', '--quiet', '--cache-dir', cache_dir] + local
            + REQUIREMENTS)


def make_venv(base_python: str, work: str) -> str:
    venv = tempfile.mkdtemp(dir=work, prefix='venv-')
    subprocess.run([base_python, '-m', 'venv', '--clear', venv], check=True)
    return venv


def timed_install(installer: Installer, uv: str, base_python: str, cache_dir: str, work: str,
                  wheelhouse: Optional[str] = None) -> float:
    """Seconds to install into a fresh venv made by `base_python` under `work`.

    With `wheelhouse` (pip only), first downloads the pins there, untimed, then
    installs from it alone.
    """
    venv = make_venv(base_python, work)
    if wheelhouse:
        subprocess.run([os.path.join(venv, 'bin', 'python'), '-m', 'pip', 'download',
                        '--quiet', '--cache-dir', cache_dir, '-d', wheelhouse] + REQUIREMENTS,
                       check=True, env=clean_env(), stdin=subprocess.DEVNULL)
    start = time.perf_counter()
    subprocess.run(install_command(installer, uv, venv, cache_dir, wheelhouse), check=True,
                   env=clean_env(), stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def directory_mb(path: str) -> float:
    return sum(os.path.getsize(os.path.join(folder, name))
               for folder, _, names in os.walk(path) for name in names
               if not os.path.islink(os.path.join(folder, name))) / 1e6


def version(cmd: Sequence[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True,
                          env=clean_env()).stdout.split()[1]


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--uv', required=True, help='the uv binary to measure')
    parser.add_argument('--python', default=getattr(sys, '_base_executable', sys.executable),
                        help='interpreter the venvs are made from (default: this one\'s base)')
    parser.add_argument('--repeats', type=int, default=1,
                        help='cold+warm pairs per installer (each cold one downloads ~600 MB)')
    parser.add_argument('--work-dir', default=None, help='scratch space (default: a temp dir)')
    args = parser.parse_args(argv)
    loads: List[float] = []
    runs: Dict[Installer, Dict[str, List[float]]] = {
        name: dict({kind: [] for kind in KINDS[name]}, cache_mb=[]) for name in INSTALLERS}
    with tempfile.TemporaryDirectory(dir=args.work_dir, prefix='install-bench-') as work:
        venv_pip = version([os.path.join(make_venv(args.python, work), 'bin', 'python'),
                            '-m', 'pip', '--version'])
        for repeat in range(args.repeats):
            for installer in (INSTALLERS if repeat % 2 == 0 else INSTALLERS[::-1]):
                cache_dir = tempfile.mkdtemp(dir=work, prefix='cache-%s-' % installer)
                for kind in KINDS[installer]:
                    loads.append(os.getloadavg()[0])
                    wheelhouse = (tempfile.mkdtemp(dir=work, prefix='wheelhouse-')
                                  if kind == 'wheelhouse' else None)
                    seconds = timed_install(installer, args.uv, args.python, cache_dir, work,
                                            wheelhouse)
                    runs[installer][kind].append(seconds)
                    print('%s %s cache: %.1f s' % (installer, kind, seconds), flush=True)
                    if kind == 'warm':
                        runs[installer]['cache_mb'].append(directory_mb(cache_dir))
    machine = dict(common.machine_info(), load_average=[round(max(loads), 2)] * 3)
    results: Dict[str, Any] = {
        'machine': machine, 'load_average_range': [round(min(loads), 2), round(max(loads), 2)],
        'python': version([args.python, '--version']),
        'pip': venv_pip,
        'uv': version([args.uv, '--version']), 'installers': {}}
    rows = []
    for installer, measured in runs.items():
        summary: Dict[str, Any] = {kind: common.summarize(measured[kind])
                                   for kind in KINDS[installer]}
        summary['cache_mb'] = round(max(measured['cache_mb']))
        results['installers'][installer] = summary
        rows.append([installer] + ['%.1f (%.1f-%.1f)' % (s['median'], s['min'], s['max'])
                                   if s else '' for s in (summary.get(kind) for kind in
                                                          KINDS['pip'])]
                    + [summary['cache_mb']])
    common.finish('install', results,
                  'Install the pinned requirements: seconds (median, range)',
                  ['installer', 'cold cache', 'warm cache', 'local wheelhouse',
                   'cache MB after warm'], rows)


if __name__ == '__main__':
    main()
