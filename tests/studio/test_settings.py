"""What the environment turns on: the settings module read afresh under a
given environment (the running process's settings are left alone)."""

import runpy

import pytest

from tests.support.settings import SETTINGS_FILE, studio_settings


@pytest.mark.parametrize(
    ("env", "offered"),
    [
        ({}, False),
        ({"DJANGO_DEBUG": "false", "STUDIO_ALLOW_SCRIPTED_MODEL": "0"}, False),
        ({"DJANGO_DEBUG": "true"}, True),
        ({"STUDIO_ALLOW_SCRIPTED_MODEL": "1"}, True),
    ],
)
def test_the_scripted_model_is_offered_only_in_debug_or_when_allowed(monkeypatch, env, offered):
    assert studio_settings(monkeypatch, **env)["ALLOW_SCRIPTED_MODEL"] is offered


@pytest.mark.parametrize(
    ("env", "allowed"),
    [
        ({}, False),
        ({"DJANGO_DEBUG": "true"}, False),
        ({"STUDIO_ALLOW_UNPRICED_MODELS": "off"}, False),
        ({"STUDIO_ALLOW_UNPRICED_MODELS": "1"}, True),
        ({"STUDIO_ALLOW_UNPRICED_MODELS": "Yes"}, True),
    ],
)
def test_unpriced_models_are_allowed_only_when_the_setting_says_so(monkeypatch, env, allowed):
    assert studio_settings(monkeypatch, **env)["ALLOW_UNPRICED_MODELS"] is allowed


def test_unpriced_models_may_be_allowed_by_name(monkeypatch):
    env = {"STUDIO_ALLOW_UNPRICED_MODELS": " openai:llama3.1, anthropic:claude-x ,"}

    allowed = studio_settings(monkeypatch, **env)["ALLOW_UNPRICED_MODELS"]

    assert allowed == frozenset({"openai:llama3.1", "anthropic:claude-x"})


@pytest.mark.parametrize(
    "value", ["maybe", "openai:", "openai:llama3.1,gpt-4o", "1,openai:x", "openai:a b", ","]
)
def test_a_bad_list_of_unpriced_models_stops_start_up_naming_the_variable(monkeypatch, value):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(
        ImproperlyConfigured, match=r"^STUDIO_ALLOW_UNPRICED_MODELS must be .*comma-separated"
    ):
        studio_settings(monkeypatch, STUDIO_ALLOW_UNPRICED_MODELS=value)


def test_no_studio_default_model_is_named_unless_the_setting_names_one(monkeypatch):
    # Unset, a definition without a model gets `scripted` where it is offered
    # (tests/agents/test_default_model.py): that is decided when it is read.
    assert studio_settings(monkeypatch)["DEFAULT_MODEL"] is None
    assert studio_settings(monkeypatch, DJANGO_DEBUG="true")["DEFAULT_MODEL"] is None


@pytest.mark.parametrize(
    "value", ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "openai:Qwen/Qwen2.5-7B-Instruct"]
)
def test_the_studio_default_model_takes_a_model_a_provider_serves(monkeypatch, value):
    assert studio_settings(monkeypatch, STUDIO_DEFAULT_MODEL=f" {value} ")["DEFAULT_MODEL"] == value


def test_the_studio_default_model_may_be_scripted_where_scripted_is_offered(monkeypatch):
    for gate in ({"STUDIO_ALLOW_SCRIPTED_MODEL": "1"}, {"DJANGO_DEBUG": "true"}):
        conf = studio_settings(monkeypatch, STUDIO_DEFAULT_MODEL="scripted", **gate)

        assert conf["DEFAULT_MODEL"] == "scripted"


@pytest.mark.parametrize(
    "value", ["gpt-4o", "openai:", "anthropic", "mistral:large", "openai:a b", "openai:a,b"]
)
def test_a_studio_default_model_no_provider_serves_stops_start_up_naming_the_variable(monkeypatch, value):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured) as caught:
        studio_settings(monkeypatch, STUDIO_DEFAULT_MODEL=value)

    assert str(caught.value) == (
        "STUDIO_DEFAULT_MODEL must be scripted, openai:<model> or anthropic:<model> "
        f"(like openai:gpt-4o-mini), not {value!r}."
    )


def test_scripted_as_the_studio_default_where_it_is_not_offered_stops_start_up(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=r"^STUDIO_DEFAULT_MODEL is 'scripted'") as caught:
        studio_settings(monkeypatch, STUDIO_DEFAULT_MODEL="scripted")

    assert "STUDIO_ALLOW_SCRIPTED_MODEL" in str(caught.value)


def test_the_setting_readers_take_good_values_and_refuse_others_naming_the_variable(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from studio.settings import env_bool, env_choice, env_float, env_int, env_rate

    def refused(read, value, **bounds):
        monkeypatch.setenv("STUDIO_TRIAL", value)
        with pytest.raises(ImproperlyConfigured, match=r"^STUDIO_TRIAL must be ") as caught:
            read("STUDIO_TRIAL", **bounds)
        return str(caught.value)

    monkeypatch.delenv("STUDIO_TRIAL", raising=False)
    assert (env_int("STUDIO_TRIAL", 7), env_float("STUDIO_TRIAL", 0.5), env_rate("STUDIO_TRIAL", "9/s")) == (
        7,
        0.5,
        (9, 1),
    )
    for value, rate in [
        ("100/s", (100, 1)),
        ("30/min", (30, 60)),
        ("2000/hour", (2000, 3600)),
        ("5/d", (5, 86400)),
    ]:
        monkeypatch.setenv("STUDIO_TRIAL", value)
        assert env_rate("STUDIO_TRIAL", "1/s") == rate
    monkeypatch.setenv("STUDIO_TRIAL", " 12 ")
    assert env_int("STUDIO_TRIAL", 1, at_least=1, at_most=12) == 12
    monkeypatch.setenv("STUDIO_TRIAL", "Thread")
    assert env_choice("STUDIO_TRIAL", "celery", ("celery", "thread")) == "thread"

    assert "at least 1 and at most 12, not '13'" in refused(env_int, "13", default=1, at_least=1, at_most=12)
    assert "whole number" in refused(env_int, "1.5", default=1)
    assert "above 0 and below 1, not '1'" in refused(env_float, "1", default=0.5, above=0, below=1)
    assert "not 'nan'" in refused(env_float, "nan", default=0.5, above=0)
    assert "not 'inf'" in refused(env_float, "inf", default=0.5, above=0)
    assert "not '0/s'" in refused(env_rate, "0/s", default="1/s")
    assert "not '10/fortnight'" in refused(env_rate, "10/fortnight", default="1/s")
    assert "one of a, b, not 'c'" in refused(env_choice, "c", default="a", choices=("a", "b"))
    assert "not 'sometimes'" in refused(env_bool, "sometimes")


# --- one deployment's queue and events are its own ---------------------------------------


def deployment(monkeypatch, **env) -> dict:
    """The settings of a deployment on this Redis, with `env` set."""
    for name in ("STUDIO_CHANNEL_PREFIX", "STUDIO_CELERY_QUEUE", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


def test_two_deployments_on_one_redis_have_a_celery_queue_each(monkeypatch):
    staging = deployment(monkeypatch, DATABASE_URL="postgres://studio@db:5432/staging")
    production = deployment(monkeypatch, DATABASE_URL="postgres://studio@db:5432/production")

    assert staging["CELERY_TASK_DEFAULT_QUEUE"] != production["CELERY_TASK_DEFAULT_QUEUE"]
    assert staging["CHANNEL_PREFIX"] != production["CHANNEL_PREFIX"]


def test_the_queue_follows_the_channel_prefix_unless_it_is_named(monkeypatch):
    prefixed = deployment(monkeypatch, STUDIO_CHANNEL_PREFIX="ashmere")
    named = deployment(monkeypatch, STUDIO_CHANNEL_PREFIX="ashmere", STUDIO_CELERY_QUEUE="compactions")

    assert prefixed["CELERY_TASK_DEFAULT_QUEUE"] == "ashmere"
    assert named["CELERY_TASK_DEFAULT_QUEUE"] == "compactions"
