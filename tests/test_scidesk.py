"""Every scidesk task: its oracle passes (through the same Actions the agent produces), doing nothing fails, a
random policy fails almost all; rendering is deterministic; the environment follows the Env protocol."""
import hashlib, random
import pytest
from coda.envs.scidesk import SciDesk, scidesk_tasks, run_oracle, run_random, app_class, APPS
from coda.envs.core import make_env
from coda.tasks import load_tasks

TASKS = scidesk_tasks()
IDS = [f'{t.app}/{t.id}' for t in TASKS]

@pytest.fixture(scope='module')
def env():
    with SciDesk(render=False) as e: yield e

@pytest.mark.parametrize('task', TASKS, ids=IDS)
def test_oracle_passes_and_empty_episode_fails(env, task):
    score, n = run_oracle(env, task)
    assert score == 1.0, (task.app, task.id, env.app.check_reasons)
    assert n <= task.steps, f'oracle needs {n} steps, budget {task.steps}'
    env.reset(task)
    assert env.evaluate() == 0.0, f'{task.app}/{task.id} passes without doing anything'

def test_every_app_has_enough_tasks_of_every_kind():
    for app in APPS:
        ts = [t for t in TASKS if t.app == app]
        assert len(ts) >= 25, (app, len(ts))
        assert any(i.get('type') == 'stop' and i.get('value') == 'FAIL' for t in ts for i in t.evaluate), f'{app}: no infeasible task'
        assert any(i.get('type') == 'stop' and i.get('value') == 'ANS' for t in ts for i in t.evaluate), f'{app}: no answer task'
        assert sum(any(i.get('type') != 'stop' for i in t.evaluate) for t in ts) >= 10, f'{app}: too few state tasks'
        assert {t.split for t in ts} == {'seed', 'train', 'test'}, (app, {t.split for t in ts})

def test_random_policy_passes_almost_none(env):
    wins = sum(run_random(env, t, seed=s) for t in TASKS for s in range(3))
    assert wins <= 0.03 * 3 * len(TASKS), f'random policy passed {wins} of {3 * len(TASKS)} episodes'

@pytest.mark.parametrize('app', sorted(APPS))
def test_rendering_is_deterministic(app):
    t = next(t for t in TASKS if t.app == app)
    a, b = app_class(app)(), app_class(app)()
    h = lambda o: hashlib.sha256(o.screenshot.tobytes()).hexdigest()
    assert h(a.reset(t)) == h(b.reset(t))
    from coda.envs.scidesk import oracle_actions
    oa, ob = a.reset(t), b.reset(t)
    for st in t.extra['oracle'][:3]:
        oa, ob = a.step(oracle_actions(st, oa)), b.step(oracle_actions(st, ob))
        assert h(oa) == h(ob) and oa.a11y_text == ob.a11y_text

def test_registered_and_protocol():
    env = make_env('scidesk', render=True)
    t = TASKS[0]
    obs = env.reset(t)
    assert obs.screenshot.size == (1280, 800) and obs.a11y and obs.a11y_text
    env.close()

@pytest.mark.parametrize('app', sorted(APPS))
def test_oracles_use_every_action_kind(app):
    "Across an app's tasks, the solutions need clicks, double and right clicks, drags, typing, hotkeys and scrolls"
    verbs = {st[0] for t in TASKS if t.app == app for st in t.extra['oracle']}
    assert {'click', 'double', 'right', 'drag', 'type', 'hotkey', 'scroll'} <= verbs, sorted(verbs)

@pytest.mark.parametrize('app', sorted(APPS))
def test_each_action_kind_changes_state_where_it_should(app):
    "Replaying each task's oracle, every step of these kinds changes the app (its dump or its UI) at least once per kind"
    from coda.envs.scidesk import oracle_actions
    import json
    changed = set()
    for t in [t for t in TASKS if t.app == app]:
        env = app_class(app)(render=False)
        obs = env.reset(t)
        for st in t.extra['oracle']:
            before = (json.dumps(env.dump(), sort_keys=True, default=str), obs.a11y_text)
            obs = env.step(oracle_actions(st, obs))
            if (json.dumps(env.dump(), sort_keys=True, default=str), obs.a11y_text) != before: changed.add(st[0])
    assert {'click', 'double', 'right', 'drag', 'type', 'hotkey', 'scroll'} <= changed, sorted(changed)

def test_a_generated_task_without_checks_is_unscored(env):
    "evaluate() gives None for a task with no checks (not 1.0 as when run_checks([]) passed), 0.0/1.0 for checked ones"
    from coda.taskgen import to_task
    gen = to_task({'instruction': 'Plot the function sin(x) in Algebra.'}, 'Algebra')
    env.reset(gen)
    assert env.evaluate() is None and env.app.check_reasons
    task = next(t for t in TASKS if t.app == 'Algebra')
    env.reset(task)
    assert env.evaluate() == 0.0
