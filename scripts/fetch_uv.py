"""Fetches one uv release's binary from a package index, with the standard library only.

    python scripts/fetch_uv.py VERSION TARGET_DIR    # writes TARGET_DIR/bin/uv

For setup-venv.sh where the only Python has no pip (Debian's and Ubuntu's
python3 without python3-pip): reads the index's JSON listing of uv ($PIP_INDEX_URL,
default PyPI), picks the wheel for this OS and CPU, checks its sha256 and
extracts the binary. Runs on any Python 3.
"""
import hashlib
import io
import json
import os
import platform
import sys
import urllib.parse
import urllib.request
import zipfile


def platform_tags():
    """(platform tag prefix, CPU suffix) of the uv wheel that runs here."""
    machine = platform.machine().lower()
    if sys.platform == 'darwin':
        return 'macosx', 'arm64' if machine in ('arm64', 'aarch64') else 'x86_64'
    cpu = {'amd64': 'x86_64', 'arm64': 'aarch64'}.get(machine, machine)
    return ('manylinux' if platform.libc_ver()[0] == 'glibc' else 'musllinux'), cpu


def pick_wheel(files, version, tags):
    """The index entry of uv `version`'s wheel for `tags` (see `platform_tags`)."""
    prefix, cpu = tags
    for entry in files:
        name = entry['filename']
        if not (name.startswith('uv-%s-' % version) and name.endswith('.whl')):
            continue
        if any(tag.startswith(prefix) and tag.endswith('_' + cpu)
               for tag in name[:-len('.whl')].rsplit('-', 1)[1].split('.')):
            return entry
    raise SystemExit('no uv %s wheel for %s/%s in the index' % (version, prefix, cpu))


def main(version, target):
    index = os.environ.get('PIP_INDEX_URL', 'https://pypi.org/simple').rstrip('/') + '/uv/'
    request = urllib.request.Request(
        index, headers={'Accept': 'application/vnd.pypi.simple.v1+json'})
    with urllib.request.urlopen(request, timeout=60) as response:
        entry = pick_wheel(json.load(response)['files'], version, platform_tags())
    with urllib.request.urlopen(urllib.parse.urljoin(index, entry['url']), timeout=300) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != entry['hashes']['sha256']:
        raise SystemExit('%s: sha256 does not match the index' % entry['filename'])
    binary = os.path.join(target, 'bin', 'uv')
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(data)) as wheel, open(binary, 'wb') as out:
        out.write(wheel.read('uv-%s.data/scripts/uv' % version))
    os.chmod(binary, 0o755)


if __name__ == '__main__':
    main(*sys.argv[1:])
