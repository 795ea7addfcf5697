"""What processes share while they run: places held across processes, wake-ups,
leases, the hot path's statements written out, and the Redis client."""
