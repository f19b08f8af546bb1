"""Files that look like credentials, which nothing the tools upload may carry.

A checkout often holds a `.env`, a downloaded service-account `key.json` or
a TLS key next to the code. Whatever goes into the image's build context (or
the package sdist) is uploaded to the bucket and baked into an image anyone
with read access to the repository can pull, so such files are kept out by
default: by their name (`PATTERNS`, gitignore syntax, matched at any depth)
or by what they hold (`content_reason`: a private key block, a Google
credentials JSON, an AWS secret key). The build context's own rules
(`.dockerignore`, `.gcloudignore`) can re-include one with a `!` line.
"""
import re
import tarfile
from typing import List, Optional, Tuple

import pathspec

# Named like a credential, at any depth (gitignore syntax).
PATTERNS = (
    # environment files with secrets (python-dotenv, direnv, docker compose)
    '*.env', '.env.*', '.env', '.envrc',
    # keys and keystores
    '*.pem', '*.key', '*.p12', '*.pfx', '*.jks', '*.keystore',
    'id_rsa', 'id_dsa', 'id_ecdsa', 'id_ed25519',
    # Google credentials: service-account keys, OAuth clients, gcloud's own files
    'key.json', '*-key.json', '*_key.json', 'keyfile.json', 'credentials.json',
    '*service-account*.json', '*service_account*.json', 'client_secret*.json',
    'application_default_credentials.json', '.config/gcloud/',
    # tools' credential stores
    '.netrc', '.pypirc', '.npmrc', '.git-credentials', '.dockercfg',
    '.docker/config.json', '.aws/', '.ssh/', '.gnupg/', '.kube/config',
    # Terraform state holds every secret of the resources it created
    '*.tfstate', '*.tfstate.backup',
)
_SPEC = pathspec.GitIgnoreSpec.from_lines(PATTERNS)

# What a credential file holds, looked for in its first `HEAD_BYTES`.
HEAD_BYTES = 64 * 1024
_CONTENTS = (
    (re.compile(rb'"type"\s*:\s*"(service_account|authorized_user|external_account|'
                rb'impersonated_service_account)"'), 'a Google credentials file'),
    (re.compile(rb'-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----'), 'holds a private key'),
    (re.compile(rb'(?i)aws_secret_access_key\s*[=:]'), 'holds an AWS secret key'),
)


def name_pattern(relpath: str) -> Optional[str]:
    """The `PATTERNS` entry `relpath` (a `/`-separated path) matches, or None."""
    result = _SPEC.check_file(relpath)
    if not result.include or result.index is None:
        return None
    return str(_SPEC.patterns[result.index].pattern)


def content_reason(head: bytes) -> Optional[str]:
    """Why the first bytes of a file look like a credential, or None."""
    for regex, reason in _CONTENTS:
        if regex.search(head):
            return reason
    return None


def reason(relpath: str, head: Optional[bytes] = None) -> Optional[str]:
    """Why `relpath` (with its first bytes `head`, if read) looks like a
    credential (`named like a credential (.env)`, `holds a private key`), or None."""
    pattern = name_pattern(relpath)
    if pattern:
        return 'named like a credential (%s)' % pattern
    return content_reason(head) if head else None


def in_archive(path: str) -> List[Tuple[str, str]]:
    """`(member name, reason)` for each file of the tar archive at `path` that
    looks like a credential."""
    found = []
    with tarfile.open(path) as tar:
        for member in tar:
            if member.isfile():
                f = tar.extractfile(member)
                assert f is not None, 'a regular file has contents'
                with f:
                    why = reason(member.name, f.read(HEAD_BYTES))
                if why:
                    found.append((member.name, why))
    return found
