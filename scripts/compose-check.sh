#!/usr/bin/env bash
# The deployment as shipped, run for real: build Narrator's image from docker/Dockerfile, bring
# docker-compose.yml up with Podman and podman-compose, and use it through the API port
# (scripts/compose-check/check.py says what it checks). About 5 minutes from nothing on two
# cores, about 2 with the images built. Needs root (or sudo) for apt and Podman.
#
# No image registry is needed: the base image is a Debian bookworm root filesystem built with
# mmdebstrap from Debian's packages (cached as a tarball in .test-services/compose-check), and
# Postgres, Redis and the S3 server are stand-ins built on it from Debian's and PyPI's
# packages (scripts/compose-check/*.Containerfile, override.yml). Every container shares the
# host's network on loopback, on ports of its own (18000 for the API).
EXTRAS="dev" source "$(dirname "$0")/bootstrap.sh"
set -euo pipefail
HERE="$ROOT/scripts/compose-check"
WORK="$ROOT/.test-services/compose-check"
mkdir -p "$WORK"
.venv/bin/python -c "import podman_compose" 2>/dev/null ||
  .venv/bin/python -m pip install -q "podman-compose>=1.1"  # a .venv made before it was a dev tool

for tool in podman runc mmdebstrap; do
  command -v "$tool" >/dev/null && continue
  echo "compose-check: installing podman, runc and mmdebstrap (Debian)" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq podman runc mmdebstrap \
    >/dev/null
  break
done
# Podman as Debian ships it fails here on hybrid cgroups (crun) and on raising rlimits.
cat > "$WORK/containers.conf" <<'EOF'
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"

[containers]
default_ulimits = []
EOF
export CONTAINERS_CONF="$WORK/containers.conf"
podman() { as_root env CONTAINERS_CONF="$CONTAINERS_CONF" podman "$@"; }
have() { podman image exists "$1"; }

# The base: Debian bookworm with Python 3.11, then python:3.11-slim-bookworm's layout on it.
if ! have localhost/narrator-check/bookworm:latest; then
  if [ ! -s "$WORK/bookworm.tar" ]; then
    echo "compose-check: building a Debian bookworm root filesystem (mmdebstrap)" >&2
    as_root mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$WORK/bookworm.part.tar" http://deb.debian.org/debian
    mv "$WORK/bookworm.part.tar" "$WORK/bookworm.tar"
  fi
  podman import -q "$WORK/bookworm.tar" localhost/narrator-check/bookworm:latest >/dev/null
fi
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$HERE"/* "$context/"
cp /etc/ssl/certs/ca-certificates.crt "$context/"  # this host's trust store, for pip
build() { podman build -q --network host "$@" >/dev/null; }
echo "compose-check: building the images" >&2
build -f "$context/base.Containerfile" -t localhost/python:3.11-slim-bookworm "$context"
for standin in postgres redis s3; do
  have "localhost/narrator-check/$standin:latest" ||
    build -f "$context/$standin.Containerfile" -t "localhost/narrator-check/$standin:latest" \
      "$context"
done
# Narrator's image, from docker/Dockerfile unchanged but for its base.
build --build-arg BASE=localhost/python:3.11-slim-bookworm -f "$ROOT/docker/Dockerfile" \
  -t localhost/narrator:latest "$ROOT"

# docker/Dockerfile.gpu cannot be built here (its base, nvidia/cuda on Ubuntu 24.04, comes
# from a registry); its Python layer is resolved instead: `.[gpu]` under constraints.txt, on
# this base's Python 3.11 (the GPU image's is 3.12), without installing.
echo "compose-check: resolving docker/Dockerfile.gpu's packages (.[gpu], constraints.txt)" >&2
podman run --rm --network host -v "$ROOT:/src:ro" localhost/python:3.11-slim-bookworm sh -ec '
  mkdir /tmp/app && cd /src
  cp -r pyproject.toml README.md constraints.txt api core workers models storage migrations \
    narrator web /tmp/app/
  cd /tmp/app && pip install --dry-run --quiet -c constraints.txt ".[gpu]" >/dev/null'

compose_down() {
  as_root env CONTAINERS_CONF="$CONTAINERS_CONF" "$ROOT/.venv/bin/python" -m podman_compose \
    -f "$ROOT/docker-compose.yml" -f "$HERE/override.yml" -p narrator-check down -v \
    >/dev/null 2>&1 || true
}
trap 'compose_down; rm -rf "$context"' EXIT
as_root env CONTAINERS_CONF="$CONTAINERS_CONF" "$ROOT/.venv/bin/python" "$HERE/check.py"
