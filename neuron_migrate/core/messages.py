"""Calls whose string arguments are messages to a person (printed, logged, warned, formatted),
not values a program acts on: a string there that names the old stack changes nothing it does."""

MESSAGE_CALLS = frozenset(
    {"print", "format", "warn", "debug", "info", "warning", "error", "exception", "critical", "log", "write", "master_print"}
)
