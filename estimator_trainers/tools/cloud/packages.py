"""Python packages in fresh virtualenvs: the install, with its conflicts named.

`install` pip-installs archives into a new virtualenv layered over the
packages of a running environment (a `.pth` file naming its site-packages
as plain path entries), so what that environment has (TensorFlow, this
project's pins) counts as installed and only the rest is resolved, with
this project's constraints (`constraints.txt` in a checkout, `PIP_CONSTRAINT`
in the image). Three callers:

- the pre-submit checks of a user's package, layered over the environment
  running the submission, standing for the image (`source_checks` then
  reads the module without running it);
- the rehearsal, which installs what a job's pools install;
- `bootstrap`, in the image at a job's start-up, layered over the image.

A requirement that cannot be met is named in one line before pip runs when
the package's own metadata shows it (`requirement_conflicts`: against this
project's pins), else from pip's account of the conflict. A pin that is
this project's and not TensorFlow's may be lifted for a package with
`unpinned` (`--unpin NAME`); the install then checks that every installed
distribution's requirements still hold (TensorFlow's among them).
"""
import email.parser
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from typing import Iterable, Mapping, Optional, Sequence, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from estimator_trainers.errors import UserInputError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
CONSTRAINTS = os.path.join(REPO_ROOT, 'constraints.txt')
# What the image's TensorFlow is, with what comes with it: a package cannot
# choose another version of these (`--unpin` does not apply).
TENSORFLOW_VERSION = '2.15.1'
TENSORFLOW_FAMILY = ('tensorflow', 'tensorflow-cpu', 'tensorflow-gpu', 'tf-nightly',
                     'tensorflow-intel', 'tensorflow-estimator', 'keras', 'tensorboard',
                     'tensorflow-io-gcs-filesystem')
# A package's metadata file is a few KiB.
MAX_METADATA_BYTES = 1024 * 1024
_PIN_RE = re.compile(r'^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)\s*(;[^#]*)?')
_CONFLICT_RE = re.compile(r'The conflict is caused by:\n((?:[ \t]+\S.*\n?)+)')


def environment_layers() -> list[str]:
    """This interpreter's own site-packages (not what their .pth files add, so an
    editable checkout stays out)."""
    return list(dict.fromkeys(sysconfig.get_paths()[k] for k in ('purelib', 'platlib')))


def path_layers() -> list[str]:
    """Every site-packages directory on `sys.path` (a virtualenv's own and the
    layers it was given): what a nested virtualenv must see."""
    return list(dict.fromkeys(p for p in sys.path if os.path.basename(p) in (
        'site-packages', 'dist-packages') and os.path.isdir(p)))


def constraint_files(environ: Mapping[str, str]) -> list[str]:
    """This project's constraints files: `constraints.txt` of a checkout, and
    `PIP_CONSTRAINT` (the image sets it)."""
    files = [CONSTRAINTS] if os.path.isfile(CONSTRAINTS) else []
    files += [f for f in (environ.get('PIP_CONSTRAINT') or '').split() if f not in files]
    return files


def pins(files: Iterable[str]) -> dict[str, tuple[str, str]]:
    """{canonical name: (name, version)} of the `name==version` lines that apply here."""
    from packaging.markers import Marker  # pylint: disable=g-import-not-at-top
    found: dict[str, tuple[str, str]] = {}
    for path in files:
        try:
            with open(path, encoding='utf-8') as f:
                lines = f.read(MAX_METADATA_BYTES).splitlines()
        except OSError:
            continue
        for line in lines:
            match = _PIN_RE.match(line)
            if match and (not match.group(3) or Marker(match.group(3)[1:].strip()).evaluate()):
                found[canonicalize_name(match.group(1))] = (match.group(1), match.group(2))
    return found


def requirements(archive: str) -> list[Requirement]:
    """The requirements an sdist or a wheel declares (`Requires-Dist`,
    `requires.txt`), without extras' and with markers that apply here."""
    texts: list[tuple[str, str]] = []
    try:
        if archive.endswith(('.whl', '.zip')):
            with zipfile.ZipFile(archive) as zf:
                texts += [('metadata', zf.open(i).read(MAX_METADATA_BYTES).decode(
                    'utf-8', 'replace')) for i in zf.infolist()
                          if i.filename.endswith('.dist-info/METADATA')]
        else:
            with tarfile.open(archive, 'r:*') as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    parts = member.name.split('/')
                    if len(parts) == 2 and parts[1] == 'PKG-INFO':
                        kind = 'metadata'
                    elif parts[-1] == 'requires.txt' and parts[-2].endswith('.egg-info'):
                        kind = 'requires'
                    else:
                        continue
                    data = tar.extractfile(member)
                    assert data is not None  # a regular file's member
                    texts.append((kind, data.read(MAX_METADATA_BYTES).decode('utf-8',
                                                                             'replace')))
    except (OSError, tarfile.TarError, zipfile.BadZipFile):
        return []
    found: list[Requirement] = []
    for kind, text in texts:
        if kind == 'metadata':
            lines = email.parser.Parser().parsestr(text).get_all('Requires-Dist') or []
        else:
            lines = []
            for line in text.splitlines():
                if line.startswith('['):
                    break  # extras follow
                lines.append(line)
        for line in lines:
            try:
                requirement = Requirement(line.strip())
            except InvalidRequirement:
                continue
            if requirement.marker and not requirement.marker.evaluate({'extra': ''}):
                continue
            found.append(requirement)
    return list({str(r): r for r in found}.values())


def requirement_conflicts(archive: str, pinned: Mapping[str, tuple[str, str]],
                          unpinned: Sequence[str] = ()) -> Optional[str]:
    """The first requirement of `archive` that this project's `pinned` versions
    do not meet, as one sentence, or None."""
    name = os.path.basename(archive)
    for requirement in requirements(archive):
        key = canonicalize_name(requirement.name)
        if key not in pinned or key in {canonicalize_name(u) for u in unpinned}:
            continue
        pin_name, version = pinned[key]
        if requirement.specifier.contains(version, prereleases=True):
            continue
        if key in TENSORFLOW_FAMILY:
            return ('%s requires %s, but the job runs TensorFlow %s (with %s==%s), the last '
                    'release that ships tf.estimator%s; drop %s from its requirements '
                    '(install_requires / REQUIRED_PACKAGES in setup.py): the image has it'
                    % (name, requirement, TENSORFLOW_VERSION, pin_name, version,
                       _tf1_note(requirement), requirement.name))
        return ('%s requires %s, which conflicts with this project\'s pin %s==%s '
                '(constraints.txt); pass --unpin %s to let the package\'s requirement win '
                '(--rehearse checks that TensorFlow %s still runs with it)'
                % (name, requirement, pin_name, version, requirement.name,
                   TENSORFLOW_VERSION))
    return None


def _tf1_note(requirement: Requirement) -> str:
    one = [spec for spec in requirement.specifier if spec.version.startswith('1.')]
    return (': TensorFlow 1.x has no release for the image\'s Python, and 2.15 runs 1.x '
            'code through tf.compat.v1' if one else '')


def install(archives: Union[str, Sequence[str]], venv_dir: str, environ: Mapping[str, str],
            layers: Optional[Sequence[str]] = None, what: Optional[str] = None,
            unpinned: Sequence[str] = ()) -> str:
    """pip-installs `archives` (together) into a fresh virtualenv; returns its python.

    Args:
      archives: sdists or wheels (local paths).
      venv_dir: where the virtualenv goes (must not exist yet).
      environ: the environment pip runs with.
      layers: directories the virtualenv sees as installed (default:
        `environment_layers`).
      what: how to name the archives in an error (default: their file names).
      unpinned: requirements the archives may choose over this project's pins.

    Raises:
      UserInputError: a requirement conflicts with a pin, or pip failed (the
        conflict it found, or its first `ERROR:` line), or an unpinned
        requirement breaks an installed distribution's own requirements.
    """
    archives = [archives] if isinstance(archives, str) else list(archives)
    what = what or ', '.join(os.path.basename(a) for a in archives)
    files = constraint_files(environ)
    pinned = pins(files)
    for archive in archives:
        conflict = requirement_conflicts(archive, pinned, unpinned)
        if conflict:
            raise UserInputError(conflict)
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv_dir],
                   check=True, capture_output=True)
    python = os.path.join(venv_dir, 'bin', 'python')
    site = subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()'
                           '["purelib"])'], check=True, capture_output=True,
                          text=True).stdout.strip()
    with open(os.path.join(site, '_executor_image.pth'), 'w') as f:
        f.write(''.join(path + '\n' for path in (layers or environment_layers())))
    env = dict(environ)
    env.pop('PYTHONPATH', None)
    env.pop('PIP_CONSTRAINT', None)
    command = [sys.executable, '-m', 'pip', '--python', python, 'install',
               '--disable-pip-version-check', '--no-build-isolation', *archives]
    for path in _without(files, unpinned, venv_dir):
        command += ['-c', path]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise UserInputError('installing %s into a fresh virtualenv failed: %s'
                             % (what, _pip_problem(proc, unpinned)))
    if unpinned:
        check = subprocess.run([sys.executable, '-m', 'pip', '--python', python, 'check',
                                '--disable-pip-version-check'], env=env,
                               capture_output=True, text=True, check=False)
        if check.returncode:
            broken = [line for line in check.stdout.splitlines() if line.strip()]
            raise UserInputError('--unpin %s: with the package\'s requirements installed, %s'
                                 % (','.join(unpinned), broken[0] if broken else
                                    'pip check fails'), flag='--unpin')
    return python


def _without(files: list[str], unpinned: Sequence[str], work_dir: str) -> list[str]:
    """`files`, with the lines of `unpinned` requirements left out of copies."""
    if not unpinned:
        return files
    names = {canonicalize_name(name) for name in unpinned}
    kept: list[str] = []
    for index, path in enumerate(files):
        with open(path, encoding='utf-8') as f:
            lines = f.read().splitlines()
        copy = '%s-constraints-%d.txt' % (work_dir, index)
        with open(copy, 'w', encoding='utf-8') as f:
            f.write(''.join(line + '\n' for line in lines if not (
                (pin := _PIN_RE.match(line)) and canonicalize_name(pin.group(1)) in names)))
        kept.append(copy)
    return kept


def _pip_problem(proc: 'subprocess.CompletedProcess[str]', unpinned: Sequence[str]) -> str:
    """pip's reason in one line: the conflict it names, else its first `ERROR:`."""
    match = _CONFLICT_RE.search(proc.stdout + proc.stderr)
    if match:
        causes = [line.strip() for line in match.group(1).splitlines() if line.strip()]
        text = '; '.join(cause.replace('The user requested (constraint)',
                                       'this project pins') for cause in causes)
        constrained = [c.split()[-1] for c in causes if 'constraint' in c]
        names = [re.split(r'[=<>!~ ]', c, 1)[0] for c in constrained]
        lift = [n for n in names if canonicalize_name(n) not in TENSORFLOW_FAMILY]
        hint = ('; pass --unpin %s to let the package\'s requirement win' % ','.join(lift)
                if lift and not unpinned else '')
        return 'conflicting requirements: %s%s' % (text, hint)
    errors = re.findall(r'^ERROR: (.*)$', proc.stderr, re.M)
    lines = proc.stderr.strip().splitlines() or ['exit code %d' % proc.returncode]
    return errors[0] if errors else lines[-1]
