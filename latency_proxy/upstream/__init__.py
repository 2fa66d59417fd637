"""The upstream side, the proxy's own HTTP/1.1 client: one connection, a route's pool, the routes.
"""
