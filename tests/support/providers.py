"""A model call's control for a provider called outside a turn: never
cancelled, and its waits real."""

import time

from agents.providers.base import Control


class NoControl(Control):
    def check(self) -> None:
        return None

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
