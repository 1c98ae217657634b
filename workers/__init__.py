"""Background work: the Celery tasks (``tasks``) — the landing queue, the catch-up derive pass,
recovery, rebuilding the ref mirrors, repository maintenance and outbox pruning. Each task takes
ids, calls one service in repos/services/, and is safe to retry.
"""
