"""`coda demo`: scidesk episodes through the real agent loop into a run folder under the current directory, judged (the checkers, or also a tiny VLM judge), viewed, resumed."""
import json, re, subprocess, sys, time
import pytest
from pathlib import Path
from coda.cli import main
from coda.metrics import judge_prf
from coda.store import RunStore, judgments

_SCRIPT = Path(sys.executable).parent/'coda'
CODA = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, '-c', 'from coda.cli import main; main()']

def demo(cwd, *args):
    p = subprocess.run([*CODA, 'demo', '--quiet', *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)
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
    assert 'coda demo --judge tiny' in out and not (run/'judge').exists() and not (run/'judgments'/'tiny-judge').exists(), out   # checker: no model
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
    assert 'must be at least 1' in fails('--judge-steps', '0')
    assert not (tmp_path/'runs').exists()
    main(['demo', '--quiet', '--episodes', '2'])
    err = fails('--episodes', '2', '--noise', '0.9')
    assert 'noise' in err and 'another --out folder' in err, err   # other settings are not mixed into a run
    main(['demo', '--quiet', '--episodes', '2', '--noise', '0.9', '--fresh'])
    assert '2 run now, 0 already on disk' in capsys.readouterr().out and json.loads((tmp_path/'runs'/'demo'/'run.json').read_text())['noise'] == 0.9

def test_demo_tiny_judge_is_trained_once_filed_and_summed_up(tmp_path):
    "--judge tiny: a tiny VLM judge trained once on the train split's checker-labelled episodes, kept in the run, reused; its judgments beside the checkers'"
    t0 = time.perf_counter()
    out = demo(tmp_path, '--episodes', '4', '--judge', 'tiny', '--judge-steps', '3')     # a few steps: the mechanics, not the accuracy
    first = time.perf_counter() - t0
    run = tmp_path/'runs'/'demo'
    info = json.loads((run/'judge'/'judge.json').read_text())
    test_keys = {(r['app'], r['task']) for r in RunStore(run).records()}
    train_keys = {(r['app'], r['task']) for r in RunStore(run/'judge'/'train').records()}
    assert info['steps'] == 3 and len(train_keys) > 50 and not test_keys & train_keys, info      # the train split, never the demo's tasks
    assert len(judgments(run/'judge'/'train', 'checker')) == len(train_keys)                      # labelled by the checkers
    got = {tuple(j.key): j for j in judgments(run, 'tiny-judge')}
    recs = RunStore(run).records()
    assert len(got) == 4 == len(judgments(run, 'checker')) and all(j.votes and j.votes[0]['reply'] for j in got.values()), got   # a model answered
    y_true, y_pred = [int(r['score'] >= 1) for r in recs], [got[(r['app'], r['task'], 0)].label for r in recs]
    m, acc = judge_prf(y_true, y_pred), sum(y_pred)
    line = re.search(r"^judge 'tiny-judge', .*$", out, re.M)[0]
    assert 'trained now on' in line and '3 steps' in line and f"accepted {acc}/4, checkers {sum(y_true)}/4" in line, out
    assert f"precision {m['precision']:.2f}, recall {m['recall']:.2f}, accuracy {m['accuracy']:.2f}" in line, (line, m)
    assert "judge 'checker'" in out and f"accepted {sum(y_true)}/4, checkers {sum(y_true)}/4" in out, out
    model = {p: p.stat().st_mtime_ns for p in (run/'judge').rglob('*') if p.is_file()}
    filed = {p: p.stat().st_mtime_ns for p in (run/'judgments'/'tiny-judge').rglob('*.json')}
    t0 = time.perf_counter()
    again = demo(tmp_path, '--episodes', '4', '--judge', 'tiny', '--judge-steps', '3')
    rerun = time.perf_counter() - t0
    assert 'trained before on' in again and f"accepted {acc}/4" in again, again
    assert {p: p.stat().st_mtime_ns for p in (run/'judge').rglob('*') if p.is_file()} == model       # not trained again, nothing re-recorded
    assert {p: p.stat().st_mtime_ns for p in (run/'judgments'/'tiny-judge').rglob('*.json')} == filed   # nor judged again
    assert rerun < 60 and rerun < first, (first, rerun)
    print(f"coda demo --judge tiny: {first:.1f} s with training (3 steps), {rerun:.1f} s reused")
