"""Helpers the tests share. One rule for tests that need Debian programs: skipped when they are missing, except in
CI (CI=true), where a missing package is a failure (`make sysdeps` installs them). And `caught`, for the warnings a
call raises."""
import os, shutil, warnings
import pytest

def need_programs(*progs:str):
    "Skip (or, in CI, fail) unless every program is on PATH"
    missing = [p for p in progs if not shutil.which(p)]
    if missing:
        if os.environ.get('CI') == 'true': pytest.fail(f"CI needs {missing} (make sysdeps)")
        pytest.skip(f"not installed: {missing}")

def caught(fn):
    "fn()'s value and the messages of the warnings it raised"
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        v = fn()
    return v, [str(w.message) for w in ws]
