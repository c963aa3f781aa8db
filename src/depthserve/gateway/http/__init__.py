"""The gateway's HTTP face: ASGI io, uploads, /v1 routes, dashboard, OpenAPI, reply writing."""
