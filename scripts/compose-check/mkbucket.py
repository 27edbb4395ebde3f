"""Create the media bucket, as minio-init's `mc mb --ignore-existing` does; retry until the
S3 server answers."""

import os
import sys
import time

import boto3
from botocore.exceptions import BotoCoreError, ClientError

client = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1",
                      aws_access_key_id=os.environ["MINIO_ROOT_USER"],
                      aws_secret_access_key=os.environ["MINIO_ROOT_PASSWORD"])
for _ in range(60):
    try:
        client.create_bucket(Bucket=sys.argv[1])
        break
    except client.exceptions.BucketAlreadyOwnedByYou:
        break
    except (BotoCoreError, ClientError) as error:
        print(f"waiting for S3: {error}", flush=True)
        time.sleep(1)
else:
    sys.exit("the S3 server never answered")
print(f"bucket {sys.argv[1]} ready")
