"""HTTP transport: the server every listener runs on (server.py, protocol.py), the raw ASGI helpers and error
bodies the apps answer with (asgi.py, errors.py), JSON on the request path (jsonio.py), the client side to
the engines (upstream.py) and server-sent events (sse.py)."""
