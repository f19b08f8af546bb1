#!/usr/bin/env bash
# Sets up .venv (with test extras) and runs the test suite.
#
# Usage: bash scripts/test.sh [pytest args...]
#   bash scripts/test.sh -m "not slow"     # skip the multi-process cluster tests
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/setup-venv.sh
source "${repo_root}/scripts/setup-venv.sh"
setup_venv --dev

cd "${repo_root}"
exec "${repo_root}/.venv/bin/python" -m pytest "$@"
