# Sourced by serve.sh and test.sh: make .venv at the repo root and install the project into it.
# EXTRAS picks the optional dependencies ("" or "dev").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "bootstrap: installing python3-venv (Debian)" >&2
  as_root apt-get update -qq && as_root apt-get install -y -qq python3-venv >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
STAMP=".venv/.narrator-installed-${EXTRAS:-base}"
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ constraints.txt -nt "$STAMP" ]; then
  echo "bootstrap: installing Narrator${EXTRAS:+ [$EXTRAS]} into .venv" >&2
  if ! { .venv/bin/python -m pip install -q --upgrade pip &&
         .venv/bin/python -m pip install -q -c constraints.txt -e ".${EXTRAS:+[$EXTRAS]}"; } >.venv/install.log 2>&1
  then
    cat .venv/install.log >&2
    exit 1
  fi
  touch "$STAMP"
fi
