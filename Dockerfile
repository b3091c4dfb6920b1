FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 CTXOBS_SERVE_STATIC=1
WORKDIR /app
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY ctxobs ctxobs
COPY core core
COPY config config
COPY ingest ingest
COPY insights insights
COPY replay replay
COPY alerts alerts
COPY templates templates
COPY static static
COPY manage.py ./
RUN pip install --no-cache-dir ".[server]"
RUN useradd --system ctxobs && chown -R ctxobs /app
USER ctxobs
EXPOSE 8000
