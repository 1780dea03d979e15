"""PostgreSQL connectors: upsert, two-phase-commit, write-ahead and at-least-once sinks; a
table source; asynchronous lookups."""
