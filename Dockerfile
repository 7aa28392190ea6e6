# hetero-exporter: one image for the node agent (DaemonSet, `run`) and the scheduler extender
# (Deployment, `scheduler-extender`). Build: scripts/build-image.sh --tag NAME (buildah, no daemon),
# or docker build -t ghcr.io/hetero-exporter/hetero-exporter:0.1.0 .
# The release workflow (.github/workflows/release.yml) builds amd64 and arm64 on version tags.
#
# Both stages use the same base image, tag pinned: the builder's virtualenv links to that stage's
# python3, which has to be the same interpreter at the same path in the runtime. BASE is a build
# argument only so that scripts/build-image.sh can hand in a stand-in where no image registry is
# reachable (Debian bookworm's own python3, debootstrapped); the default is the image we ship.
ARG BASE=python:3.11.11-slim-bookworm

FROM ${BASE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# What setuptools needs to build the wheel: pyproject.toml, the readme it names, the two package
# trees (package-data brings their yaml/json/proto files). .dockerignore keeps everything else out.
COPY pyproject.toml README.md ./
COPY hetero_exporter/ hetero_exporter/
COPY collectors/ collectors/

# Every dependency of the `all` extras has a py3-none or manylinux wheel for amd64 and arm64
# (amdsmi is a pure-Python binding: libamd_smi.so is the host's ROCm, found at run time), so the
# builder needs no compiler either. The venv has no pip: the base image's pip installs into it.
# `python3 -m pip`, not `python`/`pip`: Debian's python3 (the stand-in base) has no unversioned names.
# pip compiles the installed modules' bytecode once here: the containers run with a read-only root
# filesystem and PYTHONDONTWRITEBYTECODE, so nothing is written at run time.
RUN python3 -m pip wheel --no-cache-dir --wheel-dir /wheels ".[all]" \
    && python3 -m venv --without-pip /opt/venv \
    && python3 -m pip --python /opt/venv/bin/python install --no-cache-dir --no-index --find-links /wheels /wheels/*.whl \
    && /opt/venv/bin/hetero-exporter version


FROM ${BASE}

# Set by the release workflow; VERSION's default is pyproject.toml's version (tests/test_dockerfile.py).
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown

# OCI image spec annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md)
LABEL org.opencontainers.image.title="hetero-exporter" \
      org.opencontainers.image.description="Accelerator telemetry and health agent for Kubernetes nodes, and its scheduler extender" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/hetero-exporter/hetero-exporter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"

ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Only the virtualenv crosses over: no wheels, build tree, pip cache or apt lists (nothing is
# apt-installed). The vendor CLIs and libraries (nvidia-smi, libnvidia-ml.so, libamd_smi.so, npu-smi,
# cnmon, ...) are the host's: the NVIDIA container runtime mounts NVML, the others are read from
# the host root the DaemonSet mounts read-only at /host/root. A tool that must run inside the host
# root goes through /usr/sbin/chroot: Debian's coreutils (essential, so in every slim image) has
# it, and the check below fails the build on a base image without it.
COPY --from=builder /opt/venv /opt/venv
RUN test -x /usr/sbin/chroot && hetero-exporter version

# No USER: the agent runs as root (runAsUser: 0 in deploy/base/daemonset.yaml) because it opens the
# vendors' device nodes (/dev/nvidia*, /dev/kfd, /dev/davinci*, ...) and chroots into the host root.
# The extender Deployment runs this same image as 65534 through its securityContext; the venv is
# world-readable, so it needs nothing from the image.
#
# No HEALTHCHECK: Kubernetes ignores it; the manifests probe /healthz and /readyz instead.

# 9400: the agent's /metrics; 9401: the scheduler extender; 9402: the extender's metrics-only port
EXPOSE 9400 9401 9402
ENTRYPOINT ["hetero-exporter"]
CMD ["run"]
