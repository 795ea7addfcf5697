"""WebSocket routes: live events for API consumers and for the studio's
pages."""

from django.urls import path

from agents.consumers import AgentEventsConsumer

websocket_urlpatterns = [
    path("ws/v1/agents/<str:name>/events", AgentEventsConsumer.as_asgi()),
    path("ws/studio/<slug:game>/agents/<str:name>/", AgentEventsConsumer.as_asgi()),
]
