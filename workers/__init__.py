"""Background work: the Celery tasks (``tasks``) — the landing queue, the catch-up derive pass and
recovery. Each task takes ids, calls one service in repos/services/, and is safe to retry.
"""
