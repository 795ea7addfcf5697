"""The test run's environment, set before Django reads its settings.

Loaded as a pytest plugin (`-p tests.environment` in pytest.ini): plugins
named there are imported before pytest-django loads the settings, which
conftest.py files are not. The servers, workers and commands the tests
start inherit it.
"""

import os

# DEBUG is off in tests (as in production), and with DEBUG off the studio
# refuses a missing or development secret key. This one is for tests only.
os.environ.setdefault(
    "DJANGO_SECRET_KEY", "tests-only-secret-key-3c9f1e7a52d84b06a1f5e2c7d9b3084f6e1a2b5c7d9e0f1a"
)
