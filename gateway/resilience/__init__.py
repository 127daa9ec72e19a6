"""Keeping the gateway responsive when Triton is slow or gone: deadlines per stream and a circuit breaker."""
