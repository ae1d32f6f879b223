"""Bottom layer: cluster clients, list+watch informers, work queues and events."""
