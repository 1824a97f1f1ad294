"""coda.metrics: pass@k / Average@k worked examples and properties (hypothesis), success tables whose denominators
include crashed, timed-out and missing episodes, bootstrap intervals, and AgentRewardBench judge metrics.
Worked examples: shared/research/judge-grpo-metrics.md §7.5-7.6. Budgeted to a few seconds in all."""
import math, warnings
from dataclasses import dataclass
import numpy as np, pandas as pd, pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from coda.metrics import (OVERALL_APPS, OVERALL_TASKS, average_at_k, fill_missing, is_success, judge_prf, judge_table,
                          mean_pass_at_k, pass_at_k, success_table, table_markdown, task_counts)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)

def ep(app, task, sample, score=1.0, status='done'): return dict(app=app, task=task, sample=sample, score=score, status=status)

# ------------------------------------------------------------------ pass@k, Average@k: worked examples (§7.5)
@pytest.mark.parametrize('n,c,k,want', [(8, 2, 1, 0.25), (8, 2, 4, 0.785714), (8, 2, 8, 1.0), (8, 0, 8, 0.0),
                                        (8, 8, 1, 1.0), (10, 3, 5, 0.916667), (5, 1, 2, 0.4)])
def test_pass_at_k_worked_examples(n, c, k, want):
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-6)

def test_task_set_worked_example():
    cs = [0, 2, 8]
    assert average_at_k(cs, 8) == pytest.approx(0.416667, abs=1e-6)
    assert mean_pass_at_k(cs, 8, 8) == pytest.approx(0.666667, abs=1e-6)
    # the same through episode records and the table
    recs = [ep('app', f't{j}', s, float(s < c)) for j, c in enumerate(cs) for s in range(8)]
    row = success_table(recs, ks=(8,), bootstrap=0).loc['app']
    assert row['Average@8'] == pytest.approx(0.416667, abs=1e-6)
    assert row['Pass@8'] == pytest.approx(0.666667, abs=1e-6)

@pytest.mark.parametrize('args,msg', [((4, 1, 8), 'at least k runs'), ((8, 9, 1), 'c = 9'), ((8, -1, 1), '>= 0'),
                                      ((-1, 0, 1), '>= 0'), ((8, 1, 0), 'k must be in'), ((0, 0, 0), 'n must be >= 1'),
                                      ((8, 1.5, 1), 'whole number')])
def test_pass_at_k_rejects_impossible_inputs(args, msg):
    with pytest.raises(ValueError, match=msg): pass_at_k(*args)

def test_average_rejects_bad_counts():
    with pytest.raises(ValueError, match='no tasks'): average_at_k([], 8)
    with pytest.raises(ValueError, match='c = 9'): average_at_k([1, 9], 8)

# ------------------------------------------------------------------ pass@k properties
nck = st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n)))

@FAST
@given(nck)
def test_pass_at_k_is_the_exact_combinatorial_formula(t):
    n, c, k = t
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    assert 0.0 <= pass_at_k(n, c, k) <= 1.0

@FAST
@given(nck)
def test_pass_at_k_monotone_in_k_and_c(t):
    n, c, k = t
    p = pass_at_k(n, c, k)
    if k < n: assert pass_at_k(n, c, k + 1) >= p
    if c < n: assert pass_at_k(n, c + 1, k) >= p

@FAST
@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_n_is_any_of_n_and_pass_at_1_is_the_rate(t):
    n, c = t
    assert pass_at_k(n, c, n) == float(c > 0)
    assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)

@FAST
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.integers(0, n), min_size=1, max_size=20))))
def test_average_at_n_is_mean_pass_at_1(t):
    n, cs = t
    assert mean_pass_at_k(cs, n, 1) == pytest.approx(average_at_k(cs, n), abs=1e-12)
    assert average_at_k(cs, n) <= mean_pass_at_k(cs, n, n) + 1e-12

def test_pass_at_k_large_n_is_stable():
    assert pass_at_k(2000, 7, 1000) == pytest.approx(1 - math.comb(1993, 1000) / math.comb(2000, 1000), abs=1e-12)

# ------------------------------------------------------------------ records, success, filling in
def test_success_rule():
    assert is_success(1.0) and is_success('1') and is_success(1.5)
    assert not is_success(0.99) and not is_success(None) and not is_success(float('nan'))
    assert not is_success(1.0, 'timeout') and not is_success(1.0, 'error')

def test_fill_missing_makes_the_denominator_tasks_times_n():
    recs = [ep('a', 't1', 0), ep('a', 't1', 2, status='error', score=None)]
    out = fill_missing(recs, [('a', 't1'), ('b', 't2')], 3)
    assert out[:2] == recs and len(out) == 6
    assert {(r['app'], r['task'], r['sample']) for r in out[2:]} == {('a', 't1', 1), ('b', 't2', 0), ('b', 't2', 1), ('b', 't2', 2)}
    assert all(r['status'] == 'missing' and r['score'] is None for r in out[2:])
    with pytest.raises(ValueError, match='duplicate tasks'): fill_missing(recs, [('a', 't1'), ('a', 't1')], 3)

def test_task_counts_counts_failures_by_status():
    recs = [ep('a', 't', 0), ep('a', 't', 1, 0.0), ep('a', 't', 2, None, 'error'), ep('a', 't', 3, 1.0, 'timeout'),
            ep('a', 't', 4, 1.0, 'skipped'), ep('a', 't', 5, None, 'done'), ep('a', 't', 6, None, 'missing')]
    r = task_counts(recs).iloc[0]
    assert (r.n, r.c, r.errors, r.timeouts, r.missing) == (7, 1, 3, 1, 1)
    assert r['first'] and r.score == pytest.approx(1 / 7)
    with pytest.raises(ValueError, match='duplicate episode'): task_counts(recs + [ep('a', 't', 0)])

# ------------------------------------------------------------------ success tables
@dataclass
class Episode:  # records may be objects with attributes, as the store's may be
    app: str; task: str; sample: int; score: float | None; status: str

def test_crashes_timeouts_and_missing_lower_the_rates_and_are_counted():
    tasks = [('algebra', f'A-{i}') for i in range(3)] + [('gis', f'B-{i}') for i in range(2)]
    ok = [Episode(a, t, s, 1.0, 'done') for a, t in tasks for s in range(4)]
    base = success_table(ok, tasks=tasks, ks=(1, 4), bootstrap=0)
    assert (base[['Average@1', 'Average@4', 'Pass@4']] == 1.0).all().all()
    bad = list(ok)
    bad[0] = Episode('algebra', 'A-0', 0, None, 'error')     # run 0 crashed
    bad[5] = Episode('algebra', 'A-1', 1, 1.0, 'timeout')    # killed: the score does not count
    bad = [e for e in bad if not (e.task == 'B-1')]          # never ran at all
    t = success_table(bad, tasks=tasks, ks=(1, 4), bootstrap=0)
    assert t.loc['algebra', ['errors', 'timeouts', 'missing']].tolist() == [1, 1, 0]
    assert t.loc['gis', ['tasks', 'episodes', 'missing']].tolist() == [2, 8, 4]
    assert t.loc[OVERALL_TASKS, ['tasks', 'episodes', 'errors', 'timeouts', 'missing']].tolist() == [5, 20, 1, 1, 4]
    assert t.loc['algebra', 'Average@4'] == pytest.approx(10 / 12)
    assert t.loc['algebra', 'Average@1'] == pytest.approx(2 / 3)
    assert t.loc['gis', ['Average@1', 'Average@4', 'Pass@4']].tolist() == [0.5, 0.5, 0.5]
    assert t.loc[OVERALL_TASKS, 'Average@4'] == pytest.approx(14 / 20)
    assert (t[['Average@1', 'Average@4']] < base[['Average@1', 'Average@4']]).all().all()
    # without the task list the never-run task is invisible, which is why `tasks` should come from the task files
    assert success_table(bad, ks=(1, 4), bootstrap=0).loc['gis', 'tasks'] == 1

def test_unscored_tasks_leave_every_rate_and_denominator_and_are_counted():
    "A task without checks (status 'unscored') is neither a failure nor a pass, and its never-run samples are not 'missing'"
    tasks = [('algebra', 'A-1'), ('algebra', 'G-1'), ('gis', 'G-2')]
    recs = [ep('algebra', 'A-1', s, float(s < 3)) for s in range(4)]                       # 3 of 4
    recs += [ep('algebra', 'G-1', s, None, 'unscored') for s in range(2)]                   # samples 2, 3 never ran
    recs += [ep('algebra', 'G-1', 2, None, 'error')]                                        # a crash of the unchecked task
    recs += [ep('gis', 'G-2', s, None, 'unscored') for s in range(4)]                       # gis has no checked task
    tc = task_counts(recs)
    assert tc.set_index('task').loc['G-1', ['n', 'errors', 'unscored']].tolist() == [3, 1, 2]
    t = success_table(recs, tasks=tasks, ks=(4,), bootstrap=100)
    assert t.loc['algebra', ['tasks', 'episodes', 'errors', 'missing', 'unscored']].tolist() == [1, 4, 0, 0, 1]
    assert t.loc['algebra', 'Average@4'] == pytest.approx(0.75) and t.loc['algebra', 'Pass@4'] == 1.0
    assert t.loc['gis', ['tasks', 'episodes', 'unscored']].tolist() == [0, 0, 1] and t.loc['gis', ['Average@4', 'Average@4 hi']].isna().all()
    for overall in (OVERALL_APPS, OVERALL_TASKS):
        assert t.loc[overall, ['tasks', 'episodes', 'unscored']].tolist() == [1, 4, 2]
        assert t.loc[overall, 'Average@4'] == pytest.approx(0.75) and t.loc[overall, 'Average@4 lo'] <= 0.75
    assert t.attrs['unscored'] == [('algebra', 'G-1'), ('gis', 'G-2')]
    assert table_markdown(t).splitlines()[0].startswith('| app | tasks | episodes | errors | timeouts | missing | unscored |')
    scored_only = success_table(recs[:4], tasks=tasks[:1], ks=(4,), bootstrap=100)       # the same numbers as without them
    pd.testing.assert_series_equal(t.loc[OVERALL_TASKS, scored_only.columns[6:]], scored_only.loc[OVERALL_TASKS, scored_only.columns[6:]])
    assert 'unscored' not in table_markdown(scored_only)
    nothing = success_table([ep('gis', 'G-2', 0, None, 'unscored')], bootstrap=50)           # nothing scored at all: NaN, no error
    assert nothing['Average@1'].isna().all() and nothing.loc[OVERALL_TASKS, ['tasks', 'unscored']].tolist() == [0, 1]
    with pytest.warns(UserWarning, match='both scored and unscored'):
        mixed = success_table([ep('a', 't', 0, 1.0), ep('a', 't', 1, None, 'unscored')], bootstrap=0)
    assert mixed.loc['a', ['tasks', 'unscored']].tolist() == [0, 1]

def test_mean_of_apps_and_mean_of_tasks_differ_and_are_labelled():
    # the paper's GPT-4o row (coda-scienceboard.md §4.6): 1 of Algebra's 31 tasks, nothing in the other three apps
    sizes = {'algebra': 31, 'biochem': 29, 'gis': 34, 'astronomy': 33}
    recs = [ep(a, f'{a}-{i}', 0, float(a == 'algebra' and i == 0)) for a, m in sizes.items() for i in range(m)]
    t = success_table(recs, bootstrap=0)
    assert list(t.index[-2:]) == [OVERALL_APPS, OVERALL_TASKS] == ['overall (mean of apps)', 'overall (mean of tasks)']
    assert t.loc[OVERALL_APPS, 'Average@1'] == pytest.approx(1 / 31 / 4)    # 0.81%, as the paper prints
    assert t.loc[OVERALL_TASKS, 'Average@1'] == pytest.approx(1 / 127)
    md = table_markdown(t)
    assert '| overall (mean of apps) | 127 | 127 | 0 | 0 | 0 | 0.8 |' in md and '| overall (mean of tasks) |' in md

def test_bootstrap_reproducible_contains_point_and_shrinks():
    rng = np.random.default_rng(1)
    tasks = [(a, f'{a}{i}') for a, m in (('x', 12), ('y', 20)) for i in range(m)]
    p = {t: rng.random() for t in tasks}
    recs = [ep(a, t, s, float(rng.random() < p[(a, t)])) for a, t in tasks for s in range(6)]
    a, b = (success_table(recs, ks=(1, 3, 6), seed=5) for _ in range(2))
    pd.testing.assert_frame_equal(a, b)
    c = success_table(recs, ks=(1, 3, 6), seed=6)
    assert not np.allclose(a['Pass@3 lo'], c['Pass@3 lo']) or not np.allclose(a['Pass@3 hi'], c['Pass@3 hi'])
    for m in a.attrs['metrics']:
        assert (a[f'{m} lo'] <= a[m]).all() and (a[m] <= a[f'{m} hi']).all(), m
    many = success_table([r | dict(task=f"{r['task']}#{j}") for r in recs for j in range(9)], ks=(1, 3, 6), seed=5)
    for m in ('Average@6', 'Pass@6'):
        pd.testing.assert_series_equal(many[m], a[m], check_exact=False)
        ratio = (many[f'{m} hi'] - many[f'{m} lo']) / (a[f'{m} hi'] - a[f'{m} lo'])
        assert (ratio < 0.6).all() and (ratio > 0.2).all(), ratio   # about 1/sqrt(9)
    none = success_table(recs, bootstrap=0)
    assert none['Average@1 lo'].isna().all()

def test_n_inference_restriction_and_validation():
    recs = [ep('a', 't', s, float(s % 2)) for s in range(8)] + [ep('a', 'u', s, 0.0) for s in range(5)]
    t = success_table(recs, ks=(8,), bootstrap=0)
    assert t.attrs['n'] == 8 and t.loc['a', 'missing'] == 3 and t.loc['a', 'episodes'] == 16
    t4 = success_table(recs, n=4, ks=(4,), bootstrap=0)                 # the first 4 runs of each task
    assert t4.loc['a', 'Average@4'] == pytest.approx(2 / 8) and t4.loc['a', 'episodes'] == 8
    with pytest.raises(ValueError, match=r'Pass@9 needs'): success_table(recs, ks=(9,))
    with pytest.raises(ValueError, match='cannot be inferred'): success_table([])
    with pytest.raises(ValueError, match='duplicate episode'): success_table(recs + recs[:1])
    with pytest.warns(UserWarning, match='outside `tasks`'):
        only_t = success_table(recs, tasks=[('a', 't')], bootstrap=0)
    assert only_t.loc['a', 'tasks'] == 1
    df = success_table(pd.DataFrame(recs), ks=(8,), bootstrap=0)      # a DataFrame of records works too
    pd.testing.assert_frame_equal(df, t)

def test_fractional_scores_count_only_at_one_and_show_a_mean_score():
    recs = [ep('os', 't1', 0, 0.5), ep('os', 't1', 1, 1.0), ep('os', 't2', 0, 0.25), ep('os', 't2', 1, 0.0)]
    r = success_table(recs, bootstrap=0).loc['os']
    assert r['Average@2'] == pytest.approx(0.25) and r['Mean score'] == pytest.approx(0.4375)
    assert 'Mean score' in table_markdown(success_table(recs, bootstrap=0))
    assert 'Mean score' not in table_markdown(success_table([ep('os', 't', 0, 1.0)], bootstrap=0))

def test_table_markdown_format():
    recs = [ep('algebra', f't{i}', s, float(i < 2)) for i in range(5) for s in range(2)]
    t = success_table(recs, ks=(2,), seed=0)
    lines = table_markdown(t).splitlines()
    assert lines[0] == '| app | tasks | episodes | errors | timeouts | missing | Average@1 | Average@2 | Pass@2 |'
    assert lines[1] == '|:---|---:|---:|---:|---:|---:|---:|---:|---:|'
    r = t.loc['algebra']
    want = f"40.0 [{100 * r['Average@1 lo']:.1f}, {100 * r['Average@1 hi']:.1f}]"
    assert lines[2].startswith('| algebra | 5 | 10 | 0 | 0 | 0 | ' + want)
    assert len(lines) == 5

@SLOW
@given(st.lists(st.tuples(st.sampled_from('ab'), st.integers(0, 3), st.integers(0, 2),
                          st.sampled_from([0.0, 1.0, 0.5, None]), st.sampled_from(['done', 'done', 'error', 'timeout'])),
                max_size=25, unique_by=lambda r: r[:3]),
       st.integers(0, 10**6))
def test_table_matches_direct_computation(rows, seed):
    tasks = [(a, f'{a}{i}') for a in 'ab' for i in range(4)]
    recs = [dict(app=a, task=f'{a}{i}', sample=s, score=sc, status=stt) for a, i, s, sc, stt in rows]
    t = success_table(recs, tasks=tasks, n=3, ks=(1, 2, 3), bootstrap=50, seed=seed)
    succ = {(r['app'], r['task'], r['sample']) for r in recs if r['status'] == 'done' and r['score'] == 1.0}
    cs = {tk: sum((*tk, s) in succ for s in range(3)) for tk in tasks}
    assert t.loc[OVERALL_TASKS, 'episodes'] == 24
    assert t.loc[OVERALL_TASKS, 'missing'] == 24 - len(recs)
    assert t.loc[OVERALL_TASKS, 'Average@3'] == pytest.approx(average_at_k(list(cs.values()), 3))
    assert t.loc[OVERALL_TASKS, 'Pass@2'] == pytest.approx(mean_pass_at_k(list(cs.values()), 3, 2))
    for a in 'ab':
        assert t.loc[a, 'Average@1'] == pytest.approx(np.mean([(a, f'{a}{i}', 0) in succ for i in range(4)]))
    assert t.loc[OVERALL_APPS, 'Pass@3'] == pytest.approx(t.loc[['a', 'b'], 'Pass@3'].mean())
    for m in t.attrs['metrics']:
        assert (t[f'{m} lo'] <= t[m] + 1e-12).all() and (t[m] <= t[f'{m} hi'] + 1e-12).all()
        assert ((0 <= t[f'{m} lo']) & (t[f'{m} hi'] <= 1)).all()

# ------------------------------------------------------------------ judge metrics (AgentRewardBench semantics, §7.6)
def test_judge_prf_worked_example():
    m = judge_prf([1, 1, 0, 0, 1, 0], [1, 0, 1, -1, 1, 0])
    assert (m['tp'], m['fp'], m['fn'], m['tn'], m['na'], m['n']) == (2, 1, 1, 1, 1, 6)
    assert round(m['precision'], 4) == round(m['recall'], 4) == 0.6667
    assert m['accuracy'] == 0.5 and m['tnr'] == pytest.approx(1 / 3)

def test_judge_prf_edge_cases():
    assert judge_prf([1, 0], [0, 0])['precision'] == 0.0        # never predicts success: P = 0, not NaN
    assert judge_prf([0, 0], [1, 0])['recall'] == 0.0            # no human successes: R = 0
    assert judge_prf([], [])['accuracy'] == 0.0
    assert judge_prf([1, None, 0, float('nan')], [1, 1, 0, 0])['n'] == 2   # unsure human labels drop out
    m = judge_prf([1] * 3 + [0] * 4, [1, 1, 0, 1, 1, 1, 0])       # P = 0.4, R = 2/3: F1 from the 4-decimal P and R
    assert m['f1'] == 2 * 0.4 * 0.6667 / (0.4 + 0.6667) != 0.5
    with pytest.raises(ValueError, match='judge labels'): judge_prf([1], [2])
    with pytest.raises(ValueError, match='human labels must be'): judge_prf([-1], [1])
    with pytest.raises(ValueError, match='1 judge'): judge_prf([1, 0], [1])

labels = st.lists(st.tuples(st.integers(0, 1), st.sampled_from([-1, 0, 1])), max_size=40)

@FAST
@given(labels)
def test_na_drops_out_of_precision_and_recall_but_counts_in_accuracy(pairs):
    yt, yp = [t for t, _ in pairs], [p for _, p in pairs]
    m = judge_prf(yt, yp)
    kept = [(t, p) for t, p in pairs if p != -1]
    k = judge_prf([t for t, _ in kept], [p for _, p in kept])
    assert (m['precision'], m['recall'], m['f1']) == (k['precision'], k['recall'], k['f1'])
    assert m['na'] == len(pairs) - len(kept) and m['n'] == len(pairs)
    assert m['tp'] + m['fp'] + m['fn'] + m['tn'] + m['na'] == m['n']
    assert m['accuracy'] == pytest.approx((sum(t == p for t, p in pairs) / len(pairs)) if pairs else 0.0)
    neg = sum(t == 0 for t in yt)
    assert m['tnr'] == pytest.approx(sum(t == p == 0 for t, p in pairs) / neg if neg else 0.0)
    for key in ('precision', 'recall', 'f1', 'accuracy', 'tnr', 'npv'): assert 0.0 <= m[key] <= 1.0

def test_judge_table():
    human = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    base = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    tuned = [1, 1, 0, 1, 1, 0, 0, 1, 0, -1]
    both = [int(a == 1 and b == 1) for a, b in zip(base, tuned)]
    t = judge_table({'base': (human, base), 'tuned': (human, tuned), 'base AND tuned': (human, both)})
    assert list(t.columns) == ['Precision', 'Recall', 'F1', 'Accuracy', 'TNR', 'n', 'n/a'] and t.index.name == 'judge'
    assert t.loc['base'].tolist() == [60.0, 75.0, 66.7, 70.0, 66.7, 10, 0]
    assert t.loc['tuned', ['Accuracy', 'n/a']].tolist() == [60.0, 1]
    assert t.loc['base AND tuned', ['Precision', 'Recall', 'F1']].tolist() == [66.7, 50.0, 57.1]
