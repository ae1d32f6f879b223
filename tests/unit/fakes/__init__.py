"""In-memory stand-ins for what the controllers talk to, for tests that run in milliseconds."""
