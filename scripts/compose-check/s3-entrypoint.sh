#!/bin/sh
# weed mini with every port named (S3 on $S3_PORT; the others next to it).
set -e
export AWS_ACCESS_KEY_ID="$MINIO_ROOT_USER" AWS_SECRET_ACCESS_KEY="$MINIO_ROOT_PASSWORD"
P="${S3_PORT:-9000}"
mkdir -p /data
exec weed mini -dir=/data -ip=127.0.0.1 -ip.bind=127.0.0.1 -s3.port="$P" \
  -s3.port.grpc=$((P + 1)) -master.port=$((P + 2)) -master.port.grpc=$((P + 3)) \
  -volume.port=$((P + 4)) -volume.port.grpc=$((P + 5)) -filer.port=$((P + 6)) \
  -filer.port.grpc=$((P + 7)) -admin.port=$((P + 8)) -admin.port.grpc=$((P + 9)) \
  -admin.ui=false -webdav=false -s3.port.iceberg=0 -s3.port.lance=0 \
  -master.telemetry=false
