"""The system of record: the HTTP API, tenancy, the data model, the job state machine and the
artifact store, in rooms (sub-packages, each saying what it owns) that import only the rooms
below them: the ``layers`` contract in pyproject.toml, drawn in docs/architecture.md."""
