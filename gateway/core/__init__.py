"""The gateway's functional core: pure translation between OpenAI and Triton shapes."""
