# Our vLLM backend as a small image for Kubernetes: the chart's init container copies /backend over the
# Triton image's stock backend (/opt/tritonserver/backends/vllm), as docker-compose.yml mounts ./backend there.
#   docker build -f deploy/backend.Dockerfile -t triton-vllm-gateway-backend:0.1.0 .
FROM busybox:1.37
COPY backend /backend
USER 65534
