"""What the tests share: fixtures' helpers and the harness that starts real
processes, imported by test modules and conftests alike (never from a test
module)."""
