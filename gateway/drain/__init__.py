"""The graceful drain on SIGTERM: refuse new generations, let those in flight end (up to a deadline), then exit.

`state` counts generations and says when the drain may end; `middleware` refuses and counts at the HTTP edge;
`signals` holds the stop signal back from uvicorn until the drain is over.
"""

from gateway.drain.middleware import DrainMiddleware
from gateway.drain.signals import SignalDrain
from gateway.drain.state import Drain, shutting_down

__all__ = ["Drain", "DrainMiddleware", "SignalDrain", "shutting_down"]
