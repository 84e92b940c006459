"""HTTP transport: the server every listener runs on (server.py, protocol.py), the raw ASGI helpers the apps
answer with, the client side to the engines, and server-sent events."""
