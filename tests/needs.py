"""One rule for tests that need Debian programs: skipped when they are missing, except in CI (CI=true), where a
missing package is a failure (`make sysdeps` installs them)."""
import os, shutil
import pytest

def need_programs(*progs:str):
    "Skip (or, in CI, fail) unless every program is on PATH"
    missing = [p for p in progs if not shutil.which(p)]
    if missing:
        if os.environ.get('CI') == 'true': pytest.fail(f"CI needs {missing} (make sysdeps)")
        pytest.skip(f"not installed: {missing}")
