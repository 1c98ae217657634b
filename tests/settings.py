"""Settings for the test suite: the site's settings with a throwaway data directory.

pytest-django imports settings before any conftest.py runs, so this module is the
earliest place to point AGENTGIT_DATA_DIR away from ./var. Every process (each
xdist worker too) gets a fresh directory, removed at exit, even when
AGENTGIT_DATA_DIR is exported: tests must never touch a real data directory.
"""

import atexit
import os
import shutil
import tempfile

_data_dir = tempfile.mkdtemp(prefix="agentgit-test-")
atexit.register(shutil.rmtree, _data_dir, ignore_errors=True)
os.environ["AGENTGIT_DATA_DIR"] = _data_dir
# Metrics files too: an inherited PROMETHEUS_MULTIPROC_DIR (xdist workers are children of the
# controller) would make two workers count into one directory.
os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.path.join(_data_dir, "metrics")

from agentgit_site.settings import *  # noqa: E402,F403

# The production hasher is slow on purpose; tests create and check passwords often.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# No collectstatic before tests: serve static files straight from the apps.
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True

# Each landing's ref written in its request, so a test reads the mirror right after it; the
# batched writer (the default 0.1 s) has tests of its own (tests/git/test_mirror.py).
AGENTGIT = {**AGENTGIT, "MIRROR_FOLLOW_S": 0.0}  # noqa: F405
