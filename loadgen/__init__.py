"""loadgen: comparative load runs against OpenAI-compatible streaming endpoints."""
