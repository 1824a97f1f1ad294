"""coda's VM environment against ScienceBoard's real in-VM server (../shared/vendor/scienceboard-vm/server.py, run
unchanged in a private Xvfb on 127.0.0.1 by `LocalVM`): the client's errors, ScienceBoard's KAlgebra task files set up,
driven and checked through the server (Debian's KAlgebra standing in for ScienceBoard's fork at /app/bin/kalgebra),
`coda eval --env vm` end to end with two workers, a VM that dies mid-episode, and VMs in Ray actors."""
import os, shutil, signal, subprocess, sys, threading, time
from functools import partial
from http.server import BaseHTTPRequestHandler
from pathlib import Path
import pytest
from needs import need_programs
from agent_fixtures import ScriptedServer, Server, send_once
from coda.actions import Action
from coda.paths import SHARED
from coda.store import RunStore
from coda.tasks import load_task
from coda.envs.vmclient import VMClient, VMError, VMUnreachable, LocalVM, parse_accessibility
from coda.procs import free_port
import coda.envs.vmclient as vmclient

TASKS = SHARED/'data'/'scienceboard'/'tasks'/'KAlgebra'
PORT = free_port()   # the apps' port: nothing listens there, as ScienceBoard's forks' servers cannot run here
KAL = f'LD_LIBRARY_PATH=/home/user/6.5.0/gcc_64/lib =>;/app/bin/kalgebra {PORT}=>kalgebra'   # Debian's KAlgebra for the fork
HERE = Path(__file__).parent

def needs_vm(): need_programs('Xvfb', 'xdotool', 'openbox', 'scrot', 'kalgebra')

def vm_env(**kw):
    "A VMEnv on a LocalVM of its own, quick: no pause before set-up items, one set-up try, nothing on the apps' port"
    from coda.envs.vm import VMEnv
    return VMEnv(**{'provider': 'local', 'rewrite': KAL, 'item_pause': 0, 'settle': 0.3, 'setup_tries': 1, 'port': PORT, **kw})

# ---------------------------------------------------------------- the client's errors (no display needed)

class Replies:
    "A local HTTP server answering each path as `routes` says: (status, body) or a callable that may sleep"
    def __init__(self, routes):
        self.hits, srv = [], self
        class H(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'
            def log_message(self, *a): pass
            def _go(self):
                n = int(self.headers.get('Content-Length') or 0)
                if n: self.rfile.read(n)
                path = self.path.split('?')[0]
                srv.hits.append(path)
                r = routes[path]
                code, body = r() if callable(r) else r
                send_once(self, code, body)
            do_GET = do_POST = _go
        self.httpd = Server(('127.0.0.1', 0), H)
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}'
    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self
    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()

def test_client_errors_are_clear_and_bounded(monkeypatch):
    "An error answer names the route and the server's words; a POST that may have run is never sent twice; a dead URL is retried, then unreachable"
    slow = lambda: (time.sleep(2), (200, b'{}'))[1]
    routes = {'/setup/execute': (500, b'{"status": "error", "message": "boom"}'), '/setup/launch': slow, '/read': (200, b'x' * 5000),
              '/screenshot': (200, b'GIF89a'), '/accessibility': (200, b'{"AT": "<a"}')}
    with Replies(routes) as srv:
        c = VMClient(srv.url, timeout=0.5, retries=2, backoff=0.01)
        with pytest.raises(VMError, match=r'POST /setup/execute .*HTTP 500.*boom'): c.execute(['ls'])
        with pytest.raises(VMError, match='no answer within'): c.launch(['kalgebra'])
        assert srv.hits.count('/setup/launch') == 1, 'a POST that timed out was sent again'
        with pytest.raises(VMError, match='not a PNG'): c.screenshot()
        with pytest.raises(VMError, match='not XML'): parse_accessibility(c.accessibility())
        monkeypatch.setattr(vmclient, 'MAX_REPLY', 1000)
        with pytest.raises(VMError, match='more than 1,000'): c.read('/etc/hostname')
    t0 = time.time()
    with pytest.raises(VMUnreachable, match=r'does not answer after 3 tries'): VMClient(srv.url, retries=2, backoff=0.01).screenshot()
    assert time.time() - t0 < 5

# ---------------------------------------------------------------- ScienceBoard's server on this machine

@pytest.mark.xvfb
def test_local_vm_routes():
    "The real server answers every route coda uses: screen, accessibility tree, commands, files, actions"
    needs_vm()
    with LocalVM() as vm, VMClient(vm.url) as c:
        from PIL import Image
        import io
        assert Image.open(io.BytesIO(c.screenshot())).size == (1280, 800) == c.screen_size()
        c.write(str(vm.desktop.home/'note.txt'), 'a')
        c.append(str(vm.desktop.home/'note.txt'), 'b')
        assert c.read(str(vm.desktop.home/'note.txt')) == 'ab'
        assert c.execute('echo $((6 * 7))', shell=True)['output'] == '42\n'
        c.run_actions([Action('move', 321, 123)])
        assert c.run_python('import pyautogui; print(tuple(pyautogui.position()))')['output'].split()[-2:] == ['(321,', '123)']
        c.launch('kalgebra', shell=True)
        vm.desktop.wait_window('KAlgebra', 30)
        vm.desktop.wait(lambda: any(e.name == 'Calculator' for e in parse_accessibility(c.accessibility())), 30, "KAlgebra's tree")

@pytest.mark.xvfb
def test_scienceboard_kalgebra_episodes():
    "D-03 (an ANS task) passes with its answer and fails with another, the VM restarted between; A-01's state check fails clearly without the fork"
    needs_vm()
    d03, a01 = load_task(TASKS/'D-03.json'), load_task(TASKS/'A-01.json')
    with vm_env(a11y=True) as env:
        obs = env.reset(d03)
        assert obs.screen == (1280, 800) and obs.png().startswith(b'\x89PNG')
        end = time.time() + 30    # the task's `wait` (2.5 s) is ScienceBoard's; KAlgebra may take longer to show its tree here
        while not any('Calculator' in e.name for e in obs.a11y) and time.time() < end: obs = env.observe()
        assert any('Calculator' in e.name for e in obs.a11y)
        env.step([Action('click', 500, 750), Action('type', text='2*sin(x)', enter=True)])
        env.step([Action('answer', text='4')])
        assert env.evaluate() == 1.0 and env.check_reasons == []
        first = env.vm.url
        env.reset(d03)
        env.step([Action('answer', text='3')])
        assert env.evaluate() == 0.0 and "answer ['3'] is not ['4']" in env.check_reasons[0]
        env.reset(a01)
        env.step([Action('finished')])
        assert env.evaluate() == 0.0 and "the app's state could not be read" in env.check_reasons[0], env.check_reasons
    assert first

@pytest.mark.xvfb
def test_dead_vm_is_a_clear_error():
    "The VM's server killed mid-episode: the next step raises VMUnreachable naming the VM, within seconds"
    needs_vm()
    from coda.envs.vm import VMEnv
    with LocalVM() as vm:
        env = VMEnv(url=vm.url, rewrite=KAL, item_pause=0, settle=0.1, setup_tries=1, port=PORT, retries=1, timeout=5)
        try:
            env.reset(load_task(TASKS/'D-03.json'))
            os.killpg(vm.proc.pid, signal.SIGKILL)
            t0 = time.time()
            with pytest.raises(VMUnreachable, match=vm.url): env.step([Action('click', 10, 10)])
            assert time.time() - t0 < 15
        finally: env.close()

# ---------------------------------------------------------------- coda eval --env vm, end to end

def policy(body):
    "The planner answers D-03 (4 zeros), gives up on the others; the executor clicks"
    if body['model'] != 'planner': return "click(start_box='<|box_start|>(500,750)<|box_end|>')"
    text = ' '.join(p.get('text', '') for m in body['messages'] for p in (m['content'] if isinstance(m['content'], list) else []))
    if 'number of zeros' in text: return "Thought: Both curves cross four times.\nAction: ```ANS 4```"
    return "Thought: I cannot do this.\nAction: FAIL"

@pytest.mark.xvfb
def test_coda_eval_env_vm(tmp_path):
    "ScienceBoard's task files through `coda eval --env vm` with 2 workers, each on its own VM: one result per task, steps and frames on disk, set-up failures counted"
    needs_vm()
    tasks = tmp_path/'tasks'
    tasks.mkdir()
    for t in ('D-03', 'A-04', 'A-01', 'C-01'): shutil.copy(TASKS/f'{t}.json', tasks)
    exe = Path(sys.executable).parent/'coda'
    run = tmp_path/'run'
    with ScriptedServer(policy, models=['planner', 'executor']) as srv:
        cmd = [str(exe), 'eval', '--tasks', str(tasks), '--env', 'vm', '--run', str(run), '--n', '1', '--workers', '2',
               '--planner-url', srv.url, '--planner-model', 'planner', '--executor-url', srv.url, '--executor-model', 'executor',
               '--env-opt', 'provider=local', '--env-opt', f'rewrite={KAL}', '--env-opt', 'item_pause=0', '--env-opt', 'settle=0.3',
               '--env-opt', 'setup_tries=1', '--env-opt', f'port={PORT}']
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = {r['task']: r for r in RunStore(run).records()}
    assert sorted(recs) == ['A-01', 'A-04', 'C-01', 'D-03'], recs
    assert recs['D-03']['score'] == 1.0 and recs['D-03']['stop'] == 'ANS'
    assert recs['A-01']['score'] == 0.0 and recs['C-01']['score'] == 0.0          # their state checks need the fork's /vars
    assert recs['A-04']['status'] == 'error'                                     # its set-up needs the fork's /tab
    ep = next(e for e in RunStore(run).episodes() if e.meta['task'] == 'D-03')
    assert ep.steps and all((ep.dir/s.screenshot).exists() for s in ep.steps) and (ep.dir/ep.steps[0].screenshot).stat().st_size > 1000
    assert '25.0' in p.stdout, p.stdout    # 1 of 4 passed: the set-up failure counts in the denominator

@pytest.fixture
def ray_here():
    ray = pytest.importorskip('ray') if os.environ.get('CI') != 'true' else __import__('ray')
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()

@pytest.mark.xvfb
def test_vms_in_ray_actors(tmp_path, ray_here):
    "Two Ray actors, each with its own VM: 4 episodes of D-03, all passed, nothing left running"
    needs_vm()
    from coda.agent import Agent, AgentConfig
    from coda.aio import run_sync
    from coda.envs.desktop import desktop_processes
    from coda.envs.vm import VMEnv
    from coda.models import OpenAIChat
    from coda.rollout import RayEnvFactory, run_episodes
    d03 = load_task(TASKS/'D-03.json')
    fac = RayEnvFactory(partial(VMEnv, provider='local', rewrite=KAL, item_pause=0, settle=0.3, setup_tries=1, port=PORT), num_cpus=0.5)
    try:
        with ScriptedServer(policy) as srv:
            async def go():
                m = OpenAIChat(srv.url, 'planner', max_concurrency=2)
                try: return await run_episodes([d03], fac, Agent(m, m, AgentConfig()), RunStore(tmp_path/'run', {}), n=4, workers=2, progress=False)
                finally: await m.aclose()
            run_sync(go())
    finally: fac.shutdown()
    recs = RunStore(tmp_path/'run').records()
    assert len(recs) == 4 and all(r['score'] == 1.0 for r in recs), recs
    end = time.time() + 20
    while desktop_processes() and time.time() < end: time.sleep(0.2)
    assert desktop_processes() == []

def kalgebras(vm)->list:
    "The KAlgebra processes on a LocalVM's desktop"
    out = []
    for p in vm.desktop.processes():
        try: cmd = Path(f'/proc/{p}/cmdline').read_bytes()
        except OSError: continue
        if cmd.split(b'\0')[0].endswith(b'kalgebra'): out.append(p)
    return out

@pytest.mark.xvfb
def test_url_vms_cleaned_between_tasks_and_a_dead_one_replaced(tmp_path):
    "VMs by URL: the next task finds the last one's KAlgebra stopped (no snapshot to revert); when a VM dies mid-episode the pool retries on the other"
    needs_vm()
    from coda.agent import Agent, AgentConfig
    from coda.aio import run_sync
    from coda.envs.vm import VMEnv
    from coda.models import OpenAIChat
    from coda.rollout import run_episodes
    d03 = load_task(TASKS/'D-03.json')
    with LocalVM() as a, LocalVM() as b:
        vms, leased = {a.url: a, b.url: b}, []
        def make():
            env = VMEnv(url=f'{a.url},{b.url}', lease_dir=str(tmp_path/'leases'), rewrite=KAL, item_pause=0, settle=0.3, setup_tries=1,
                        port=PORT, retries=1, timeout=10)
            leased.append(env.vm.url)
            return env
        with make() as env:
            vm = vms[env.vm.url]
            for _ in range(2):
                env.reset(d03)
                vm.desktop.wait(lambda: len(kalgebras(vm)) == 1, 30, 'one KAlgebra')
        killed = []
        def dying(body):
            if not killed:   # the first planner call: the VM the episode runs on dies
                killed.append(leased[-1])
                os.killpg(vms[leased[-1]].proc.pid, signal.SIGKILL)
            return policy(body)
        with ScriptedServer(dying) as srv:
            async def go():
                m = OpenAIChat(srv.url, 'planner')
                try: return await run_episodes([d03], make, Agent(m, m, AgentConfig()), RunStore(tmp_path/'run', {}), n=1, workers=1, progress=False, retries=1)
                finally: await m.aclose()
            run_sync(go())
    recs = RunStore(tmp_path/'run').records()
    assert len(recs) == 1 and recs[0]['score'] == 1.0, recs
    assert leased[-1] != killed[0] and len(leased) == 3, (leased, killed)   # the retry ran on the other VM
