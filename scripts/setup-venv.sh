#!/usr/bin/env bash
# Creates or refreshes .venv with the pinned requirements.
#
# Sourced by the other scripts; safe to run on its own. Reinstalls only when a
# requirements/constraints file changed since the last successful install.
#
# Python: TensorFlow 2.15.1, the last release with tf.estimator, has wheels for
# CPython 3.9-3.11, and the pinned Google client libraries have none for 3.9:
# so 3.10 or 3.11. .venv is made with $PYTHON when set, else with python3.11,
# else python3.10 from PATH. Where there is neither, uv (pinned below; the one
# on PATH, else bootstrapped from PyPI into a private directory) installs a
# managed CPython 3.11 and .venv is made from it. Installs go through `uv pip`
# when uv is there, else through pip, with the same pins and constraints.
#
# Usage: bash scripts/setup-venv.sh [--dev | --experiments]
# (by default requirements-tools.txt: the runtime plus what the scripts need
# on this machine, the local storage of a rehearsal without an account;
# --experiments adds the plotting requirements of scripts/experiment.sh;
# --dev the test requirements, which include those.)
set -euo pipefail

_repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_uv_version="0.13.8"
_tools_dir="${XDG_CACHE_HOME:-${HOME}/.cache}/estimator-trainers"
_uv_dir="${_tools_dir}/uv-${_uv_version}"
_managed_python_dir="${UV_PYTHON_INSTALL_DIR:-${XDG_DATA_HOME:-${HOME}/.local/share}/estimator-trainers/python}"
_ways_out="install python3.11 (or set PYTHON=/path/to/python3.10 or 3.11), or run 'uv python install 3.11' or 'pyenv install 3.11' and rerun, or use the Docker image (docker build -t estimator-trainers .)"

# Prints "3.N" for the interpreter $1, nothing when it does not run.
python_version() {
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

supported_python() {
  [[ "$(python_version "$1")" =~ ^3\.(10|11)$ ]]
}

# Prints the path of a Python 3.11 on PATH, else of a 3.10.
find_python() {
  local minor candidate
  for minor in 11 10; do
    for candidate in "python3.${minor}" python3 python; do
      command -v "${candidate}" >/dev/null 2>&1 || continue
      if [[ "$(python_version "${candidate}")" == "3.${minor}" ]]; then
        command -v "${candidate}"
        return 0
      fi
    done
  done
  return 1
}

# Prints a uv: the one on PATH, else the pinned one in the private tool dir.
find_uv() {
  if command -v uv 2>/dev/null; then
    return 0
  fi
  [[ -x "${_uv_dir}/bin/uv" ]] && echo "${_uv_dir}/bin/uv"
}

# Installs the pinned uv into the private tool dir with the Python $1 (pip
# --target: no venv, nothing in its site-packages; without pip, fetch_uv.py
# with the standard library); prints its path.
bootstrap_uv() {
  local python="$1" staging
  mkdir -p "${_tools_dir}"
  staging="$(mktemp -d "${_uv_dir}.XXXXXX")"
  if "${python}" -m pip --version >/dev/null 2>&1; then
    "${python}" -m pip install --quiet --disable-pip-version-check \
      --target "${staging}" "uv==${_uv_version}" >&2
  else
    "${python}" "${_repo_root}/scripts/fetch_uv.py" "${_uv_version}" "${staging}" >&2
  fi || {
    rm -rf "${staging}"
    return 1
  }
  rm -rf "${_uv_dir}"
  mv "${staging}" "${_uv_dir}"
  echo "${_uv_dir}/bin/uv"
}

# No Python 3.10 or 3.11 on PATH: makes $1 (.venv) from a uv-managed CPython 3.11.
venv_from_managed_python() {
  local venv="$1" uv bootstrap_python="" candidate log="${_tools_dir}/setup.log"
  mkdir -p "${_tools_dir}"
  uv="$(find_uv || true)"
  if [[ -n "${uv}" ]]; then
    echo "No Python 3.10 or 3.11 on PATH: installing a managed CPython 3.11 with ${uv} into ${_managed_python_dir} for ${venv}" >&2
  else
    for candidate in python3 python python3.14 python3.13 python3.12; do
      if command -v "${candidate}" >/dev/null 2>&1 && [[ -n "$(python_version "${candidate}")" ]]; then
        bootstrap_python="$(command -v "${candidate}")"
        break
      fi
    done
    if [[ -z "${bootstrap_python}" ]]; then
      echo "error: no Python 3.10 or 3.11 on PATH, nor any Python to install uv with; ${_ways_out}" >&2
      return 1
    fi
    echo "No Python 3.10 or 3.11 on PATH: installing uv ${_uv_version} from PyPI into ${_uv_dir} (with ${bootstrap_python}), then a managed CPython 3.11 into ${_managed_python_dir} for ${venv}" >&2
  fi
  if ! {
    { [[ -n "${uv}" ]] || uv="$(bootstrap_uv "${bootstrap_python}")"; } &&
      UV_PYTHON_INSTALL_DIR="${_managed_python_dir}" "${uv}" python install --quiet --no-bin 3.11 &&
      UV_PYTHON_INSTALL_DIR="${_managed_python_dir}" "${uv}" venv --quiet --seed \
        --managed-python --python 3.11 "${venv}"
  } >"${log}" 2>&1; then
    rm -rf "${venv}"
    echo "error: installing Python 3.11 with uv failed (offline? details in ${log}); ${_ways_out}" >&2
    return 1
  fi
}

# Installs into the venv whose python is $2 with `uv pip` of the uv $1, or
# with pip where $1 is empty; the rest are the install arguments. uv compiles
# bytecode only when asked (pip always does): without it, where
# PYTHONDONTWRITEBYTECODE is set, every process compiled TensorFlow's modules
# again (importing it took 6.3 CPU-s instead of 2.2).
install_into() {
  local uv="$1" python="$2"
  shift 2
  if [[ -n "${uv}" ]]; then
    "${uv}" pip install --quiet --compile-bytecode --python "${python}" "$@"
  else
    "${python}" -m pip install --quiet --disable-pip-version-check "$@"
  fi
}

setup_venv() {
  local extra="${1:-}"
  local venv="${_repo_root}/.venv"
  local reqs=("${_repo_root}/requirements-tools.txt")
  [[ "${extra}" == "--dev" ]] && reqs=("${_repo_root}/requirements-dev.txt")
  [[ "${extra}" == "--experiments" ]] && reqs=("${_repo_root}/requirements-experiments.txt")

  if [[ ! -x "${venv}/bin/python" ]]; then
    local python version
    if [[ -n "${PYTHON:-}" ]]; then
      python="${PYTHON}"
      if ! supported_python "${python}"; then
        version="$(python_version "${python}")"
        echo "error: PYTHON=${python} is ${version:+Python }${version:-not a Python that runs}; expected Python 3.10 or 3.11 (unset PYTHON to let the set-up find or install one)" >&2
        return 2
      fi
    elif ! python="$(find_python)"; then
      venv_from_managed_python "${venv}" || return 1
    fi
    if [[ -n "${python:-}" ]]; then
      echo "Creating ${venv} with Python $(python_version "${python}") (${python})" >&2
      "${python}" -m venv "${venv}"
    fi
  fi
  if ! supported_python "${venv}/bin/python"; then
    echo "error: ${venv} is not a Python 3.10 or 3.11 environment; remove it and rerun" >&2
    return 1
  fi

  local stamp="${venv}/.installed-${extra#--}"
  local digest
  digest="$(cat "${reqs[@]}" "${_repo_root}/requirements.txt" \
    "${_repo_root}/requirements-tools.txt" \
    "${_repo_root}/requirements-experiments.txt" \
    "${_repo_root}/constraints.txt" "${_repo_root}/pyproject.toml" | sha256sum | cut -d' ' -f1)"
  if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${digest}" ]]; then
    return 0
  fi
  local uv
  uv="$(find_uv || true)"
  echo "Installing pinned requirements into ${venv} with ${uv:+uv pip (}${uv:-pip}${uv:+)} (first run takes a few minutes)" >&2
  install_into "${uv}" "${venv}/bin/python" -r "${reqs[0]}" -c "${_repo_root}/constraints.txt"
  # A PEP 660 editable install (pyproject.toml) built by the venv's own
  # setuptools; before setuptools 70.1 that needs `wheel`, which the pinned
  # requirements bring (TensorFlow -> astunparse).
  install_into "${uv}" "${venv}/bin/python" --no-deps --no-build-isolation \
    --config-settings editable_mode=compat -e "${_repo_root}"
  echo "${digest}" > "${stamp}"
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
  setup_venv "${1:-}"
fi
