"""Metrics, federation of Triton's metrics, request ids and request logs."""
