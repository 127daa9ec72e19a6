# The gateway alone: no vLLM, no torch. Triton runs in its own container (docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN pip install --no-cache-dir .
ENV GATEWAY_HOST=0.0.0.0 GATEWAY_PORT=9000
EXPOSE 9000
USER nobody
CMD ["python", "-m", "gateway"]
