"""HTTP routers: thin shells over the core translation and the Triton client."""
