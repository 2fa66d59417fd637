"""latency-proxy: a measuring streaming reverse proxy for OpenAI-compatible LLM servers."""

__version__ = "0.1.0"
