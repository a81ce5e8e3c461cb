"""Celery workers: the training task around :mod:`trainer`, leased and fenced through
:mod:`service.training.jobs`. ``python -m workers`` runs one worker.

Nothing is imported here: the reconciler and the webhook worker (``python -m workers.reconciler``,
``python -m workers.webhook_worker``) never train, and importing the training run would load
torch and the trainer into each (some 1.7 s of CPU at every start of `taas up`)."""
