"""Training jobs and the status they drive: the job state machine, every compare-and-set on a
``training_jobs`` row and every status change it makes (``jobs``), which version a classifier
shows (``version_view``), fair scheduling (``scheduling``), the queues' producer side
(``queue``), a job's time series (``history``), the status-event outbox (``status_events``) and
the live workers' registry (``worker_registry``)."""
