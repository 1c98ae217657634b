"""Background work: the landing queue, derive passes, event relay, GC and recovery.

Celery tasks will live here. Each task takes ids, calls one service in
repos/services/, and is safe to retry.
"""
