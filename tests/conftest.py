"""Session fixtures shared by the tests: a tiny random Qwen2.5-VL built in code, and a real `transformers serve` over it."""
import sys
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # agent_fixtures, uitars_ref

@pytest.fixture(scope='session')
def tiny(tmp_path_factory):
    from coda.tiny import build_tiny_qwen25vl
    return build_tiny_qwen25vl(tmp_path_factory.mktemp('models')/'tiny-qwen25vl')

@pytest.fixture(scope='session')
def local(tiny):
    from coda.models import LocalChat
    return LocalChat(tiny)

@pytest.fixture(scope='session')
def served(tiny):
    from coda.models import serve_transformers
    with serve_transformers(tiny, timeout=150) as url: yield url

def pytest_terminal_summary(terminalreporter):
    "Print the fuzz counts (tests/fuzz.py) after the run, even under -q"
    from fuzz import REPORT
    if not REPORT: return
    terminalreporter.section('fuzz counts')
    for c in REPORT: terminalreporter.write_line(c.line())
    tot = [sum(getattr(c, k) or 0 for c in REPORT) for k in ('inputs', 'exceptions', 'hangs', 'markers')]
    attacks = [c for c in REPORT if c.markers is not None]
    terminalreporter.write_line(f"all fuzz targets: {tot[0]} inputs, {tot[1]} exceptions, {tot[2]} hangs; "
                                f"{len(attacks)} attack targets, {sum(c.inputs for c in attacks)} inputs, {tot[3]} markers")
