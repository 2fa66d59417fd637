"""The upstream side: one HTTP/1.1 connection, a route's pool, the routes, the call."""
