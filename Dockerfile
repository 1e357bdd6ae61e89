# execd in a container: the daemon is PID 1, in the foreground, and owns the
# container's private cgroup namespace (jobs get <slot>.slice below it).
#
# Build:   docker build -t execd .
#          (no Docker engine or registry: README.md, "As a service", has the buildah
#          commands, base image included)
# Run:     docker run -d --name execd \
#            --cgroupns=private --privileged \
#            --tmpfs /run --tmpfs /tmp \
#            -v execd-state:/var/lib/execd \
#            execd
#  --cgroupns=private  gives execd a cgroup namespace whose root is the container's
#                      own cgroup, so it can create job cgroups without seeing the host's;
#  --privileged        lets it write cgroup files (Docker mounts /sys/fs/cgroup read-only
#                      otherwise) and switch to the job users;
#  the volume          keeps execd's state (EXECUTE, SPOOL) across container restarts.
# Stop:    docker stop -t 900 execd   (SIGTERM = graceful: retire, then vacate jobs)
# Offline build: put wheels of execd and its dependencies for CPython 3.11 in ./wheels
# (`pip wheel -w wheels .` on a machine with the network); pip then installs from them
# alone. A base that already has python3 and python3-venv skips apt as well.
FROM debian:bookworm-slim

RUN if ! python3 -c 'import ensurepip' 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi

# .dockerignore lets through only pyproject.toml, README.md, execd/, etc/execd/, wheels/.
COPY . /opt/execd/src/
COPY etc/execd /etc/execd
# In a container execd logs to stderr, for `docker logs`.
RUN mkdir -p /etc/execd/config.d \
    && printf '# The image logs to stderr (docker logs).\nEXECD_LOG = -\n' \
        > /etc/execd/config.d/00-container
RUN python3 -m venv /opt/execd \
    && if [ -d /opt/execd/src/wheels ]; then \
        /opt/execd/bin/pip install --no-cache-dir --no-index \
            --find-links /opt/execd/src/wheels execd; \
    else \
        /opt/execd/bin/pip install --no-cache-dir /opt/execd/src; \
    fi \
    && rm -rf /opt/execd/src

ENV PATH=/opt/execd/bin:$PATH \
    CONDOR_CONFIG=/etc/execd/execd_config \
    PYTHONUNBUFFERED=1
STOPSIGNAL SIGTERM
ENTRYPOINT ["execd", "run"]
