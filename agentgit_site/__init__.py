"""The Django project: settings, URLs and the ASGI/WSGI entry points."""
