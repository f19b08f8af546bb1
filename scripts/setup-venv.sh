#!/usr/bin/env bash
# Creates or refreshes .venv with the pinned requirements.
#
# Sourced by the other scripts; safe to run on its own. Reinstalls only when a
# requirements/constraints file changed since the last successful install.
#
# Usage: bash scripts/setup-venv.sh [--dev]
set -euo pipefail

_repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.11 python3 python; do
    [[ -z "${candidate}" ]] && continue
    command -v "${candidate}" >/dev/null 2>&1 || continue
    if "${candidate}" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      echo "${candidate}"
      return 0
    fi
  done
  return 1
}

setup_venv() {
  local extra="${1:-}"
  local venv="${_repo_root}/.venv"
  local reqs=("${_repo_root}/requirements.txt")
  [[ "${extra}" == "--dev" ]] && reqs=("${_repo_root}/requirements-dev.txt")

  if [[ ! -x "${venv}/bin/python" ]]; then
    local python
    if ! python="$(find_python)"; then
      echo "error: Python 3.11 is required (TensorFlow 2.15.1, the last release with tf.estimator, has no wheels for other versions); install python3.11 or set PYTHON=/path/to/python3.11" >&2
      return 1
    fi
    echo "Creating ${venv} with ${python}" >&2
    "${python}" -m venv "${venv}"
  fi
  if ! "${venv}/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "error: ${venv} is not a Python 3.11 environment; remove it and rerun" >&2
    return 1
  fi

  local stamp="${venv}/.installed-${extra#--}"
  local digest
  digest="$(cat "${reqs[@]}" "${_repo_root}/requirements.txt" \
    "${_repo_root}/constraints.txt" "${_repo_root}/setup.py" | sha256sum | cut -d' ' -f1)"
  if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${digest}" ]]; then
    return 0
  fi
  echo "Installing pinned requirements into ${venv} (first run takes a few minutes)" >&2
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "${reqs[0]}" -c "${_repo_root}/constraints.txt"
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-deps --no-build-isolation --config-settings editable_mode=compat \
    -e "${_repo_root}"
  echo "${digest}" > "${stamp}"
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
  setup_venv "${1:-}"
fi
