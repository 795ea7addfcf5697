"""Alerts that reach someone: `budget.low`, and the start of a game's
refusals (`budget.refused`), delivered past the game's event streams — to
a webhook the game's admins set, and by e-mail when the studio has mail
settings (EMAIL_HOST).

An alert is raised inside the transaction that caused it (a charge, a
refusal's count): one `AlertDelivery` row per place it goes, so a crash
loses none. Once that transaction commits each is tried where compactions
run (STUDIO_COMPACTION_RUNNER: a Celery task, a thread, or inline), and
tried again with exponential backoff (STUDIO_ALERT_RETRY_SECONDS, doubling
up to an hour) until it is delivered or STUDIO_ALERT_MAX_ATTEMPTS are
spent; the sweep sends out again any that are overdue (their worker died).
No network call is made inside a transaction.

A webhook is a POST of the alert as JSON, signed: the `Studio-Signature`
header is `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed with
the game's secret>`, so a receiver checks both who sent it and when. Any
2xx is delivered; anything else (a redirect included: none is followed) is
tried again. A game's admin is a tenant, not an operator: the URL must be
http(s) and may not reach the studio's own network — link-local addresses
(the cloud metadata service's among them) never, loopback and private
ones only where STUDIO_WEBHOOK_ALLOW_PRIVATE says so — checked when the
URL is set and again before each attempt.
"""

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from urllib.parse import urlsplit

from celery import current_app as celery_app
from django.conf import settings
from django.core.mail import send_mail
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from studio.errors import DomainError
from studio.models import Game, Membership, Role
from studio.ops import logs

from .models import AlertDelivery, AlertSettings, DeliveryChannel, DeliveryStatus

log = logging.getLogger(__name__)

ALERT_TASK = "billing.tasks.alert_deliver_task"
SIGNATURE_HEADER = "Studio-Signature"
SECRET_PREFIX = "whsec_"
MAX_BACKOFF_SECONDS = 3600
RECENT_SHOWN = 20


# --- raising an alert ----------------------------------------------------------------------


def alert_raise(*, game_id: int, event: str, data: dict) -> list[AlertDelivery]:
    """One delivery of `event` (its `data`) for each place the game's alerts
    go, made in the caller's transaction and tried once it commits."""
    places = _places(game_id)
    if not places:
        return []
    game = Game.objects.only("slug").get(pk=game_id)
    now = timezone.now()
    deliveries = []
    for channel, target in places:
        delivery = AlertDelivery(
            game_id=game_id, channel=channel, event=event, target=target, next_attempt_at=now
        )
        delivery.body = {
            "id": str(delivery.uuid),
            "type": event,
            "game": game.slug,
            "createdAt": now.isoformat(),
            "data": data,
        }
        deliveries.append(delivery)
    AlertDelivery.objects.bulk_create(deliveries)
    for delivery in deliveries:
        _dispatch_on_commit(delivery.pk)
    return deliveries


def _places(game_id: int) -> list[tuple[str, str]]:
    """(channel, target) for each place the game's alerts go now."""
    alerting = AlertSettings.objects.filter(game_id=game_id).first()
    places = []
    if alerting and alerting.webhook_url and alerting.webhook_secret:
        places.append((DeliveryChannel.WEBHOOK, alerting.webhook_url))
    if settings.STUDIO["EMAIL_ALERTS"]:
        addresses = email_recipients(game_id, alerting)
        if addresses:
            places.append((DeliveryChannel.EMAIL, ", ".join(addresses)))
    return places


def email_recipients(game_id: int, alerting: AlertSettings | None = None) -> list[str]:
    """The game's alert address, or else its admins' own addresses."""
    if alerting is not None and alerting.email:
        return [alerting.email]
    admins = Membership.objects.filter(game_id=game_id, role=Role.ADMIN, user__is_active=True).exclude(
        user__email=""
    )
    return sorted(set(admins.values_list("user__email", flat=True)))


# --- who tries it ----------------------------------------------------------------------------


def _dispatch_on_commit(delivery_id: int) -> None:
    transaction.on_commit(lambda: dispatch(delivery_id))


def dispatch(delivery_id: int) -> None:
    """Have the delivery tried where compactions run: a Celery task (which
    retries with backoff), a thread of this process (which does too), or
    here, once (inline: tests and scripts; the sweep tries again)."""
    runner = settings.STUDIO["COMPACTION_RUNNER"]
    if runner == "celery":
        _send_task(delivery_id)
    elif runner == "thread":
        threading.Thread(
            target=logs.carry_log_context(_run_in_thread), args=(delivery_id,), daemon=True, name="alert"
        ).start()
    elif runner == "inline":
        delivery_attempt(delivery_id)
    # "none": made only; the sweep or a test tries it.


def _send_task(delivery_id: int, countdown: float | None = None) -> None:
    """Hand the delivery to Celery by the task's name. If the broker cannot
    take it, it stays pending: the sweep sends it again."""
    try:
        celery_app.send_task(
            ALERT_TASK,
            (delivery_id,),
            queue=settings.CELERY_TASK_DEFAULT_QUEUE,
            countdown=countdown,
            retry=False,
        )
    except Exception:
        log.warning("alert delivery %s could not reach the broker; the sweep sends it again", delivery_id)


def _run_in_thread(delivery_id: int) -> None:
    try:
        wait = delivery_attempt(delivery_id)
        while wait is not None:
            time.sleep(wait)
            wait = delivery_attempt(delivery_id)
    except Exception:
        log.exception("alert delivery %s failed", delivery_id)
    finally:
        connection.close()


def deliveries_resend(*, limit: int = 100) -> int:
    """The sweep's part: send out again the pending deliveries overdue by
    more than a lease (their worker or process died, or the broker could
    not take them). How many."""
    overdue = timezone.now() - timedelta(seconds=_lease_seconds())
    ids = list(
        AlertDelivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lt=overdue)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    for delivery_id in ids:
        dispatch(delivery_id)
    return len(ids)


# --- one attempt ------------------------------------------------------------------------------


def backoff_seconds(attempts: int) -> float:
    """The wait after the `attempts`-th failed attempt: doubling from
    STUDIO_ALERT_RETRY_SECONDS, an hour at most."""
    return min(settings.STUDIO["ALERT_RETRY_SECONDS"] * 2 ** (attempts - 1), MAX_BACKOFF_SECONDS)


def _lease_seconds() -> float:
    # Longer than an attempt can take: its time-out, and room to record it.
    return settings.STUDIO["WEBHOOK_TIMEOUT_SECONDS"] + 30


def delivery_attempt(delivery_id: int) -> float | None:
    """Try a pending delivery that is due, once: claimed first (a
    conditional update, so two workers never both try it), then sent with
    no transaction open, then its outcome recorded. The seconds to wait
    before the next attempt, or None when there is none to make (delivered,
    failed for good, not due, or another worker's)."""
    now = timezone.now()
    claimed = AlertDelivery.objects.filter(
        pk=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now
    ).update(attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=_lease_seconds()))
    if not claimed:
        return None
    delivery = AlertDelivery.objects.get(pk=delivery_id)
    if delivery.channel == DeliveryChannel.WEBHOOK:
        status_code, error = _webhook_post(delivery)
    else:
        status_code, error = None, _email_send(delivery)
    return _outcome(delivery, status_code, error)


def _outcome(delivery: AlertDelivery, status_code: int | None, error: str | None) -> float | None:
    now = timezone.now()
    fields = {"status_code": status_code, "error": (error or "")[:2000]}
    wait = None
    if error is None:
        fields.update(status=DeliveryStatus.DELIVERED, finished_at=now)
    elif delivery.attempts >= settings.STUDIO["ALERT_MAX_ATTEMPTS"]:
        fields.update(status=DeliveryStatus.FAILED, finished_at=now)
        log.warning(
            "alert delivery %s failed for good after %d attempts: %s", delivery.pk, delivery.attempts, error
        )
    else:
        wait = backoff_seconds(delivery.attempts)
        fields.update(next_attempt_at=now + timedelta(seconds=wait))
    AlertDelivery.objects.filter(pk=delivery.pk).update(**fields)
    return wait


# --- webhooks -----------------------------------------------------------------------------------


def body_bytes(body: dict) -> bytes:
    """The exact bytes a webhook is sent (and signed)."""
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The `Studio-Signature` header's value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not an instruction: following one could
    lead past the address checks."""

    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def _webhook_post(delivery: AlertDelivery) -> tuple[int | None, str | None]:
    """POST the delivery to its URL, signed with the game's secret now:
    (the status code, or None; an error, or None when delivered)."""
    alerting = AlertSettings.objects.filter(game_id=delivery.game_id).first()
    if alerting is None or not alerting.webhook_secret:
        return None, "The game's webhook was removed before this alert could be delivered."
    try:
        url_target_check(delivery.target)
    except DomainError as refused:
        return None, refused.message
    body = body_bytes(delivery.body)
    request = urllib.request.Request(
        delivery.target,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "studio-alerts/1",
            "Studio-Event": delivery.event,
            "Studio-Delivery": str(delivery.uuid),
            SIGNATURE_HEADER: signature(alerting.webhook_secret, int(time.time()), body),
        },
    )
    try:
        with _opener.open(request, timeout=settings.STUDIO["WEBHOOK_TIMEOUT_SECONDS"]) as answer:
            return answer.status, None if 200 <= answer.status < 300 else f"HTTP {answer.status}"
    except urllib.error.HTTPError as answer:
        answer.close()
        return answer.code, f"HTTP {answer.code}" + (
            " (redirects are not followed)" if answer.code < 400 else ""
        )
    except (urllib.error.URLError, OSError, ValueError) as failure:
        reason = getattr(failure, "reason", failure)
        return None, f"Could not reach the webhook: {reason}"


def url_check(url: str) -> str:
    """A webhook URL a game's admin may set, cleaned; else 400
    `invalid_webhook_url` saying why."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refused(
            "must be an http:// or https:// URL with a host, like https://example.com/studio-alerts"
        )
    if parts.username or parts.password:
        raise _refused("may not carry a user name or password: the signature says the alert is the studio's")
    if len(url) > 2000:
        raise _refused("is longer than 2,000 characters")
    url_target_check(url)
    return url


def url_target_check(url: str) -> None:
    """Refuse a URL whose host is, or resolves to, an address a tenant may
    not reach: link-local (169.254.169.254, the cloud metadata service,
    among them), multicast, unspecified or reserved ones always; loopback
    and private ones unless STUDIO_WEBHOOK_ALLOW_PRIVATE."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise _refused("has a port that is not a number from 0 to 65535") from None
    try:
        found = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        raise _refused(f"names a host, {parts.hostname}, that does not resolve") from None
    for address in {info[4][0] for info in found}:
        why = address_refusal(ipaddress.ip_address(address.split("%")[0]))
        if why:
            raise _refused(f"reaches {address}, {why}")


def address_refusal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a webhook may not be sent to `address`, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if address.is_link_local or address.is_multicast or address.is_unspecified or address.is_reserved:
        return "a link-local, multicast or reserved address, which no webhook may reach"
    if not address.is_global and not settings.STUDIO["WEBHOOK_ALLOW_PRIVATE"]:
        return (
            "a loopback or private address, which webhooks may reach only where the studio's operators "
            "allow it (STUDIO_WEBHOOK_ALLOW_PRIVATE)"
        )
    return None


def _refused(why: str) -> DomainError:
    return DomainError(f"The webhook URL {why}.", code="invalid_webhook_url")


# --- e-mail -----------------------------------------------------------------------------------------


SUBJECTS = {
    "budget.low": "{game}: its budget is low",
    "budget.refused": "{game}: sends are being refused for want of credits",
    "budget.test": "{game}: a test of its budget alerts",
}


def _email_send(delivery: AlertDelivery) -> str | None:
    """Send the delivery by e-mail through Django's mail settings: None, or
    why it could not be."""
    body = delivery.body
    subject = SUBJECTS.get(delivery.event, "{game}: " + delivery.event).format(game=body.get("game", ""))
    lines = [email_text(delivery.event, body.get("data") or {}), "", "The alert as a webhook gets it:"]
    lines.append(json.dumps(body, indent=2, sort_keys=True))
    try:
        send_mail(
            f"[studio] {subject}",
            "\n".join(lines),
            settings.DEFAULT_FROM_EMAIL,
            [address.strip() for address in delivery.target.split(",") if address.strip()],
        )
    except Exception as failure:  # any mail server trouble is a failed attempt, tried again
        return f"Could not send the e-mail: {failure}"
    return None


def email_text(event: str, data: dict) -> str:
    """What happened, in a sentence or two."""
    if event == "budget.refused":
        return f"A send was refused, the first in a while: {data.get('message', '')}"
    if event == "budget.test":
        return "This is a test of the game's budget alerts: they reach you."
    if data.get("trigger") == "monthlyCap":
        return (
            f"This month's spend, {data.get('monthSpent')} credits, has passed 80% of the monthly cap of "
            f"{data.get('monthlyCap')}. The balance is {data.get('balance')}."
        )
    return f"The balance, {data.get('balance')} credits, is below the low-balance alert of {data.get('lowBalanceAlert')}."


# --- the game's settings -----------------------------------------------------------------------------


def secret_new() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def webhook_set(*, game: Game, url: str) -> str | None:
    """Set the game's webhook URL (checked first, outside any transaction:
    it resolves the host). The new signing secret when the game had none —
    shown once, by the caller — else None (the secret is kept)."""
    url = url_check(url)
    with transaction.atomic():
        alerting, _ = AlertSettings.objects.select_for_update().get_or_create(game=game)
        secret = None if alerting.webhook_secret else secret_new()
        alerting.webhook_url = url
        alerting.webhook_secret = alerting.webhook_secret or secret
        alerting.save(update_fields=["webhook_url", "webhook_secret", "updated_at"])
    return secret


def webhook_secret_rotate(*, game: Game) -> str:
    """A new signing secret for the game's webhook, in force at once (the
    next attempt of a pending delivery is signed with it)."""
    secret = secret_new()
    with transaction.atomic():
        alerting, _ = AlertSettings.objects.select_for_update().get_or_create(game=game)
        if not alerting.webhook_url:
            raise DomainError(
                "Set a webhook URL first: the secret signs what is sent to it.", code="invalid_request"
            )
        alerting.webhook_secret = secret
        alerting.save(update_fields=["webhook_secret", "updated_at"])
    return secret


def webhook_remove(*, game: Game) -> None:
    AlertSettings.objects.filter(game=game).update(
        webhook_url="", webhook_secret="", updated_at=timezone.now()
    )


def alert_email_set(*, game: Game, email: str) -> None:
    """The address the game's alert e-mails go to ("": its admins' own)."""
    with transaction.atomic():
        alerting, _ = AlertSettings.objects.select_for_update().get_or_create(game=game)
        alerting.email = email
        alerting.save(update_fields=["email", "updated_at"])


def alert_test(*, game: Game) -> list[AlertDelivery]:
    """A `budget.test` alert to every place the game's alerts go."""
    with transaction.atomic():
        return alert_raise(
            game_id=game.pk, event="budget.test", data={"message": "A test of the game's alerts."}
        )


def deliveries_recent(*, game: Game) -> list[AlertDelivery]:
    return list(AlertDelivery.objects.filter(game=game).order_by("-id")[:RECENT_SHOWN])
