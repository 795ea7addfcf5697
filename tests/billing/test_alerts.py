"""Alerts that reach someone: `budget.low` and the start of a game's
refusals go to a webhook the game's admins set — signed with the game's
secret (shown once, rotatable), tried after the charge commits and again
with backoff until it answers 2xx — and by e-mail where the studio has
mail settings; a delivery log on Billing. The URL is checked: a game's
admin is a tenant, and may not aim the studio at its own network.

The receiver is a real HTTP server on loopback (tests/support/webhooks.py)
that checks the signature as a game's server would."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from billing import alerts, ledger
from billing.models import Account, AlertDelivery, AlertSettings, DeliveryStatus, Refusal
from studio.errors import DomainError
from studio.models import Membership, Role
from tests.conftest import error_of, page_user, wait_for
from tests.support.webhooks import Receiver, signature_checks

JSON = {"HTTP_X_REQUESTED_WITH": "fetch", "HTTP_ACCEPT": "application/json"}
ALERTS = "/studio/ashmere/billing/alerts/"


@pytest.fixture
def private_allowed(studio_conf):
    """The receiver is on loopback: allowed here, as an operator may."""
    studio_conf(WEBHOOK_ALLOW_PRIVATE=True)


@pytest.fixture
def receiver(private_allowed):
    receiver = Receiver()
    yield receiver
    receiver.stop()


@pytest.fixture
def hooked(receiver, game):
    """The game's webhook aims at the receiver, which knows its secret."""
    receiver.secret = alerts.webhook_set(game=game, url=receiver.url)
    return receiver


def balance_low(game):
    """budget.low for the balance below its alert, raised as a charge does."""
    ledger._budget_low_send(
        game.pk,
        {
            "type": "budget.low",
            "trigger": "lowBalanceAlert",
            "lowBalanceAlert": "10.000000",
            "balance": "9.500000",
            "agent": "dm",
        },
    )


# --- the URL a game's admin may set ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/hook", "must be an http:// or https:// URL"),
        ("example.com/hook", "must be an http:// or https:// URL"),
        ("https://ops:secret@example.com/hook", "may not carry a user name or password"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254, a link-local"),
        ("http://[::ffff:169.254.169.254]/", "a link-local"),
        ("http://[fe80::1]/", "a link-local"),
        ("http://0.0.0.0/", "reserved"),
        ("http://127.0.0.1:8000/hook", "a loopback or private address"),
        ("http://10.1.2.3/hook", "a loopback or private address"),
        ("http://localhost/hook", "127.0.0.1, a loopback or private address"),
        ("http://no-such-host.invalid/hook", "does not resolve"),
        ("https://example.com:99999/", "a port that is not a number"),
    ],
)
def test_a_webhook_url_that_is_not_http_or_reaches_the_studios_network_is_refused(url, why):
    with pytest.raises(DomainError) as refused:
        alerts.url_check(url)

    assert refused.value.code == "invalid_webhook_url"
    assert why in refused.value.message


def test_a_public_address_is_a_webhook_url():
    assert alerts.url_check(" https://93.184.216.34/studio-alerts ") == "https://93.184.216.34/studio-alerts"


def test_private_addresses_are_allowed_where_the_operators_say_so_but_never_link_local(private_allowed):
    assert alerts.url_check("http://127.0.0.1:9/hook") == "http://127.0.0.1:9/hook"
    assert alerts.url_check("http://192.168.1.20/hook")
    with pytest.raises(DomainError, match="link-local"):
        alerts.url_check("http://169.254.169.254/")


# --- setting it on Billing: the secret shown once, rotated -----------------------------------------------


def test_an_admin_sets_the_webhook_and_sees_its_secret_once(admin, game):
    saved = admin.post(ALERTS, {"webhook_url": "https://93.184.216.34/hook", "action": "save"}, **JSON)

    assert saved.status_code == 200
    secret = re.search(r"copy it now: (whsec_\S+)$", saved.json()["message"])[1]
    assert AlertSettings.objects.get(game=game).webhook_secret == secret
    page = admin.get("/studio/ashmere/billing/").content.decode()
    assert secret not in page
    assert f"whsec_…{secret[-4:]}" in page
    again = admin.post(ALERTS, {"webhook_url": "https://93.184.216.34/other", "action": "save"}, **JSON)
    assert again.json()["message"] == "Saved."  # the secret is kept, and not shown again
    assert AlertSettings.objects.get(game=game).webhook_secret == secret


def test_an_admin_rotates_the_secret_and_removes_the_webhook(admin, game):
    first = alerts.webhook_set(game=game, url="https://93.184.216.34/hook")

    rotated = admin.post(ALERTS, {"action": "rotate"}, **JSON).json()["message"]
    secret = rotated.rsplit(" ", 1)[1]
    removed = admin.post(ALERTS, {"action": "remove"}, **JSON)

    assert rotated.startswith("The webhook's new signing secret, shown this once")
    assert secret.startswith("whsec_") and secret != first
    assert removed.status_code == 200
    assert AlertSettings.objects.get(game=game).webhook_url == ""


def test_a_url_the_studio_may_not_reach_is_refused_by_its_field(admin, game):
    answer = admin.post(ALERTS, {"webhook_url": "http://169.254.169.254/", "action": "save"}, **JSON)

    assert answer.status_code == 400
    error = error_of(answer)
    assert error["code"] == "invalid_webhook_url"
    assert error["details"][0]["field"] == "webhook_url"
    assert not AlertSettings.objects.filter(game=game).exclude(webhook_url="").exists()


def test_rotating_without_a_webhook_says_to_set_one_first(admin, game):
    answer = admin.post(ALERTS, {"action": "rotate"}, **JSON)

    assert answer.status_code == 400
    assert "Set a webhook URL first" in error_of(answer)["message"]


def test_a_designer_may_not_set_alerts_nor_see_the_delivery_log(designer, game):
    answer = designer.post(ALERTS, {"webhook_url": "https://93.184.216.34/hook"}, **JSON)
    page = designer.get("/studio/ashmere/billing/").content.decode()

    assert answer.status_code == 403
    assert "Alert deliveries" not in page and 'id="alerts"' not in page
    assert (
        "Alert deliveries"
        not in designer.get("/studio/ashmere/billing/?fragment=deliveries").content.decode()
    )


def test_someone_outside_the_game_gets_a_404(outsider_client, game):
    assert outsider_client.post(ALERTS, {"action": "test"}, **JSON).status_code == 404


# --- a delivery: after commit, signed ---------------------------------------------------------------------


def test_budget_low_from_a_charge_reaches_the_webhook_signed_after_commit(
    hooked, api, define, game, django_capture_on_commit_callbacks
):
    define("dm")
    ledger.limits_set(game=game, low_balance_alert=Decimal("99.999"))

    with django_capture_on_commit_callbacks(execute=True):
        assert api.post("/api/v1/agents/dm/messages", {"content": "Hello."}, format="json").status_code == 200

    (received,) = hooked.received
    assert received.signed
    assert received.headers["Content-Type"] == "application/json"
    assert received.headers["Studio-Event"] == "budget.low"
    body = received.json
    assert (body["type"], body["game"]) == ("budget.low", "ashmere")
    assert body["data"]["trigger"] == "lowBalanceAlert"
    assert body["data"]["lowBalanceAlert"] == "99.999000"
    assert body["data"]["agent"] == "dm"
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.status_code, delivery.attempts) == ("delivered", 200, 1)
    assert received.headers["Studio-Delivery"] == str(delivery.uuid) == body["id"]


def test_nothing_is_sent_while_the_alerts_transaction_is_open(
    hooked, game, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            balance_low(game)
            assert AlertDelivery.objects.filter(status="pending").count() == 1
            assert hooked.received == []

    assert len(hooked.received) == 1


def test_a_rolled_back_charge_sends_nothing(hooked, game, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():
            balance_low(game)
            raise RuntimeError("the charge's transaction fails")

    assert hooked.received == [] and not AlertDelivery.objects.exists()


def test_a_signature_with_another_secret_does_not_check_out():
    body = b'{"type":"budget.low"}'
    header = alerts.signature("whsec_right", 1_700_000_000, body)

    assert header.startswith("t=1700000000,v1=")
    assert not signature_checks("whsec_wrong", header, body, tolerance=10**10)
    assert signature_checks("whsec_right", header, body, tolerance=10**10)
    assert not signature_checks("whsec_right", header, body + b" ", tolerance=10**10)


# --- retries ---------------------------------------------------------------------------------------------------


@pytest.fixture
def made_only(studio_conf):
    """Deliveries are made, and tried only when the test says (`delivery_attempt`)."""
    studio_conf(COMPACTION_RUNNER="none")


def due_now(delivery: AlertDelivery) -> None:
    AlertDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())


def test_a_500_is_tried_again_after_its_backoff_and_a_200_then_delivers(hooked, made_only, game):
    hooked.answers = [500, 200]
    balance_low(game)
    delivery = AlertDelivery.objects.get()

    wait = alerts.delivery_attempt(delivery.pk)

    delivery.refresh_from_db()
    assert wait == 30.0  # STUDIO_ALERT_RETRY_SECONDS
    assert (delivery.status, delivery.status_code, delivery.attempts) == ("pending", 500, 1)
    assert delivery.error == "HTTP 500"
    assert alerts.delivery_attempt(delivery.pk) is None  # not due yet: nothing sent
    assert len(hooked.received) == 1

    due_now(delivery)
    assert alerts.delivery_attempt(delivery.pk) is None

    delivery.refresh_from_db()
    assert (delivery.status, delivery.status_code, delivery.attempts, delivery.error) == (
        "delivered",
        200,
        2,
        "",
    )
    assert [r.status for r in hooked.received] == [500, 200]
    assert all(r.signed for r in hooked.received)
    assert hooked.received[0].body == hooked.received[1].body


def test_the_backoff_doubles_up_to_an_hour():
    assert [alerts.backoff_seconds(n) for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert alerts.backoff_seconds(12) == 3600


def test_a_delivery_fails_for_good_once_its_attempts_are_spent(hooked, made_only, studio_conf, game):
    studio_conf(ALERT_MAX_ATTEMPTS=2)
    hooked.answers = [503]
    balance_low(game)
    delivery = AlertDelivery.objects.get()

    alerts.delivery_attempt(delivery.pk)
    due_now(delivery)
    assert alerts.delivery_attempt(delivery.pk) is None

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.status_code) == ("failed", 2, 503)
    assert delivery.finished_at is not None


def test_a_redirect_is_not_followed(hooked, made_only, game):
    hooked.answers = [302]
    balance_low(game)
    delivery = AlertDelivery.objects.get()

    alerts.delivery_attempt(delivery.pk)

    delivery.refresh_from_db()
    assert (delivery.status, delivery.status_code) == ("pending", 302)
    assert "redirects are not followed" in delivery.error
    assert len(hooked.received) == 1


def test_a_receiver_that_is_gone_is_an_attempt_that_failed(made_only, private_allowed, game):
    gone = Receiver()
    gone.stop()
    alerts.webhook_set(game=game, url=gone.url)
    balance_low(game)
    delivery = AlertDelivery.objects.get()

    assert alerts.delivery_attempt(delivery.pk) == 30.0

    delivery.refresh_from_db()
    assert delivery.status_code is None
    assert delivery.error.startswith("Could not reach the webhook")


def test_a_webhook_removed_before_its_delivery_is_not_sent(hooked, made_only, game):
    balance_low(game)
    alerts.webhook_remove(game=game)

    alerts.delivery_attempt(AlertDelivery.objects.get().pk)

    assert hooked.received == []
    assert "removed" in AlertDelivery.objects.get().error


def test_an_address_that_became_private_is_refused_at_delivery(hooked, made_only, studio_conf, game):
    balance_low(game)
    studio_conf(WEBHOOK_ALLOW_PRIVATE=False)

    alerts.delivery_attempt(AlertDelivery.objects.get().pk)

    assert hooked.received == []
    assert "loopback or private" in AlertDelivery.objects.get().error


@pytest.mark.django_db(transaction=True)
def test_the_thread_runner_tries_again_with_backoff_until_delivered(hooked, studio_conf, game):
    studio_conf(COMPACTION_RUNNER="thread", ALERT_RETRY_SECONDS=0.05)
    hooked.answers = [500, 500, 200]

    with transaction.atomic():
        balance_low(game)

    wait_for(lambda: AlertDelivery.objects.filter(status=DeliveryStatus.DELIVERED).exists())
    assert AlertDelivery.objects.get().attempts == 3
    assert [r.status for r in hooked.received] == [500, 500, 200]


def test_the_sweep_sends_out_again_a_delivery_whose_worker_died(hooked, studio_conf, game):
    studio_conf(COMPACTION_RUNNER="none")
    balance_low(game)
    delivery = AlertDelivery.objects.get()
    # Claimed by a worker that died: its lease has run out.
    AlertDelivery.objects.filter(pk=delivery.pk).update(
        attempts=1, next_attempt_at=timezone.now() - timedelta(minutes=2)
    )
    studio_conf(COMPACTION_RUNNER="inline")

    from agents.sweep import sweep

    assert sweep()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("delivered", 2)


def test_a_delivery_not_yet_overdue_is_left_to_its_worker(hooked, studio_conf, game):
    studio_conf(COMPACTION_RUNNER="none")
    balance_low(game)

    assert alerts.deliveries_resend() == 0


# --- e-mail --------------------------------------------------------------------------------------------------------


@pytest.fixture
def mail_on(studio_conf, made_only):
    studio_conf(EMAIL_ALERTS=True, COMPACTION_RUNNER="inline")


def admin_with_email(game, username, email, role=Role.ADMIN):
    user = page_user(username, game, role=role)
    user.email = email
    user.save()
    return user


def test_with_mail_settings_budget_low_is_mailed_to_the_games_admins(
    mail_on, game, mailoutbox, django_capture_on_commit_callbacks
):
    admin_with_email(game, "ines", "ines@example.com")
    admin_with_email(game, "ola", "ola@example.com")
    admin_with_email(game, "mara", "mara@example.com", role=Role.DESIGNER)

    with django_capture_on_commit_callbacks(execute=True):
        balance_low(game)

    (mail,) = mailoutbox
    assert mail.to == ["ines@example.com", "ola@example.com"]
    assert mail.subject == "[studio] ashmere: its budget is low"
    assert "The balance, 9.500000 credits, is below the low-balance alert of 10.000000." in mail.body
    delivery = AlertDelivery.objects.get(channel="email")
    assert (delivery.status, delivery.target) == ("delivered", "ines@example.com, ola@example.com")


def test_a_games_own_address_takes_the_admins_place(
    mail_on, admin, game, mailoutbox, django_capture_on_commit_callbacks
):
    admin_with_email(game, "ola", "ola@example.com")
    admin.post(ALERTS, {"email": "ops@example.com", "action": "save"}, **JSON)

    with django_capture_on_commit_callbacks(execute=True):
        balance_low(game)

    assert [mail.to for mail in mailoutbox] == [["ops@example.com"]]


def test_without_mail_settings_no_mail_is_sent(
    studio_conf, game, mailoutbox, django_capture_on_commit_callbacks
):
    studio_conf(EMAIL_ALERTS=False, COMPACTION_RUNNER="inline")
    admin_with_email(game, "ines", "ines@example.com")

    with django_capture_on_commit_callbacks(execute=True):
        balance_low(game)

    assert mailoutbox == [] and not AlertDelivery.objects.exists()


def test_the_start_of_refusals_is_mailed_too(
    mail_on, api, define, game, mailoutbox, django_capture_on_commit_callbacks
):
    define("dm")
    admin_with_email(game, "ines", "ines@example.com")
    Account.objects.filter(game=game).update(balance=0)

    with django_capture_on_commit_callbacks(execute=True):
        api.post("/api/v1/agents/dm/messages", {"content": "Hello."}, format="json")

    (mail,) = mailoutbox
    assert mail.subject == "[studio] ashmere: sends are being refused for want of credits"
    assert "cannot pay for this send" in mail.body


# --- the delivery log, and a test alert ----------------------------------------------------------------------------


def test_the_delivery_log_shows_status_codes_and_attempts(admin, hooked, made_only, game):
    hooked.answers = [500, 204]
    balance_low(game)
    delivery = AlertDelivery.objects.get()
    alerts.delivery_attempt(delivery.pk)

    log = admin.get("/studio/ashmere/billing/?fragment=deliveries").content.decode()

    row = log[log.index(f'data-delivery="{delivery.uuid}"') :]
    assert 'data-delivery-status="pending"' in row
    assert "data-status-code>500<" in row and "data-attempts>1<" in row
    assert "HTTP 500" in row

    due_now(delivery)
    alerts.delivery_attempt(delivery.pk)
    log = admin.get("/studio/ashmere/billing/?fragment=deliveries").content.decode()
    assert "data-status-code>204<" in log and "data-attempts>2<" in log and "Delivered" in log


def test_send_a_test_from_billing(admin, hooked, game, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        answer = admin.post(ALERTS, {"action": "test"}, **JSON)

    assert answer.json()["message"].startswith("A test alert is on its way to 1 place")
    (received,) = hooked.received
    assert received.json["type"] == "budget.test" and received.signed


def test_a_test_with_nowhere_to_go_says_so(admin, game):
    answer = admin.post(ALERTS, {"action": "test"}, **JSON)

    assert "There is nowhere to send a test to" in answer.json()["message"]


# --- retention ----------------------------------------------------------------------------------------------------


def test_prune_deletes_old_refusal_counts_and_finished_deliveries(made_only, hooked, api, define, game):
    from agents.history.retention import prune

    define("dm")
    Account.objects.filter(game=game).update(balance=0)
    api.post("/api/v1/agents/dm/messages", {"content": "Hello."}, format="json")
    balance_low(game)
    old = timezone.now() - timedelta(days=31)
    Refusal.objects.update(last_at=old)
    AlertDelivery.objects.filter(event="budget.low").update(created_at=old, status=DeliveryStatus.DELIVERED)
    AlertDelivery.objects.filter(event="budget.refused").update(created_at=old)  # pending: kept

    found = {kind.kind: kind.rows for kind in prune()}

    assert found["refusal counts"] == 1 and found["alert deliveries"] == 1
    assert not Refusal.objects.exists()
    assert list(AlertDelivery.objects.values_list("event", flat=True)) == ["budget.refused"]


def test_every_member_admin_role_is_what_makes_an_alert_recipient(game):
    user = admin_with_email(game, "ines", "ines@example.com")
    Membership.objects.filter(user=user).update(role=Role.DESIGNER)

    assert alerts.email_recipients(game.pk) == []


def test_operators_read_deliveries_and_refusals_in_the_admin(client, hooked, made_only, api, define, game):
    from django.contrib.auth import get_user_model

    define("dm")
    Account.objects.filter(game=game).update(balance=0)
    api.post("/api/v1/agents/dm/messages", {"content": "Hello."}, format="json")
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))

    deliveries = client.get("/admin/billing/alertdelivery/").content.decode()
    refusals = client.get("/admin/billing/refusal/").content.decode()
    one = client.get(f"/admin/billing/alertdelivery/{AlertDelivery.objects.get().pk}/change/")

    assert "budget.refused" in deliveries
    assert "balance_exhausted" in refusals or "No credits left" in refusals
    assert one.status_code == 200
    assert (
        client.post(f"/admin/billing/alertdelivery/{AlertDelivery.objects.get().pk}/delete/").status_code
        == 403
    )
