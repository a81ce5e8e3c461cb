"""Training jobs and the status they drive: the job state machine, whose compare-and-sets on
``training_jobs`` rows are all in ``jobs`` and ``leases`` (the writes a worker makes under its
lease), every change of a classifier's or a version's status (``status``), the lock order
those writes keep (``locks``), read-only views of jobs (``job_views``), fair scheduling
(``scheduling``), the queues' producer side (``queue``), a job's time series (``history``), the
status-event outbox (``status_events``) and the live workers' registry (``worker_registry``)."""
