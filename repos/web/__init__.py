"""The web UI: server-rendered pages for people (templates/web/).

Views check the session's user (``access``), call the read services in ``repos/services/`` —
the same ones the REST API calls — and render templates; they never import ``repos.api``.
``urls`` lists the pages; ``security`` sets the headers every response carries; ``auth`` is the
rate-limited login; ``diffs`` and ``render`` turn content into what templates show; ``feed`` is
the session-authenticated live event feed.
"""
