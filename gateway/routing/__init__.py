"""Many Triton replicas behind one gateway: a pure picker, and the fleet that keeps the replicas' state."""
