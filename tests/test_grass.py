"""GRASS GIS 8.2 as a real desktop app: every task's empty episode fails and its oracle passes, on Xvfb.

Needs Debian's grass-gui, xvfb, xdotool and openbox. Without them the tests are skipped, except in CI (CI=true),
where a missing package is a failure. One GRASS start per task (about 5 s): the empty episode is scored right
after `reset`, then the oracle is played in the same episode.
"""
import os, shutil, time
import pytest
from coda.envs.desktop import DesktopEnv, desktop_processes
from coda.envs.scidesk import oracle_actions

pytestmark = pytest.mark.xvfb

from needs import need_programs as _need

def _tasks():
    from coda.envs.grass import grass_tasks
    return grass_tasks()

def test_task_files():
    ts = _tasks()
    assert len(ts) >= 5 and len({t.id for t in ts}) == len(ts)
    kinds = {it['type'] if it['type'] != 'stop' else it['value'] for t in ts for it in t.evaluate}
    assert {'db', 'data', 'info', 'ANS', 'FAIL'} <= kinds
    assert all(t.extra.get('oracle') for t in ts)

@pytest.mark.parametrize('task', _tasks(), ids=lambda t: t.id)
def test_oracle_passes_empty_fails(task):
    _need('grass', 'Xvfb', 'xdotool', 'openbox')
    with DesktopEnv() as env:
        obs = env.reset(task)
        assert env.evaluate() == 0.0, f"{task.id}: the empty episode passed"
        for st in task.extra['oracle']: obs = env.step(oracle_actions(st, obs))
        score = env.evaluate()
        assert score == 1.0, f"{task.id}: the oracle failed: {env.check_reasons}; history {env.app.dump()['history']}"
        mark = env.desktop.id
    assert desktop_processes(mark) == [], 'processes left after close'
