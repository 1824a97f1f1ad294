"""ScienceBoard's KAlgebra tasks on Debian's KAlgebra 22.12 under real Xvfb: every supported task's oracle passes and
the empty episode fails; expected values agree with calgebra; the vendored task files equal ScienceBoard's.

Needs Debian's kalgebra (`make test` installs it); skipped without it, except in CI."""
import json, os, shutil
from pathlib import Path
import pytest
from needs import need_programs
from coda.envs.desktop import DesktopEnv, desktop_processes
from coda.envs.kalgebra import kalgebra_support, kalgebra_oracle, reference_dump, calgebra, CalgebraError
from coda.paths import ROOT, SHARED
from coda.tasks import load_tasks, translate_task

pytestmark = pytest.mark.xvfb
TASKS = load_tasks(ROOT/'data'/'desktop'/'KAlgebra')
SUPPORTED = [t for t in TASKS if kalgebra_support(t)[0]]

@pytest.fixture(autouse=True)
def needs_kalgebra():
    need_programs('Xvfb', 'xdotool', 'openbox', 'kalgebra', 'calgebra')

def test_supported_set():
    assert sorted(t.id for t in SUPPORTED) == ['A-01', 'A-04', 'C-01', 'C-02', 'C-05', 'D-02', 'D-03']
    b02 = next(t for t in TASKS if t.id == 'B-02')
    assert kalgebra_support(b02) == (False, "22.12 cannot remove a variable (no context menu, Delete ignored), so '#UNDEF' is unreachable")

@pytest.mark.skipif(not (SHARED/'data'/'scienceboard').exists(), reason='the shared ScienceBoard task files are not beside this checkout')
def test_vendored_files_equal_scienceboards():
    for f in sorted((ROOT/'data'/'desktop'/'KAlgebra').glob('*.json')):
        assert json.loads(f.read_text()) == json.loads((SHARED/'data'/'scienceboard'/'tasks'/'KAlgebra'/f.name).read_text()), f.name

def test_calgebra_and_reference_values():
    r = calgebra(['p := conjugate(1+i)', 'p', 'zzz', '1+*'])
    assert r[:3] == ['1+-i', '1+-i', 'zzz'] and isinstance(r[3], CalgebraError)
    for t in SUPPORTED:
        d = reference_dump(t)
        stop = 'FAIL' if t.ans == 'FAIL' else ('ANS' if t.ans.startswith('ANS') else 'DONE')
        ok, why = translate_task(t)[0].score(d, stop, t.ans[4:] if stop == 'ANS' else None)
        assert ok, (t.id, d, why)
        assert not translate_task(t)[0].score(d, 'DONE' if stop != 'DONE' else 'FAIL', None)[0] or stop == 'DONE'

@pytest.mark.parametrize('task', SUPPORTED, ids=lambda t: t.id)
def test_oracle_passes_and_empty_episode_fails(task):
    "One fresh desktop per task: the empty episode is evaluated first, then the oracle is played on and evaluated"
    before = desktop_processes(owner=os.getpid())
    with DesktopEnv() as env:
        env.reset(task)
        assert env.evaluate() == 0.0, 'an empty episode must fail'
        for step in kalgebra_oracle(task): env.step(step)
        assert env.evaluate() == 1.0, env.check_reasons
    assert desktop_processes(owner=os.getpid()) == before

def test_four_kalgebra_desktops_at_once():
    "Four episodes in four threads, each on its own desktop: every oracle passes, no input crosses displays"
    from concurrent.futures import ThreadPoolExecutor
    before = desktop_processes(owner=os.getpid())
    picks = [t for t in SUPPORTED if t.id in ('A-01', 'C-01', 'C-02', 'C-05')]
    def episode(task):
        with DesktopEnv() as env:
            env.reset(task)
            for step in kalgebra_oracle(task): env.step(step)
            return env.desktop.display, env.evaluate(), env.check_reasons
    with ThreadPoolExecutor(4) as ex: out = list(ex.map(episode, picks))
    assert len({d for d, _, _ in out}) == 4
    assert [s for _, s, _ in out] == [1.0] * 4, out
    assert desktop_processes(owner=os.getpid()) == before

def test_kalgebra_killed_mid_episode_is_an_error_and_leaves_nothing():
    "The real app killed between two steps: the next step and the evaluation raise AppCrashed (the agent records an error), nothing is left"
    import signal
    from coda.envs.desktop import AppCrashed
    before = desktop_processes(owner=os.getpid())
    task = next(t for t in SUPPORTED if t.id == 'C-01')
    with DesktopEnv() as env:
        env.reset(task)
        steps = kalgebra_oracle(task)
        env.step(steps[0])
        pids = env.desktop.processes()
        assert len(pids) >= 4                                           # Xvfb, bus, openbox, kalgebra
        os.killpg(env.app.proc.pid, signal.SIGKILL); env.app.proc.wait(10)
        with pytest.raises(AppCrashed): env.step(steps[1])
        with pytest.raises(AppCrashed): env.evaluate()
    assert desktop_processes(owner=os.getpid()) == before
