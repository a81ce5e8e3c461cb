"""Celery workers: the training task around :mod:`trainer`, leased and fenced through
:mod:`service.training.jobs`. ``python -m workers`` runs one worker."""

from workers.training_run import JobInterrupted, run_training_job

__all__ = ["JobInterrupted", "run_training_job"]
