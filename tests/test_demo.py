"""`coda demo`: scidesk episodes through the real agent loop into a run folder under the current directory, judged, viewed, resumed."""
import json, re, subprocess, sys, time
import pytest
from pathlib import Path
from coda.cli import main
from coda.store import RunStore

_SCRIPT = Path(sys.executable).parent/'coda'
CODA = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, '-c', 'from coda.cli import main; main()']

def demo(cwd, *args):
    p = subprocess.run([*CODA, 'demo', '--quiet', *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout

def test_demo_end_to_end_in_the_current_directory_and_resumes(tmp_path):
    t0 = time.perf_counter()
    out = demo(tmp_path, '--noise', '0.5')
    wall = time.perf_counter() - t0
    run = tmp_path/'runs'/'demo'
    recs = RunStore(run).records()
    assert len(recs) == 8 and {r['app'] for r in recs} == {'Algebra', 'Astronomy', 'Biochem', 'GIS'}, recs
    wins = sum(r['score'] >= 1 for r in recs)
    assert 0 < wins < 8, recs                                          # the planned mistakes spoil some episodes, not all
    assert f"overall {wins}/8" in out and f"accepted {wins}/8, checkers {wins}/8" in out and 'coda.judge.checker_judgments; no model' in out, out
    viewer = Path(re.search(r'^viewer: (.+)$', out, re.M)[1])
    assert (tmp_path/viewer).resolve() == (run/'viewer.html').resolve() and (run/'viewer.html').stat().st_size > 1000
    assert len(list((run/'judgments'/'checker').glob('*/*/*.json'))) == 8
    secs = float(re.search(r'^time: ([\d.]+) s$', out, re.M)[1])
    assert secs < wall and wall < 60, (secs, wall)
    print(f"coda demo: {secs:.1f} s printed, {wall:.1f} s wall with the interpreter's start")
    results = {p: p.stat().st_mtime_ns for p in run.glob('episodes/*/*/*/result.json')}
    again = demo(tmp_path, '--noise', '0.5')
    assert '0 run now, 8 already on disk' in again and f"overall {wins}/8" in again, again
    assert {p: p.stat().st_mtime_ns for p in run.glob('episodes/*/*/*/result.json')} == results   # nothing was run again
    more = demo(tmp_path, '--noise', '0.5', '--episodes', '10')
    assert '2 run now, 8 already on disk' in more and len(RunStore(run).records()) == 10, more

def test_demo_flags(tmp_path, monkeypatch, capsys):
    "--apps, --out, --noise 0 (every episode succeeds), --open (the viewer's file URL handed to the browser)"
    opened = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr('webbrowser.open', opened.append)
    main(['demo', '--apps', 'GIS', 'Algebra', '--episodes', '4', '--noise', '0', '--out', 'clean', '--workers', '1', '--seed', '3', '--open', '--quiet'])
    out = capsys.readouterr().out
    recs = RunStore(tmp_path/'clean').records()
    assert sorted(r['app'] for r in recs) == ['Algebra', 'Algebra', 'GIS', 'GIS'] and all(r['score'] == 1.0 for r in recs), recs
    assert 'one planned mistake in 0 of 4 episodes' in out and 'overall 4/4' in out, out
    assert opened == [(tmp_path/'clean'/'viewer.html').as_uri()]
    assert json.loads((tmp_path/'clean'/'run.json').read_text())['noise'] == 0.0

def test_demo_mistakes_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    def fails(*args):
        with pytest.raises(SystemExit) as e: main(['demo', '--quiet', *args])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count('\n') == 1, err
        return err
    assert 'scidesk has no app ChimeraX' in fails('--apps', 'ChimeraX')
    assert 'noise is a probability' in fails('--noise', '2')
    assert 'must be at least 1' in fails('--episodes', '0')
    assert not (tmp_path/'runs').exists()
    main(['demo', '--quiet', '--episodes', '2'])
    err = fails('--episodes', '2', '--noise', '0.9')
    assert 'noise' in err and 'another --out folder' in err, err   # other settings are not mixed into a run
    main(['demo', '--quiet', '--episodes', '2', '--noise', '0.9', '--fresh'])
    assert '2 run now, 0 already on disk' in capsys.readouterr().out and json.loads((tmp_path/'runs'/'demo'/'run.json').read_text())['noise'] == 0.9
