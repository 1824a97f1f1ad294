"""Table 2 through papermill at a smoke size: the table files with their rows and columns, sane percentages, the
paper's known row and its unknown ones, and a second run that reuses every finished stage."""
import json, time
import pandas as pd
import papermill as pm
from coda.paths import NBS

SMOKE = dict(train_tasks=8, train_seeds=1, test_tasks=8, judge_steps=4, judge_max_tokens=24, bootstrap=100)
ROWS = ['single', 'voting@4', 'voting@4 + multi-resolution', 'ensemble']

def _run(tmp, **params):
    t0 = time.time()
    pm.execute_notebook(str(NBS/'21_table2.ipynb'), str(tmp/'out.ipynb'), parameters=dict(run=str(tmp/'run'), out=str(tmp/'fig'), **params),
                        cwd=str(NBS), kernel_name='python3', progress_bar=False)
    return time.time() - t0

def test_table2_smoke_and_resume(tmp_path):
    first = _run(tmp_path, **SMOKE)
    t = pd.read_csv(tmp_path/'fig'/'table2.csv', index_col=0)
    assert list(t.index) == ROWS
    assert {'Precision', 'Recall', 'F1', 'P low', 'P high', 'R low', 'R high', 'n', 'n/a', 'Calls per trajectory', 'Paper P', 'Paper R'} <= set(t.columns)
    for c in ('Precision', 'Recall', 'F1', 'P low', 'P high', 'R low', 'R high'):
        assert t[c].dropna().between(0, 100).all(), c
    assert (t['n'] == 8).all() and (t['n/a'] == 0).all()
    assert (t.loc['single', 'Paper P'], t.loc['single', 'Paper R']) == (64.5, 83.4)
    assert t.loc[ROWS[1:], ['Paper P', 'Paper R']].isna().all().all()          # not read: left empty, never invented
    md = (tmp_path/'fig'/'table2.md').read_text()
    assert md.count('not read') >= 6 and all(f'| {r} |' in md for r in ROWS)
    assert (tmp_path/'fig'/'table2_pr.png').stat().st_size > 1000
    timings = json.loads((tmp_path/'run'/'timings.json').read_text())
    assert not any(v['reused'] for v in timings.values())
    judged = lambda: {p.relative_to(tmp_path): p.read_text() for n in ('single', 'coda', 'coda-multires', 'ensemble')
                      for p in (tmp_path/'run'/'test'/'judgments'/n).rglob('*.json')}
    judgments = judged()
    assert len(judgments) == 4 * 8

    second = _run(tmp_path, **SMOKE)                                         # resumes: every stage reused
    timings = json.loads((tmp_path/'run'/'timings.json').read_text())
    assert all(v['reused'] for v in timings.values()), timings
    assert judged() == judgments
    assert pd.read_csv(tmp_path/'fig'/'table2.csv', index_col=0).equals(t)   # the same judgments give the same table
    assert second < first, (first, second)

    other = tmp_path/'given'                                                 # a judge trained elsewhere (Table 1's) is evaluated, not retrained
    pm.execute_notebook(str(NBS/'21_table2.ipynb'), str(tmp_path/'given.ipynb'), cwd=str(NBS), kernel_name='python3', progress_bar=False,
                        parameters=dict(run=str(other/'run'), out=str(other/'fig'), judge_dir=str(tmp_path/'run'/'judge'/'model'), **SMOKE))
    g = pd.read_csv(other/'fig'/'table2.csv', index_col=0)
    assert list(g.index) == ROWS and (g['n'] == 8).all()
    assert not (other/'run'/'judge').exists() and not (other/'run'/'train-0').exists()
    assert 'tiny Qwen2.5-VL judge in' in (other/'fig'/'table2.md').read_text()

def test_table2_refuses_other_settings_in_the_same_run(tmp_path):
    "A run folder made with other stage parameters is not silently mixed: the notebook stops and says fresh=True"
    (tmp_path/'run').mkdir()
    (tmp_path/'run'/'params.json').write_text(json.dumps(dict(seed=1)))
    try:
        _run(tmp_path, **SMOKE); raise AssertionError('no error')
    except pm.PapermillExecutionError as e:
        assert 'fresh=True' in str(e)

def test_table2_paper_scale_path_uses_a_served_judge_on_a_given_run(tmp_path, served, tiny):
    "The paper-scale branch (a judge behind an OpenAI-compatible server, a given checker-scored run) on a tiny served model"
    from coda.envs.scidesk import scidesk_tasks
    from coda.mini.tinyjudge import record_mixed
    record_mixed([t for t in scidesk_tasks() if t.split == 'test'][:4], tmp_path/'eval', seed=5)
    _run(tmp_path, judge_url=served, judge_model=str(tiny), eval_run=str(tmp_path/'eval'), judge_max_tokens=8, bootstrap=50)
    t = pd.read_csv(tmp_path/'fig'/'table2.csv', index_col=0)
    assert list(t.index) == ROWS and (t['n'] == 4).all()
    assert len(list((tmp_path/'eval'/'judgments'/'ensemble').rglob('*.json'))) == 4   # filed in the given run
    assert not (tmp_path/'run'/'judge').exists() and not (tmp_path/'run'/'train-0').exists()   # nothing trained or recorded
