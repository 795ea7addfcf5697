"""The key's game over the API: what it is, and the model its agents get
when their definition names none (set by admin keys)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import services, wire

from .auth.authentication import HasGameKey, IsAdminKey
from .http.api_fields import StrictCharField, StrictSerializer, valid
from .http.schema import errors


class GameOut(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    defaultModel = serializers.CharField(
        allow_null=True, help_text="The game's own default model; null: the studio's."
    )
    studioDefaultModel = serializers.CharField(
        allow_null=True,
        help_text="The studio's default model: STUDIO_DEFAULT_MODEL, else `scripted` where the studio "
        "offers it; null: none.",
    )
    effectiveDefaultModel = serializers.CharField(
        allow_null=True,
        help_text="The model a definition without `model` gets now: the game's default, else the "
        "studio's. null: a definition must name its model.",
    )


class GameChangeSerializer(StrictSerializer):
    defaultModel = StrictCharField(
        allow_null=True,
        required=False,
        max_length=200,
        help_text="`scripted`, `openai:<model>` or `anthropic:<model>`, checked as a definition's "
        "model is (a provider serves it, and it has a price unless the studio allows it without); "
        "null: the studio's default. Absent: kept. Agents keep the model they were defined with "
        "until they are defined again.",
    )


class GameView(APIView):
    def get_permissions(self):
        return [IsAdminKey()] if self.request.method == "PATCH" else [HasGameKey()]

    @extend_schema(
        operation_id="game_get",
        responses={200: GameOut, **errors()},
        summary="The key's game, and the model a definition without one gets",
    )
    def get(self, request):
        return Response(wire.game_wire(request.auth.game))

    @extend_schema(
        operation_id="game_change",
        request=GameChangeSerializer,
        responses={200: GameOut, **errors(400, 403)},
        summary="Set the game's default model (admin keys)",
    )
    def patch(self, request):
        data = valid(GameChangeSerializer(data=request.data)).validated_data
        game = request.auth.game
        if "defaultModel" in data:
            game = services.game_default_model_set(game=game, model=data["defaultModel"])
        return Response(wire.game_wire(game))
