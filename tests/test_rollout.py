"""Many environments at once, on the local pool and on Ray (a local Ray): exactly one result per (task, sample), a
crashed environment and a killed worker process replaced with the run completing, nothing left running afterwards,
for scidesk and for the real desktop (KAlgebra)."""
import os, shutil, signal, subprocess, sys, tempfile, time
from pathlib import Path
import pytest
from needs import need_programs
from agent_fixtures import ScriptedServer
from coda.agent import Agent, AgentConfig
from coda.aio import run_sync
from coda.envs.scidesk import SciDesk, scidesk_tasks
from coda.models import OpenAIChat
from coda.rollout import run_episodes, RayEnvFactory, EnvWorkerDied
from coda.store import RunStore
from coda.tasks import load_tasks

ray = pytest.importorskip('ray') if os.environ.get('CI') != 'true' else __import__('ray')
ALG = [t for t in scidesk_tasks(['Algebra']) if len(t.evaluate) == 1 and t.evaluate[0].get('value') == 'ANS'][:4]

def answer_policy(tasks):
    "Planner answers each task with its checked answer at the first step (FAIL for infeasible ones)"
    want = {t.instruction: (t.evaluate[0]['args'][0] if t.evaluate[0]['value'] == 'ANS' else None) for t in tasks}
    def policy(body):
        text = ' '.join(p.get('text', '') for m in body['messages'] for p in (m['content'] if isinstance(m['content'], list) else []))
        a = next(v for k, v in want.items() if k in text)
        return f"Thought: The answer is {a}.\nAction: ```ANS {a}```" if a is not None else "Thought: This cannot be done.\nAction: FAIL"
    return policy

def run(tasks, make_env, n, workers, root, retries=0):
    with ScriptedServer(answer_policy(tasks), latency=0.05) as srv:
        async def go():
            m = OpenAIChat(srv.url, 'planner', max_concurrency=workers)
            try: return await run_episodes(tasks, make_env, Agent(m, m, AgentConfig()), RunStore(root, {}), n=n, workers=workers, progress=False, retries=retries)
            finally: await m.aclose()
        return run_sync(go())

def one_each(root, tasks, n):
    keys = sorted((r['app'], r['task'], r['sample']) for r in RunStore(root).records())
    assert keys == sorted((t.app, t.id, s) for t in tasks for s in range(n))
    return RunStore(root).records()

class FlakyEnv(SciDesk):
    "scidesk that crashes at the first step of one task, once per flag file: by raising (`raise`) or by killing its own process (`exit`)"
    def __init__(self, flag, how='raise', task_id='A-02'): super().__init__(); self.flag, self.how, self.task_id = Path(flag), how, task_id
    def reset(self, task): self._tid = task.id; return super().reset(task)
    def step(self, actions):
        if self._tid == self.task_id and not self.flag.exists():
            self.flag.write_text(str(os.getpid()))
            if self.how == 'exit': os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError('the simulated app crashed')
        return super().step(actions)

def ray_processes():
    out = subprocess.run(['pgrep', '-f', 'ray::_EnvHost'], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]

def test_local_pool_runs_each_episode_once(tmp_path):
    res = run(ALG, SciDesk, 3, 4, tmp_path/'run')
    recs = one_each(tmp_path/'run', ALG, 3)
    assert len(res) == 12 and all(r['score'] == 1.0 for r in recs)

def test_unscored_episodes_keep_their_environment(tmp_path):
    "Tasks without checks end 'unscored' (not 'error'), so the worker's environment is reused, not rebuilt"
    from coda.taskgen import to_task
    gen = [to_task({'instruction': f'Plot the function {f} in Algebra.'}, 'Algebra') for f in ('sin(x)', 'cos(x)', 'tan(x)')]
    made = []
    def make_env(): made.append(1); return SciDesk(render=False)
    with ScriptedServer(lambda body: "Thought: Plotted.\nAction: ```ANS done```") as srv:
        async def go():
            m = OpenAIChat(srv.url, 'planner')
            try: return await run_episodes(gen, make_env, Agent(m, m, AgentConfig(obs='a11y')), RunStore(tmp_path/'run', {}), n=1, workers=1, progress=False)
            finally: await m.aclose()
        res = run_sync(go())
    assert [(r['status'], r['score']) for r in res] == [('unscored', None)] * 3 and len(made) == 1

def test_local_pool_crashed_env_is_replaced_and_retried(tmp_path):
    flag = tmp_path/'crashed'
    made = []
    def make(): e = FlakyEnv(flag); made.append(e); return e
    res = run(ALG, make, 2, 2, tmp_path/'run', retries=1)
    recs = one_each(tmp_path/'run', ALG, 2)
    assert flag.exists() and all(r['score'] == 1.0 for r in recs) and len(made) >= 3     # 2 workers + 1 replacement
    assert any(r.get('attempt') == 1 for r in res)
    # without retries the crash is recorded as an error, counted as a failure
    flag.unlink()
    res = run(ALG, make, 1, 2, tmp_path/'run0')
    bad = [r for r in one_each(tmp_path/'run0', ALG, 1) if r['score'] != 1.0]
    assert len(bad) == 1 and bad[0]['status'] == 'error'

@pytest.fixture(scope='module')
def ray_local():
    here = str(Path(__file__).parent)   # the actors unpickle FlakyEnv from this module
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={'env_vars': {'PYTHONPATH': os.pathsep.join(filter(None, [here, os.environ.get('PYTHONPATH')]))}})
    yield
    ray.shutdown()

def test_ray_runs_each_episode_once_and_replaces_a_killed_worker(ray_local, tmp_path):
    flag = tmp_path/'killed'
    fac = RayEnvFactory(lambda: FlakyEnv(flag, how='exit'))
    try:
        res = run(ALG, fac, 2, 3, tmp_path/'run', retries=1)
        recs = one_each(tmp_path/'run', ALG, 2)
        assert flag.exists() and all(r['score'] == 1.0 for r in recs)
        assert any(r.get('attempt') == 1 for r in res), 'the killed episode ran again'
        assert len(fac.actors) >= 4                                   # 3 workers + 1 replacement for the dead one
        killed = int(flag.read_text())
        assert not Path(f'/proc/{killed}').exists()
    finally: fac.shutdown()
    end = time.time() + 20
    while ray_processes() and time.time() < end: time.sleep(0.2)
    assert ray_processes() == [], 'environment actors left running'

def test_ray_dead_worker_is_a_clear_error(ray_local, tmp_path):
    fac = RayEnvFactory(SciDesk)
    try:
        env = fac(); env.reset(ALG[0])
        os.kill(env.pid(), signal.SIGKILL)
        with pytest.raises(EnvWorkerDied, match='worker process died'): env.step([])
    finally: fac.shutdown()

def test_ray_kills_an_actor_stuck_holding_the_gil_at_the_episode_timeout(ray_local, tmp_path):
    "the episode times out and its actor is killed at once (before: closing it waited 30 s on the stuck actor, and the run on its thread)"
    from functools import partial
    from agent_fixtures import Task, counting_policy
    from test_hostile_runs import StuckEnv
    fac = RayEnvFactory(partial(StuckEnv, hold=120))
    try:
        t0 = time.time()
        with ScriptedServer(counting_policy(3)) as srv:
            async def go():
                p, e = OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor')
                try: return await run_episodes([Task('S-01')], fac, Agent(p, e, AgentConfig()), RunStore(tmp_path/'run', {}), progress=False, episode_timeout=10)
                finally: await p.aclose(); await e.aclose()
            res = run_sync(go())
        took = time.time() - t0
        assert res[0]['status'] == 'timeout' and res[0]['steps'] == 1, res
        assert took < 35, f'{took:.0f} s: the stuck actor was not killed at the timeout'
    finally: fac.shutdown()
    end = time.time() + 10
    while ray_processes() and time.time() < end: time.sleep(0.2)
    assert ray_processes() == [], 'the stuck actor was left running'

KAL = [t for t in load_tasks(Path(__file__).parents[1]/'data'/'desktop'/'KAlgebra') if t.id in ('A-04', 'D-03')]

@pytest.mark.xvfb
@pytest.mark.parametrize('backend', ['local', 'ray'])
def test_real_desktops_in_parallel(backend, tmp_path, request):
    "KAlgebra desktops, 2 at a time, 4 episodes: one result each, all correct, no desktop process left"
    need_programs('Xvfb', 'xdotool', 'openbox', 'kalgebra')
    from coda.envs.desktop import DesktopEnv, desktop_processes
    if backend == 'ray': request.getfixturevalue('ray_local')
    fac = RayEnvFactory(DesktopEnv, num_cpus=0.5) if backend == 'ray' else DesktopEnv
    try: run(KAL, fac, 2, 2, tmp_path/'run')
    finally:
        if backend == 'ray': fac.shutdown()
    recs = one_each(tmp_path/'run', KAL, 2)
    assert all(r['score'] == 1.0 for r in recs), recs
    end = time.time() + 20
    while desktop_processes() and time.time() < end: time.sleep(0.2)
    assert desktop_processes() == []

def within(seconds, fn):
    "fn() run in a thread: its result, or its exception raised here; fails the test when fn is still running after `seconds` (it hung)"
    import threading
    out = {}
    def go():
        try: out['value'] = fn()
        except BaseException as e: out['error'] = e
    t = threading.Thread(target=go, daemon=True); t.start(); t.join(seconds)
    assert not t.is_alive(), f'still running after {seconds} s: it hangs'
    if 'error' in out: raise out['error']
    return out['value']

class Starting:
    "A make_env with start(n), as RayEnvFactory has: records the order of start and make calls"
    def __init__(self): self.calls = []
    def start(self, n): self.calls.append(('start', n))
    def __call__(self): self.calls.append(('make',)); return SciDesk()

def test_run_episodes_starts_the_factory_before_the_first_episode(tmp_path):
    fac = Starting()
    res = run(ALG, fac, 1, 3, tmp_path/'run')
    assert [r['score'] for r in res] == [1.0] * 4 and fac.calls[0] == ('start', 3) and fac.calls[1:] == [('make',)] * 3, fac.calls
    fac.calls.clear()
    run(ALG[:2], fac, 1, 8, tmp_path/'run2')                        # no more workers than episodes
    assert fac.calls[0] == ('start', 2), fac.calls
    fac.calls.clear()
    assert run(ALG, fac, 1, 3, tmp_path/'run') == [] and fac.calls == []   # nothing left to run: nothing started

def test_ray_refuses_more_actors_than_the_cluster_holds_before_any_episode(ray_local, tmp_path):
    """9 workers at the default 0.25 CPU on a 2-CPU Ray: a clear error at once, naming what was asked and what is there (before: the 9th worker's
    episode waited, silently, until another worker had no work left and freed its actor; forever if none ever did)"""
    fac = RayEnvFactory(SciDesk)
    try:
        with pytest.raises(RuntimeError, match=r'9 environment actors asking 0\.25 CPU each do not fit .* 2 CPU in all, room for 8') as e:
            within(60, lambda: run(ALG, fac, 3, 9, tmp_path/'run'))
        assert type(e.value).__name__ == 'RayCapacityError'
        assert fac.actors == [] and RunStore(tmp_path/'run').records() == []   # refused before any actor or episode
    finally: fac.shutdown()

def test_ray_refuses_a_resource_no_node_has(ray_local):
    "an actor asking for a custom resource the cluster lacks is an error when it is made (before: its first call never returned)"
    fac = RayEnvFactory(SciDesk, resources={'gui_env': 1})
    try:
        with pytest.raises(RuntimeError, match=r'asking 0\.25 CPU, 1 gui_env each .* 0 gui_env in all, room for 0'):
            within(30, lambda: fac().pid())
    finally: fac.shutdown()

def test_ray_start_gives_up_on_actors_that_cannot_be_placed(ray_local):
    "the cluster holds them, but other actors hold its CPUs: start waits start_timeout, then says what is free (before: it waited forever)"
    busy, fac = RayEnvFactory(SciDesk, num_cpus=1), RayEnvFactory(SciDesk, num_cpus=1)
    fac.start_timeout = 3
    try:
        busy.start(2)
        with pytest.raises(RuntimeError, match=r'1 of 1 environment actors .* not running after 3 s; free in the cluster now: 0 CPU'):
            within(60, lambda: fac.start(1) if hasattr(fac, 'start') else fac().pid())
        assert fac.ready == []
    finally: fac.shutdown(); busy.shutdown()

def test_ray_start_prestarts_warm_actors_that_the_episodes_use(ray_local, tmp_path):
    fac = RayEnvFactory(SciDesk)
    try:
        fac.start(3)
        pids = [e.pid() for e in fac.ready]
        assert len(fac.actors) == 3 and len(set(pids)) == 3 and all(Path(f'/proc/{p}').exists() for p in pids)
        fac.start(2)                                                   # already started: nothing more
        assert len(fac.actors) == 3
        res = run(ALG, fac, 1, 3, tmp_path/'run')
        assert sorted(r['score'] for r in res) == [1.0] * 4
        assert len(fac.actors) == 3 and fac.ready == [], 'the episodes ran on the started actors, no others'
    finally: fac.shutdown()
