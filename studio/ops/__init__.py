"""What an operator reads: /healthz and /readyz, the workers' heartbeats, the
metrics, the periodic jobs' last runs, and what a log line knows."""
