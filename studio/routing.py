"""WebSocket routes (the live events arrive with the live-pages work)."""

websocket_urlpatterns: list = []
