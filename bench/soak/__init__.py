"""The soak (issue 23): many clients and two faults against the local stack, and a check that every request
ended either complete or with an explicit error. `outcomes` and `checks` are pure; `driver` and `run` do I/O."""
