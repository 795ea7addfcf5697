"""The parts of scripts/studioctl, the control command (docs/operating.md,
"The control command"): `base` (the checkout, the settings, running
commands), `database`, `backups`, `processes` (and the probes), `commands`
(status, start, stop, restarts, backups), `releases` (upgrade, rollback) and
`cli`. Python's standard library only: it runs when the studio's own
virtualenv does not."""
