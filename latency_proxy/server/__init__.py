"""The client side: HTTP/1.1 connections on uvicorn, the limits and timers on their bytes, and
how a relayed body is written back. It knows the ASGI interface, nothing of what a request means.
"""
