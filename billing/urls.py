"""The billing app's routes: the game's account over the API (under
/api/v1/) and its page (under /studio/<game>/)."""

from django.urls import path

from billing import api as views
from billing import pages as billing_pages

api = [
    path("billing", views.BillingView.as_view()),
    path("billing/lines", views.LinesView.as_view()),
    path("billing/adjustments", views.AdjustmentsView.as_view()),
    path("billing/limits", views.LimitsView.as_view()),
]

pages = [
    path("billing/", billing_pages.billing_page, name="billing-page"),
    path("billing/adjustments/", billing_pages.billing_adjust, name="billing-adjust"),
    path("billing/limits/", billing_pages.billing_limits, name="billing-limits"),
    path("billing/alert/", billing_pages.billing_alert, name="billing-alert"),
    path("billing/alerts/", billing_pages.billing_alerts, name="billing-alerts"),
    path("billing/spend-by-agent.csv", billing_pages.billing_agent_spend_csv, name="billing-agent-spend-csv"),
]
