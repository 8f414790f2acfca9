# gangpreempt: one image for the four services and the provision job.
#   docker build -t gangpreempt:0.1.0 .
#   docker run --rm gangpreempt:0.1.0 serve quota      # serve ingest|quota|victims|actuator
# Settings are GANGPREEMPT_* environment variables (README, "Configuration").

# The Python the tests run on; the dependencies pinned by requirements.lock
# (tools/lock_runtime.py): an image built today and one built next month hold the same code.
ARG PYTHON_IMAGE=python:3.11.7-slim

# --- build: the project as a wheel, installed with its dependencies into /opt/venv ---
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY libs ./libs
COPY services ./services
RUN /opt/venv/bin/pip install --upgrade pip \
 && /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --constraint requirements.lock /wheels/*.whl

# --- runtime: the venv only, run as an unprivileged numeric user ---
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 gangpreempt \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin gangpreempt
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GANGPREEMPT_HEALTH_PORT=8080
USER 10001:10001
# /healthz and /readyz
EXPOSE 8080
ENTRYPOINT ["gangpreempt"]
CMD ["serve", "ingest"]
