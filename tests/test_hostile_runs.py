"""Runs that go wrong: a step stuck in C code holding the GIL (killed at the episode timeout, also on Ctrl-C), an
environment that raises, a store that cannot write, errored episodes run again, resumes with other settings, and a
`coda eval` that checks its set-up before it starts and reports every mistake in one line (no traceback)."""
import ctypes, json, logging, os, signal, socket, subprocess, sys, time
from functools import partial
from pathlib import Path
import pytest
from agent_fixtures import CounterEnv, ScriptedServer, Task, counting_policy
from coda.agent import Agent, AgentConfig
from coda.aio import run_sync
from coda.models import OpenAIChat
from coda.rollout import run_episodes
from coda.store import RunStore, read_jsonl

HERE = Path(__file__).parent
_SCRIPT = Path(sys.executable).parent/'coda'
CODA = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, '-m', 'coda.cli']
ENV = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(HERE), os.environ.get('PYTHONPATH', '')])}

def hold_the_gil(seconds):
    "Sleep in C without releasing the GIL, as a huge big-int power does: no other thread of the process runs meanwhile"
    ctypes.PyDLL(None).sleep(int(seconds))

class StuckEnv(CounterEnv):
    "The counter app; a task whose id starts with S holds the GIL in C for `hold` s at its second step. `pids`: a file each instance adds its pid to"
    def __init__(self, hold=25, pids=None, **kw):
        super().__init__(**kw)
        self.hold = hold
        if pids:
            with open(pids, 'a') as f: f.write(f'{os.getpid()}\n')
    def reset(self, task):
        self.tid = task.id
        return super().reset(task)
    def step(self, actions):
        if self.tid.startswith('S') and self.steps >= 1: hold_the_gil(self.hold)
        return super().step(actions)

class FlagCounter(CounterEnv):
    "The counter app, crashing at every step while the file `flag` exists"
    def __init__(self, flag, **kw):
        super().__init__(**kw)
        self.flag = Path(flag)
    def step(self, actions):
        if self.flag.exists(): raise RuntimeError('the app crashed')
        return super().step(actions)

def alive(pid)->bool:
    try: return Path(f'/proc/{pid}/stat').read_text().split(')')[-1].split()[0] != 'Z'
    except OSError: return False

def run_local(tasks, make_env, root, store=RunStore, n=1, workers=2, **kw):
    with ScriptedServer(counting_policy(3)) as srv:
        async def go():
            p, e = OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor')
            try: return await run_episodes(tasks, make_env, Agent(p, e, AgentConfig()), store(root, {}), n=n, workers=workers, progress=False, **kw)
            finally:
                await p.aclose()
                await e.aclose()
        return run_sync(go())


# ---------------------------------------------------------------- run_episodes

def test_a_step_holding_the_gil_is_killed_at_the_episode_timeout(tmp_path):
    "in a thread it froze the event loop, so the timeout never fired; in a worker process it is killed and the steps so far stay on disk"
    from coda.rollout import ProcessEnvFactory
    fac, pids = ProcessEnvFactory(partial(StuckEnv, hold=45)), []
    def make():
        e = fac()
        pids.append(e.pid())
        return e
    t0 = time.time()
    res = run_local([Task('S-01'), Task('C-01')], make, tmp_path/'run', workers=2, episode_timeout=4)
    took = time.time() - t0
    by = {r['task']: r for r in res}
    assert by['S-01']['status'] == 'timeout' and by['S-01']['steps'] == 1 and by['C-01']['score'] == 1.0, res
    assert took < 25, f'the run took {took:.0f} s: the stuck step was not cut off'
    steps = read_jsonl(RunStore(tmp_path/'run').episode_dir('Counter', 'S-01', 0)/'steps.jsonl')
    assert [s['step'] for s in steps] == [0]
    assert len(pids) == 2 and not any(alive(p) for p in pids), 'an environment worker outlived the run'

def test_a_worker_made_in_a_thread_outlives_that_thread(tmp_path):
    "the worker dies with its parent process (parent-death signal), not with the short-lived thread that happened to start it"
    import threading
    from coda.rollout import ProcessEnv
    made = []
    th = threading.Thread(target=lambda: made.append(ProcessEnv(partial(CounterEnv))))
    th.start()
    th.join()
    time.sleep(0.5)
    try: assert made[0].reset(Task()).a11y[0].name == 'count = 0'
    finally: made[0].close()
    assert not alive(made[0].pid())

def test_no_workers_is_refused(tmp_path):
    with pytest.raises(ValueError, match='workers must be at least 1'): run_local([Task('C-01')], CounterEnv, tmp_path/'run', workers=0)

def test_an_environment_exception_in_a_worker_is_a_recorded_step_error(tmp_path):
    from coda.rollout import ProcessEnvFactory
    res = run_local([Task('C-01')], ProcessEnvFactory(partial(CounterEnv, crash_at=2)), tmp_path/'run')
    assert (res[0]['status'], res[0]['steps']) == ('error', 2) and 'the app crashed' in res[0]['reason']
    steps = read_jsonl(RunStore(tmp_path/'run').episode_dir('Counter', 'C-01', 0)/'steps.jsonl')
    assert [(s['kind'], s['error']) for s in steps] == [('act', None), ('error', 'RuntimeError: the app crashed')]

class FullDisk(RunStore):
    "A store whose disk fills up: C-01's result and C-02's second step cannot be written"
    def start(self, app, task, sample, meta=None):
        w = super().start(app, task, sample, meta)
        def no_space(*a, **k): raise OSError(28, 'No space left on device')
        if task == 'C-01': w.finish = no_space
        if task == 'C-02':
            add = w.add_step
            w.add_step = lambda rec, png=None: no_space() if rec['step'] == 1 else add(rec, png)
        return w

def test_a_failing_write_costs_only_its_episode_and_says_so(tmp_path, caplog):
    "a result that could not be written raised out of run_episodes and lost every other episode; a step that could not be written ended the episode as an unexplained error"
    with caplog.at_level(logging.WARNING, logger='coda.rollout'):
        res = run_local([Task(f'C-0{i}') for i in range(3)], CounterEnv, tmp_path/'run', store=FullDisk)
    by = {r['task']: r for r in res}
    assert by['C-00']['score'] == 1.0
    assert by['C-01']['status'] == 'error' and 'its result could not be written: OSError' in by['C-01']['reason']
    assert by['C-02']['status'] == 'error' and by['C-02']['reason'].startswith('step 1 could not be recorded: OSError')
    assert any('C-01' in r.getMessage() and 'No space left' in r.getMessage() for r in caplog.records)

def test_errored_episodes_run_again_only_when_asked(tmp_path):
    flag = tmp_path/'crash'
    flag.touch()
    tasks = [Task('C-01'), Task('C-02')]
    assert [r['status'] for r in run_local(tasks, partial(FlagCounter, flag), tmp_path/'run')] == ['error'] * 2
    flag.unlink()
    assert run_local(tasks, partial(FlagCounter, flag), tmp_path/'run') == []             # finished is finished
    res = run_local(tasks, partial(FlagCounter, flag), tmp_path/'run', retry_errors=True)
    assert sorted((r['task'], r['score']) for r in res) == [('C-01', 1.0), ('C-02', 1.0)]
    assert sorted((r['task'], r['status']) for r in RunStore(tmp_path/'run').records()) == [('C-01', 'done'), ('C-02', 'done')]

def test_every_episode_records_the_models_and_settings_it_ran_with(tmp_path):
    from coda.rollout import evaluate
    with ScriptedServer(counting_policy(3)) as srv:
        evaluate([Task('C-01')], CounterEnv, OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor'), tmp_path/'run', n=2, progress=False)
    metas = [e.meta for e in RunStore(tmp_path/'run').episodes()]
    assert len(metas) == 2 and all(m['planner'] == f'planner@{srv.url}' and m['executor'] == f'executor@{srv.url}' for m in metas)
    assert all(m['settings']['n'] == 2 and m['settings']['agent']['coords'] == 'absolute' for m in metas)

# ---------------------------------------------------------------- coda eval and the other commands

def write_tasks(path, ids):
    path.write_text(''.join(json.dumps({'type': 'Counter', 'id': i, 'instruction': 'Click + three times, then answer.', 'steps': 8}) + '\n' for i in ids))
    return path

def coda(*args, timeout=60, **kw):
    return subprocess.run([*CODA, *map(str, args)], capture_output=True, text=True, env=kw.pop('env', ENV), timeout=timeout, **kw)

def eval_args(srv_url, tasks, run, *more):
    return ['eval', '--tasks', tasks, '--run', run, '--planner-url', srv_url, '--planner-model', 'planner',
            '--executor-url', srv_url, '--executor-model', 'executor', '--workers', 2, *more]

def one_line(p):
    "The stderr of a command that failed cleanly: one line, no traceback"
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and 'Traceback' not in p.stderr, p.stderr[-3000:]
    return lines[0]

def test_eval_kills_a_step_stuck_holding_the_gil(tmp_path):
    tasks = write_tasks(tmp_path/'tasks.jsonl', ['S-00', 'C-00'])
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as srv:
        t0 = time.time()
        p = coda(*eval_args(srv.url, tasks, tmp_path/'run', '--env', 'test_hostile_runs:StuckEnv', '--env-opt', 'hold=40', '--episode-timeout', 4), timeout=120)
        took = time.time() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    assert took < 30, f'coda eval took {took:.0f} s: --episode-timeout did not cut the stuck step off'
    recs = {r['task']: r for r in RunStore(tmp_path/'run').records()}
    assert (recs['S-00']['status'], recs['S-00']['steps'], recs['C-00']['score']) == ('timeout', 1, 1.0)

def test_eval_checks_endpoints_and_environment_before_starting(tmp_path):
    tasks = write_tasks(tmp_path/'tasks.jsonl', ['C-00'])
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        dead = f'http://127.0.0.1:{s.getsockname()[1]}/v1'
    p = coda(*eval_args(dead, tasks, tmp_path/'dead', '--env', 'agent_fixtures:CounterEnv'))
    line = one_line(p)
    assert p.returncode == 2 and 'planner endpoint' in line and 'nothing answers' in line and dead in line
    assert not list((tmp_path/'dead').glob('episodes/*')), 'episodes ran against a dead server'
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as srv:
        p = coda(*eval_args(srv.url, tasks, tmp_path/'noenv', '--env', 'no_such_module:Env'))
        line = one_line(p)
        assert p.returncode == 2 and "environment 'no_such_module:Env' cannot be built" in line
        p = coda(*eval_args(srv.url, tasks, tmp_path/'typo', '--env', 'agent_fixtures:CounterEnv', '--executor-model', 'executr'))
        line = one_line(p)
        assert p.returncode == 2 and 'executor endpoint' in line and "'executr' is not served" in line
    assert all(b['messages'] == [{'role': 'user', 'content': 'Say OK.'}] for b in srv.requests), 'an episode started although the set-up was broken'

def test_eval_exits_non_zero_when_every_episode_errored_and_reruns_them_when_asked(tmp_path):
    tasks, run, flag = write_tasks(tmp_path/'tasks.jsonl', ['C-00', 'C-01']), tmp_path/'run', tmp_path/'crash'
    flag.touch()
    with ScriptedServer(counting_policy(3), models=['planner', 'executor', 'planner2']) as srv:
        args = eval_args(srv.url, tasks, run, '--env', 'test_hostile_runs:FlagCounter', '--env-opt', f'flag={flag}')
        p = coda(*args)
        assert p.returncode == 1 and 'every episode (2) ended in an error' in p.stderr.splitlines()[-1], p.stderr[-3000:]
        flag.unlink()
        p = coda(*args, '--retry-errors')
        assert p.returncode == 0, p.stderr[-3000:]
        assert sorted((r['task'], r['score']) for r in RunStore(run).records()) == [('C-00', 1.0), ('C-01', 1.0)]
        p = coda(*args, '--n', 2)                                          # a resume with other settings
        line = one_line(p)
        assert p.returncode == 2 and 'n: 1 then, 2 now' in line and '--fresh' in line and len(RunStore(run).records()) == 2
        p = coda(*args, '--planner-model', 'planner2')                     # another model
        line = one_line(p)
        assert p.returncode == 2 and "planner: 'planner' then, 'planner2' now" in line, line
        p = coda(*args, '--n', 2, '--fresh')
        assert p.returncode == 0 and len(RunStore(run).records()) == 4, p.stderr[-3000:]
        metas = [e.meta for e in RunStore(run).episodes()]
        assert all(m['planner'] == f'planner@{srv.url}' and m['settings']['n'] == 2 and m['settings']['env_opts'] == {'flag': str(flag)} for m in metas)
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as moved:   # the same models served elsewhere: refused unless meant
        moved_args = eval_args(moved.url, tasks, run, '--env', 'test_hostile_runs:FlagCounter', '--env-opt', f'flag={flag}', '--n', 2)
        p = coda(*moved_args)
        line = one_line(p)
        assert p.returncode == 2 and f"planner_url: '{srv.url}' then, '{moved.url}' now" in line and '--accept-changes' in line, line
        p = coda(*moved_args, '--accept-changes')
        assert p.returncode == 0 and len(RunStore(run).records()) == 4, p.stderr[-3000:]
        assert [sorted(c['settings']) for c in RunStore(run).config['changes']] == [['executor_url', 'planner_url']]

def test_ctrl_c_kills_the_stuck_step_and_says_how_to_resume(tmp_path):
    tasks, run, pids = write_tasks(tmp_path/'tasks.jsonl', ['S-00']), tmp_path/'run', tmp_path/'pids'
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as srv:
        args = eval_args(srv.url, tasks, run, '--env', 'test_hostile_runs:StuckEnv', '--env-opt', 'hold=25', '--env-opt', f'pids={pids}')
        # Ctrl-C as a terminal gives it: SIGINT handled by default even when these tests were started in the background
        # of a script (`make test &`), where the shell starts them with SIGINT ignored and every child would inherit that
        with_sigint = [sys.executable, '-c', 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])']
        proc = subprocess.Popen([*with_sigint, *CODA, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        steps, end = run/'episodes'/'Counter'/'S-00'/'0'/'steps.jsonl', time.time() + 40
        while not (steps.exists() and steps.read_text().count('\n') >= 1) and time.time() < end and proc.poll() is None: time.sleep(0.1)
        time.sleep(0.5)                                                    # now the second step holds the GIL in its worker
        proc.send_signal(signal.SIGINT)
        t0 = time.time()
        lines = steps.read_text().count('\n') if steps.exists() else 0   # what was on disk when Ctrl-C came (for the message below)
        try: out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f'coda eval did not stop on Ctrl-C while a step was stuck ({lines} step lines on disk at the Ctrl-C, '
                        f'sent {t0 - (end - 40):.1f} s after the start); its stderr: {err[-2000:]}')
    assert proc.returncode == 130 and 'Traceback' not in err, err[-3000:]
    assert 'Resume with:' in err and f'coda eval --tasks {tasks}' in err and f'--run {run}' in err, err
    time.sleep(1)
    assert [p for p in map(int, pids.read_text().split()) if alive(p)] == [], 'an environment worker outlived Ctrl-C'

def test_mistakes_are_one_line_with_exit_code_2_and_debug_shows_the_traceback(tmp_path):
    bad = tmp_path/'bad.jsonl'
    bad.write_text('{"type": "Counter", "id": "C-00", \n')
    p = coda('eval', '--tasks', bad, '--env', 'scidesk')
    assert p.returncode == 2 and 'bad.jsonl' in one_line(p)
    p = coda('--debug', 'eval', '--tasks', bad, '--env', 'scidesk')
    assert p.returncode != 0 and 'Traceback' in p.stderr
    p = coda('eval', '--tasks', tmp_path/'missing.jsonl', '--env', 'scidesk')
    assert p.returncode == 2 and 'missing.jsonl' in one_line(p)
    for env in ({'CODA_COORDS': 'relative'}, {'CODA_REQUEST_TIMEOUT': '-5'}):
        p = coda('config', env={**ENV, **env})
        assert p.returncode == 2 and 'is not allowed; allowed: ' in one_line(p), env
    p = coda('eval', '--tasks', bad, '--env', 'scidesk', '--workers', 0, timeout=30)
    assert p.returncode == 2 and 'must be an integer >= 1' in p.stderr
    empty = tmp_path/'not-a-run'
    empty.mkdir()
    (empty/'notes.txt').write_text('mine')
    for cmd in ('view', 'judge'):
        p = coda(cmd, empty)
        assert p.returncode == 2 and 'not a run folder' in one_line(p)
    assert sorted(x.name for x in empty.iterdir()) == ['notes.txt'], 'coda view created folders in a folder that is not a run'
    p = coda('eval', '--tasks', write_tasks(tmp_path/'tasks.jsonl', ['C-00']), '--env', 'agent_fixtures:CounterEnv', '--run', empty)
    assert p.returncode == 2 and 'not a run folder' in one_line(p) and sorted(x.name for x in empty.iterdir()) == ['notes.txt']

def test_eval_runs_scidesk_in_worker_processes_by_default(tmp_path):
    "the real app behind the worker-process pipe: observations, the answer and the checker all cross it"
    from coda.envs.scidesk import scidesk_tasks
    t = next(t for t in scidesk_tasks(['Algebra']) if t.id == 'A-01')
    ans = t.evaluate[0]['args'][0]
    tasks = tmp_path/'alg.jsonl'
    tasks.write_text(json.dumps({'type': t.app, 'id': t.id, 'instruction': t.instruction, 'steps': t.steps, 'evaluate': t.evaluate}) + '\n')
    policy = lambda body: f"Thought: The result is {ans}.\nAction: ```ANS {ans}```"
    with ScriptedServer(policy, models=['planner', 'executor']) as srv:
        p = coda(*eval_args(srv.url, tasks, tmp_path/'run', '--env', 'scidesk', '--n', 2))
    assert p.returncode == 0, p.stderr[-3000:]
    recs = RunStore(tmp_path/'run').records()
    assert [(r['task'], r['score']) for r in recs] == [('A-01', 1.0)] * 2
    assert all(e.meta['settings']['env'] == 'scidesk' and (e.dir/'step_000.png').exists() for e in RunStore(tmp_path/'run').episodes())
