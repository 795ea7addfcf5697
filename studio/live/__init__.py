"""Live events: the publisher, the catalogue of events, the channel layers, and the
WebSocket's own checks (origin, outages)."""
