"""coda.envs.vm_fleet: URL leases across real worker processes, provider='local' with ScienceBoard's real server, and the
desktop-env adapter (against a stand-in provider always, and against desktop-env's real VMware provider when it is installed)."""
import json, multiprocessing, os, signal, socket, sys, tempfile, textwrap, threading, time
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
import pytest
from needs import need_programs
from coda.envs.vm_fleet import acquire, lease_url, leases, probe, desktop_env_provider, NoFreeVM, ProviderHandle, SCIENCEBOARD_RESET
from coda.envs.vmclient import VMClient

# --- stand-in servers: NOT ScienceBoard's server, the two routes vm_fleet uses, answered as server.py documents them
# (GET /platform -> platform.system(); POST /setup/execute -> {'status', 'output', 'error', 'returncode'}); commands are
# recorded, not run. The real server is used in test_local_provider.
class PlatformServer:
    "Stand-in for an in-VM server's /platform and /setup/execute routes, on 127.0.0.1"
    def __init__(self):
        self.commands, srv = [], self
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def reply(self, body):
                self.send_response(200)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            def do_GET(self):
                if self.path == '/platform': self.reply(b'Linux')
                else: self.send_error(404)
            def do_POST(self):
                srv.commands.append(json.loads(self.rfile.read(int(self.headers['Content-Length']))))
                self.reply(json.dumps(dict(status='success', output='', error='', returncode=0)).encode())
        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), H)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

def dead_url()->str:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"

@pytest.fixture
def servers():
    s = [PlatformServer() for _ in range(3)]
    yield s
    for x in s: x.close()

# --- worker processes, started as the pool starts them (spawn: a fresh interpreter that builds its own environment)
def _hold(urls, lease_dir, q, release, leave):
    "A worker: acquire a VM, report it, release it when told, exit when told"
    try: h = acquire(','.join(urls), lease_dir=lease_dir)
    except NoFreeVM as e:
        q.put((os.getpid(), 'NoFreeVM', str(e)))
        return
    q.put((os.getpid(), 'url', h.url))
    release.wait(30)
    h.release()
    q.put((os.getpid(), 'released', h.url))
    leave.wait(30)

def test_leases_across_processes(servers, tmp_path):
    "4 worker processes, 3 live URLs and a dead one: 3 distinct live VMs, one clear NoFreeVM; release frees while the process lives on"
    urls = [dead_url()] + [s.url for s in servers]
    ctx = multiprocessing.get_context('spawn')
    q, release, leave = ctx.Queue(), ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=_hold, args=(urls, str(tmp_path), q, release, leave), daemon=True) for _ in range(4)]
    for p in procs: p.start()
    try:
        got = [q.get(timeout=60) for _ in procs]
        held = sorted(v for _, k, v in got if k == 'url')
        refused = [v for _, k, v in got if k == 'NoFreeVM']
        assert held == sorted(s.url for s in servers), got          # no URL twice, the dead one never
        assert len(refused) == 1 and 'no free VM among 4 URL(s)' in refused[0] and 'leased by other environments' in refused[0], refused
        assert sorted(leases(tmp_path)) == held
        pids = {pid for pid, k, _ in got if k == 'url'}
        assert {r['pid'] for r in leases(tmp_path).values()} == pids
        assert not probe(urls[0])[0]
        with pytest.raises(NoFreeVM, match=r'3 leased by other environments.*1 not answering'): lease_url(urls, tmp_path)
        release.set()
        assert sorted(q.get(timeout=30)[2] for _ in held) == held
        assert all(p.is_alive() for p in procs if p.pid in pids)   # freed by release(), not by the process ending
        mine = [lease_url(urls, tmp_path) for _ in held]
        assert sorted(h.url for h in mine) == held
        for h in mine: h.release()
    finally:
        leave.set()
        for p in procs:
            p.join(10)
            if p.is_alive(): p.kill()

def _hold_forever(url, lease_dir, q):
    h = acquire(url, lease_dir=lease_dir)
    q.put(h.url)
    time.sleep(120)

def test_killed_process_frees_its_lease(servers, tmp_path):
    "A worker killed with SIGKILL (no clean-up at all) leaves its VM free for the next"
    url = servers[0].url
    ctx = multiprocessing.get_context('spawn')
    q = ctx.Queue()
    p = ctx.Process(target=_hold_forever, args=(url, str(tmp_path), q), daemon=True)
    p.start()
    try:
        assert q.get(timeout=60) == url
        with pytest.raises(NoFreeVM, match=rf'1 leased by other environments: {url} \(pid {p.pid}\)'): acquire(url, lease_dir=tmp_path)
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        assert leases(tmp_path) == {}                                # the file remains, its holder is gone
        with acquire(url, lease_dir=tmp_path) as h: assert h.url == url
    finally:
        if p.is_alive(): p.kill()

class UrlEnv:
    "A minimal Env for the pool test: it holds a VM from `acquire`; reset answers its URL; close releases it"
    def __init__(self, urls, lease_dir): self.h = acquire(urls, lease_dir=lease_dir)
    def reset(self, task): return self.h.url
    def close(self): self.h.release()

def test_pool_workers_get_distinct_vms(servers, tmp_path):
    "coda's own process pool (ProcessEnvFactory, one spawn worker per environment, one make_env): one VM each; a killed worker's VM goes to the next"
    from functools import partial
    from coda.rollout import ProcessEnvFactory
    urls = ','.join(s.url for s in servers[:2])
    make = ProcessEnvFactory(partial(UrlEnv, urls, str(tmp_path)), call_timeout=30)
    try:
        a, b = make(), make()
        assert sorted([a.reset(None), b.reset(None)]) == sorted(s.url for s in servers[:2])
        with pytest.raises(NoFreeVM, match='2 leased by other environments'): make()   # the error crosses the process boundary intact
        url = a.reset(None)
        a.kill()                                                     # SIGTERM, then SIGKILL: the pool's way with a stuck worker
        c = make()
        assert c.reset(None) == url
        c.close()                                                    # close releases in the worker
        assert url not in leases(tmp_path)
    finally:
        make.shutdown()

def test_replace_takes_next_healthy_url(servers, tmp_path):
    urls = [s.url for s in servers]
    a, b = lease_url(urls, tmp_path), lease_url(urls, tmp_path)
    servers[0].close()
    c = a.replace()                                  # s0 dead, s1 leased: s2
    assert (c.url, a.lease.held) == (servers[2].url, False)
    d = c.replace()                                  # s2 is tried last, and taken back since it still answers
    assert d.url == servers[2].url
    servers[2].close()
    with pytest.raises(NoFreeVM, match=r'1 leased by other environments.*2 not answering'): d.replace()
    assert not d.lease.held
    b.release()

def test_default_lease_dir_is_shared(servers, tmp_path, monkeypatch):
    "Environments meet in the default lease folder, whatever order or subset of the URLs they were given"
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))      # the system's temporary folder, for this test
    urls = f"{servers[0].url},{servers[1].url}"
    with acquire(urls) as a, acquire(f"{servers[1].url},{servers[0].url}") as b:
        assert a.url != b.url
        with pytest.raises(NoFreeVM): acquire(urls)
        with pytest.raises(NoFreeVM): acquire(servers[1].url)
        assert len(list(tmp_path.glob(f'coda-vm-leases-{os.getuid()}/*.lock'))) == 2

# --- provider='local': ScienceBoard's real in-VM server (../shared/vendor/scienceboard-vm/server.py) in a private Xvfb
def test_local_provider():
    need_programs('Xvfb', 'xdotool')
    t = time.monotonic()
    h = acquire(provider='local')
    started = time.monotonic() - t
    try:
        assert probe(h.url) == (True, 'Linux')
        c = VMClient(h.url)
        assert c.execute('touch left-by-the-last-task && ls', shell=True)['output'].split() == ['left-by-the-last-task']
        url, t = h.url, time.monotonic()
        h.revert()
        reverted = time.monotonic() - t
        assert h.url == url and VMClient(h.url).execute('ls', shell=True)['output'].split() == []   # a new desktop, a new HOME
        print(f"LocalVM started in {started:.2f} s, reverted (restarted) in {reverted:.2f} s")
        h2 = h.replace()
        assert probe(h2.url)[0] and not probe(url)[0]
        h = h2
    finally:
        h.release()
    assert not probe(h.url)[0] and h.vm.desktop is None

# --- desktop-env providers
try:
    from desktop_env.providers.base import Provider as _Base    # desktop-env's real abstract base, when installed
except ImportError:
    _Base = object

class StandInProvider(_Base):
    """A stand-in, not a VM: desktop-env Provider's methods (on its real base class when installed), whose 'VM' is a
    PlatformServer; revert_to_snapshot stops it, as desktop-env's Docker provider does, and the address has Docker's form"""
    def __init__(self, region=None):
        self.region, self.calls, self.srv = region, [], None
    def start_emulator(self, path_to_vm, headless, os_type=None, *args, **kwargs):
        self.calls.append(('start_emulator', path_to_vm, headless, os_type))
        if self.srv is None: self.srv = PlatformServer()
    def get_ip_address(self, path_to_vm):
        self.calls.append(('get_ip_address', path_to_vm))
        return f"127.0.0.1:{self.srv.port}:9222:8006:8080"
    def save_state(self, path_to_vm, snapshot_name): raise NotImplementedError
    def revert_to_snapshot(self, path_to_vm, snapshot_name):
        self.calls.append(('revert_to_snapshot', path_to_vm, snapshot_name))
        self._down()
        return path_to_vm
    def stop_emulator(self, path_to_vm, region=None, *args, **kwargs):
        self.calls.append(('stop_emulator', path_to_vm))
        self._down()
    def _down(self):
        if self.srv: self.srv.close()
        self.srv = None

def test_provider_adapter_with_stand_in(tmp_path):
    p = StandInProvider()
    h = acquire(provider=p, path_to_vm='/vms/1.qcow2,/vms/2.qcow2', lease_dir=tmp_path, ready_timeout=5)
    assert isinstance(h, ProviderHandle) and probe(h.url) == (True, 'Linux') and list(leases(tmp_path)) == ['/vms/1.qcow2']
    assert p.calls == [('revert_to_snapshot', '/vms/1.qcow2', 'sci_bench'), ('start_emulator', '/vms/1.qcow2', True, 'Ubuntu'),
                       ('get_ip_address', '/vms/1.qcow2')]             # handed out at its snapshot
    assert [(c['command'], c['shell']) for c in p.srv.commands] == [(SCIENCEBOARD_RESET, True)]
    p.calls.clear()
    h.revert()                                                    # what ScienceBoard's VTask._init does before each task
    assert p.calls == [('revert_to_snapshot', '/vms/1.qcow2', 'sci_bench'), ('start_emulator', '/vms/1.qcow2', True, 'Ubuntu'),
                       ('get_ip_address', '/vms/1.qcow2')]
    assert [(c['command'], c['shell']) for c in p.srv.commands] == [(SCIENCEBOARD_RESET, True)]   # the new 'VM' got reset.sh too
    other = acquire(provider=StandInProvider(), path_to_vm='/vms/1.qcow2,/vms/2.qcow2', lease_dir=tmp_path, ready_timeout=5, reset=None)
    assert other.path == '/vms/2.qcow2'
    with pytest.raises(NoFreeVM, match='2 leased by other environments'): acquire(provider=StandInProvider(), path_to_vm='/vms/1.qcow2,/vms/2.qcow2', lease_dir=tmp_path)
    p.srv.close()                                                 # the VM dies
    p.calls.clear()
    assert h.replace() is h and probe(h.url)[0]
    assert [c[0] for c in p.calls] == ['stop_emulator', 'revert_to_snapshot', 'start_emulator', 'get_ip_address']
    for x in (h, other): x.release()
    assert p.srv is None and leases(tmp_path) == {}

def test_provider_start_failure_frees_the_lease(tmp_path):
    class NeverUp(StandInProvider):
        def get_ip_address(self, path_to_vm): return dead_url().split('//')[1]
    p = NeverUp()
    with pytest.raises(Exception, match='did not answer GET /platform within 1 s'):
        acquire(provider=p, path_to_vm='/vms/1.qcow2', lease_dir=tmp_path, ready_timeout=1)
    assert leases(tmp_path) == {} and p.calls[-1] == ('stop_emulator', '/vms/1.qcow2')

def test_desktop_env_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, 'desktop_env', None)                # as if not installed
    monkeypatch.setitem(sys.modules, 'desktop_env.providers', None)
    with pytest.raises(Exception, match=r'pip install --no-deps desktop-env==0\.1\.22'): desktop_env_provider('vmware')

# A stand-in `vmrun` (VMware's command line; not VMware): it keeps the 'running' VMs in a state file, and a started
# 'VM' is a small server process on 127.0.0.N:5000, so that getGuestIPAddress prints a bare address as vmrun does.
VM_SERVER = '''
import sys
from http.server import HTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = b'Linux'
        self.send_response(200 if self.path == '/platform' else 404)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        open(sys.argv[2], 'a').write(self.rfile.read(int(self.headers['Content-Length'])).decode() + '\\n')
        body = b'{"status": "success", "output": "", "error": "", "returncode": 0}'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
HTTPServer((sys.argv[1], 5000), H).serve_forever()
'''
VMRUN = '''
import json, os, signal, subprocess, sys, time
state, args = os.environ['VMRUN_STATE'], sys.argv[1:]
open(os.path.join(state, 'calls'), 'a').write(json.dumps(args) + '\\n')
run_file = os.path.join(state, 'running.json')
running = json.load(open(run_file)) if os.path.exists(run_file) else {}
cmd, rest = args[2], args[3:]
def stop(path):
    if path in running: os.kill(running.pop(path), signal.SIGKILL)
if cmd == 'list':
    print(f"Total running VMs: {len(running)}")
    for p in running: print(p)
elif cmd == 'start':
    p = subprocess.Popen([sys.executable, os.path.join(state, 'vm_server.py'), os.environ['VMRUN_IP'], os.path.join(state, 'executed')],
                         start_new_session=True)
    running[rest[0]] = p.pid
elif cmd == 'getGuestIPAddress': print(os.environ['VMRUN_IP'])
elif cmd in ('revertToSnapshot', 'stop'): stop(rest[0])
json.dump(running, open(run_file, 'w'))
'''

def _free_loopback()->str:
    "A 127.0.0.N address whose port 5000 is free"
    for n in range(2, 250):
        ip = f"127.0.{os.getpid() % 200}.{n}"
        with socket.socket() as s:
            try: s.bind((ip, 5000))
            except OSError: continue
            return ip
    pytest.skip('no 127.0.x.y address with port 5000 free')

def test_real_vmware_provider_with_stand_in_vmrun(tmp_path, monkeypatch):
    "desktop-env's own VMwareProvider (its vmrun command lines, its start loop) driven through our adapter, with a stand-in vmrun"
    prov = pytest.importorskip('desktop_env.providers.vmware.provider', reason='desktop-env not installed (pip install --no-deps desktop-env==0.1.22)')
    monkeypatch.setattr(prov, 'WAIT_TIME', 0.3)   # its sleep after each vmrun call (3 s); it does not wait for vmrun start/revert/stop to end
    bin_dir, state = tmp_path/'bin', tmp_path/'state'
    bin_dir.mkdir()
    state.mkdir()
    (bin_dir/'vmrun').write_text(f"#!{sys.executable}\n" + textwrap.dedent(VMRUN))
    (bin_dir/'vmrun').chmod(0o755)
    (state/'vm_server.py').write_text(VM_SERVER)
    vmx = tmp_path/'vms'/'Ubuntu.vmx'
    vmx.parent.mkdir()
    vmx.write_text('.encoding = "UTF-8"\n')
    ip = _free_loopback()
    monkeypatch.setenv('PATH', f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv('VMRUN_STATE', str(state))
    monkeypatch.setenv('VMRUN_IP', ip)
    monkeypatch.chdir(tmp_path)               # desktop-env's VMwareVMManager, built by its factory, writes .vmware_vms/.vmware_lck here
    h = acquire(provider='vmware', path_to_vm=str(vmx), lease_dir=tmp_path/'leases', ready_timeout=20)
    try:
        assert type(h.provider).__name__ == 'VMwareProvider' and h.url == f"http://{ip}:5000" and probe(h.url)[0]
        h.revert()
        assert [json.loads(l) for l in (state/'executed').read_text().splitlines()] == [{'command': SCIENCEBOARD_RESET, 'shell': True}] * 2
    finally:
        h.release()
    calls = [json.loads(l) for l in (state/'calls').read_text().splitlines()]
    assert all(c[:2] == ['-T', 'ws'] for c in calls)
    names = [c[2] for c in calls]
    once = ['revertToSnapshot', 'list', 'start', 'list', 'getGuestIPAddress']   # revert, then DesktopEnv._start_emulator's loop
    assert names == once + once + ['stop'], names
    assert calls[0][3:] == [str(vmx), 'sci_bench'] and calls[2][3:] == [str(vmx), 'nogui']
    assert not probe(h.url)[0] and leases(tmp_path/'leases') == {}
