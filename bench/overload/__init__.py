"""The overload benchmark (issue 23): bursts at four times a gateway's capacity. Every request must end complete
or refused (429 or 503 with Retry-After), none may hang; it reports how fast the excess is refused and how fast
liveness answers meanwhile. `python -m bench.overload` (`make overload`)."""
