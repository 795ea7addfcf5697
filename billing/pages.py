"""The Billing page (placeholder until the pages land)."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import path

from studio.pages import member_access


@login_required
def billing_page(request, game):
    access = member_access(request, game)
    return render(request, "base.html", {"game": access.game, "section": "billing"})


urlpatterns = [
    path("billing/", billing_page, name="billing-page"),
]
