# mqgather's image: the worker, the bridge and the CLI (target "app"), and the analytics
# job with a Java runtime for Spark (target "analytics").
#
# The IBM MQ adapter needs IBM's redistributable client library (libmqm), which no
# package registry offers: the build downloads it from MQ_REDIST_URL (IBM's public
# redist archive by default) and builds the ibmmq package against it.
FROM python:3.11-slim AS base
ARG MQ_REDIST_URL=https://public.dhe.ibm.com/ibmdl/export/pub/software/websphere/messaging/mqdev/redist/9.4.1.0-IBM-MQC-Redist-LinuxX64.tar.gz
# MQCCSID: the MQ client takes the text it passes (property names among it) as UTF-8,
# whatever the locale; the `ibmmq` library reads property names back as UTF-8.
ENV MQ_FILE_PATH=/opt/mqm \
    LD_LIBRARY_PATH=/opt/mqm/lib64 \
    MQCCSID=1208 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential curl ca-certificates \
 && mkdir -p /opt/mqm \
 && curl -fsSL "$MQ_REDIST_URL" | tar -xz -C /opt/mqm \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mqgather ./mqgather
COPY bridge ./bridge
COPY workflows ./workflows
COPY activities ./activities
COPY workers ./workers
COPY analytics ./analytics

FROM base AS app
RUN pip install --no-cache-dir '.[ibmmq,otel]' \
 && python -m compileall -q mqgather bridge workflows activities workers \
 && useradd --uid 1001 --create-home mqgather
USER 1001
# Prometheus /metrics of the worker (9464) or the bridge (9465), when enabled.
EXPOSE 9464 9465
ENTRYPOINT ["mqgather"]
CMD ["--help"]

FROM base AS analytics
# The Spark the cluster runs (docker-compose.yml's spark-master and spark-worker): a
# driver and its executors of different versions do not work together.
ARG SPARK_VERSION=4.3.0
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-cache-dir '.[analytics]' "pyspark==${SPARK_VERSION}" \
 && useradd --uid 1001 --create-home mqgather \
 && install -d -o 1001 -m 700 /var/lib/mqgather/keys
USER 1001
ENTRYPOINT ["mqgather"]
CMD ["analyze", "--help"]
