"""How a request reaches the studio and how a process stops: the ASGI handler and
its access log, the middleware, draining on SIGTERM, static files."""
