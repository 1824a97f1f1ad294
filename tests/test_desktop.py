"""`coda.envs.desktop` on real Xvfb: private desktops side by side, input reaching only its own display, an app killed
mid-episode giving an error result, and no process left behind (counted before and after, by the desktop marker).

Needs Debian's xvfb, xdotool, openbox and dbus (`make test` installs them); skipped without them, except in CI."""
import json, os, shutil, signal, sys, time
from pathlib import Path
import pytest
from needs import need_programs
from coda.actions import Action
from coda.envs.desktop import (Desktop, DesktopEnv, DesktopApp, AppCrashed, DesktopError, register_app, DESKTOP_APPS,
                               desktop_processes, orphaned_processes)
from coda.tasks import Task

PROBE = Path(__file__).parent/'apps'/'tk_probe.py'
pytestmark = pytest.mark.xvfb

@pytest.fixture(autouse=True)
def needs_x():
    need_programs('Xvfb', 'xdotool', 'openbox', 'dbus-daemon')

def events(log): return [json.loads(l) for l in Path(log).read_text().splitlines() if l.strip()] if Path(log).exists() else []

def wait_for(pred, timeout=15):
    end = time.time() + timeout
    while time.time() < end:
        if pred(): return True
        time.sleep(0.05)
    raise AssertionError('condition not met')

def test_desktop_starts_and_releases_everything(tmp_path):
    before = desktop_processes(owner=os.getpid())
    d = Desktop().start()
    tmp, mark = d.tmp, d.id
    p = d.launch([sys.executable, str(PROBE), str(d.home/'ev.jsonl'), '1280', '800'], 'probe')   # its sandbox writes only in there
    d.wait_window('.', proc=p, min_size=(500, 300))
    pids = d.processes()
    assert len(pids) >= 4 and p.pid in pids                      # Xvfb, bus, openbox, the app
    assert d.screenshot().size == (1280, 800)
    d.close(); d.close()                                          # twice is fine
    assert desktop_processes(mark) == [] and not tmp.exists()
    assert desktop_processes(owner=os.getpid()) == before

def test_four_desktops_side_by_side_each_get_their_own_input(tmp_path):
    before = desktop_processes(owner=os.getpid())
    desks, logs = [Desktop(wm=None, bus=False).start() for _ in range(4)], []
    try:
        assert len({d.display for d in desks}) == 4
        for i, d in enumerate(desks):
            logs.append(d.home/f'ev{i}.jsonl')
            d.launch([sys.executable, str(PROBE), str(logs[-1]), '1280', '800'], 'probe')
        for log in logs: wait_for(lambda: any(e['ev'] == 'ready' for e in events(log)))
        for i, d in enumerate(desks): d.act([Action('click', 100 + 50 * i, 200 + 30 * i)])
        for i, log in enumerate(logs):
            wait_for(lambda: any(e['ev'] == 'press' for e in events(log)))
            presses = [(e['x'], e['y']) for e in events(log) if e['ev'] == 'press']
            assert presses == [(100 + 50 * i, 200 + 30 * i)], (i, presses)   # each desktop saw its own click only
    finally:
        for d in desks: d.close()
    assert desktop_processes(owner=os.getpid()) == before

@register_app
class ProbeApp(DesktopApp):
    "The Tk probe as a desktop app: its state is the events it logged"
    name, window = 'Probe', '.'
    def command(self):
        self.log = self.desktop.home/'events.jsonl'
        return [sys.executable, str(PROBE), str(self.log), '1280', '800']
    def dump(self): return {'clicks': sum(e['ev'] == 'press' for e in events(self.log))}

TASK = Task(id='P-1', app='Probe', instruction='Click once.', steps=5, evaluate=[{'type': 'db', 'check': ['>=', ['$', 'clicks'], 1]}])

def test_env_episode_scores_and_a_killed_app_is_an_error_not_a_success():
    before = desktop_processes(owner=os.getpid())
    with DesktopEnv() as env:
        obs = env.reset(TASK)
        assert obs.screenshot.size == (1280, 800) and env.evaluate() == 0.0
        env.step([Action('click', 300, 300)])
        assert env.evaluate() == 1.0
        env.reset(TASK)                                            # a fresh desktop: the clicks are gone
        assert env.evaluate() == 0.0
        os.killpg(env.app.proc.pid, signal.SIGKILL)
        wait_for(lambda: env.app.proc.poll() is not None)
        with pytest.raises(AppCrashed): env.step([Action('click', 300, 300)])
        with pytest.raises(AppCrashed): env.evaluate()
    assert desktop_processes(owner=os.getpid()) == before

def test_a_task_without_checks_is_unscored_on_a_real_desktop():
    "No checks: evaluate() gives None once the app is found alive (not 1.0); a dead app still raises"
    from dataclasses import replace
    with DesktopEnv() as env:
        env.reset(replace(TASK, evaluate=[]))
        env.step([Action('click', 300, 300)])
        assert env.evaluate() is None and env.check_reasons
        os.killpg(env.app.proc.pid, signal.SIGKILL)
        wait_for(lambda: env.app.proc.poll() is not None)
        with pytest.raises(AppCrashed): env.evaluate()

def test_agent_records_a_crash_mid_episode_as_an_error(tmp_path):
    "The real agent loop over HTTP; the app is killed after the first step: error result, score 0, nothing left"
    sys.path.insert(0, str(Path(__file__).parent))
    from agent_fixtures import ScriptedServer
    from coda.agent import Agent, AgentConfig
    from coda.aio import run_sync
    from coda.models import OpenAIChat
    before = desktop_processes(owner=os.getpid())
    env = DesktopEnv()
    def policy(body):
        if body['model'] == 'planner': return "Thought: Click the middle.\nAction: click(start_box='(640,300)')"
        return "click(start_box='(500,400)')"
    def on_step(rec, png):
        if rec['step'] == 0: os.killpg(env.app.proc.pid, signal.SIGKILL); env.app.proc.wait(10)
    with ScriptedServer(policy) as srv:
        async def go():
            p, e = OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor')
            try: return await Agent(p, e, AgentConfig(continue_final=False, stuck_after=10)).run(env, TASK, on_step=on_step)
            finally: await p.aclose(); await e.aclose()
        res = run_sync(go())
    env.close()
    assert (res['status'], res['stop'], res['score']) == ('error', 'ERROR', 0.0) and 'Probe exited' in res['reason']
    assert desktop_processes(owner=os.getpid()) == before

def test_orphans_of_a_killed_driver_are_reaped(tmp_path):
    "A driver killed with SIGKILL cannot clean up; the next desktop kills what it left"
    code = ("import sys, time; sys.path.insert(0, %r)\nfrom coda.envs.desktop import Desktop\n"
            "d = Desktop().start(); print('ID=' + d.id, flush=True); time.sleep(60)") % str(Path(__file__).parents[1])
    import subprocess
    drv = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True)
    mark = next(l for l in drv.stdout if l.startswith('ID='))[3:].strip()
    assert len(desktop_processes(mark)) >= 2
    drv.kill(); drv.wait()
    wait_for(lambda: set(desktop_processes(mark)) <= set(orphaned_processes()))
    with Desktop(wm=None, bus=False): pass                       # starting any desktop reaps the orphans
    assert desktop_processes(mark) == []

def test_missing_program_and_unknown_app_are_clear_errors():
    with pytest.raises(ValueError, match='no desktop app'): DesktopEnv().reset(Task(id='x', app='NoSuchApp', instruction='x'))
    class Broken(DesktopApp):
        name, window = 'Broken', '.'
        def command(self): return [sys.executable, '-c', 'import sys; print("boom"); sys.exit(3)']
    with Desktop(wm=None, bus=False) as d:
        with pytest.raises(AppCrashed, match='boom'): Broken(d).start()

WX = r"""
import sys, wx
app = wx.App()
f = wx.Frame(None, title='wxprobe'); p = wx.Panel(f)
b = wx.Button(p, label='Press me', pos=(40, 40)); t = wx.TextCtrl(p, pos=(40, 100), size=(200, -1))
b.Bind(wx.EVT_BUTTON, lambda e: open(sys.argv[1], 'a').write('pressed\n'))
f.Show(); app.MainLoop()
"""

def test_accessibility_tree_of_a_wx_app_is_grounded(tmp_path):
    "AT-SPI through the system Python: the button's box from the tree is where a click presses it"
    from coda.envs.desktop import a11y_available
    if not a11y_available() or os.system('/usr/bin/python3 -c "import wx" 2>/dev/null') != 0:
        if os.environ.get('CI') == 'true': pytest.fail('CI needs python3-pyatspi and python3-wxgtk4.0 (make sysdeps)')
        pytest.skip('no pyatspi or wx in the system Python')
    with Desktop(a11y=True) as d:
        log = d.home/'wx.log'
        d.launch(['/usr/bin/python3', '-c', WX, str(log)], 'wx'); d.wait_window('wxprobe'); d.settle()
        seen = {}
        def found():
            seen['els'] = d.a11y() or []
            return any(e.name == 'Press me' for e in seen['els'])
        wait_for(found, 30)
        els = seen['els']
        btn = next(e for e in els if e.name == 'Press me' and 'button' in e.role)
        assert any(e.role == 'frame' and e.name == 'wxprobe' for e in els) and any(e.role == 'text' for e in els)
        x1, y1, x2, y2 = btn.bbox
        d.act([Action('click', (x1 + x2) / 2, (y1 + y2) / 2)])
        wait_for(lambda: log.exists() and 'pressed' in log.read_text())
    assert Desktop().a11y() is None                                   # not started: no tree, no error

DRIVER = ("import sys, time; sys.path.insert(0, %r)\nfrom coda.envs.desktop import Desktop\n"
          "d = Desktop().start(); p = d.launch([sys.executable, %r, str(d.home/'ev.jsonl'), '1280', '800'], 'probe'); d.wait_window('.', proc=p)\n"
          "g = getattr(d, '_guard', None)\n"
          "print('ID=' + d.id, d.tmp, g['proc'].pid if g else 0, flush=True); time.sleep(60)")

def start_driver(tmp_path):
    "A Python process with a desktop and an app on it: (the process, the desktop's id, its folder, its watchdog's pid)"
    import subprocess
    code = DRIVER % (str(Path(__file__).parents[1]), str(PROBE))
    drv = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True)
    mark, tmp, wd = next(l for l in drv.stdout if l.startswith('ID='))[3:].split()
    assert len(desktop_processes(mark)) >= 4 and Path(tmp).is_dir()          # Xvfb, bus, openbox, the app
    return drv, mark, Path(tmp), int(wd)

def test_a_sigkilled_driver_leaves_no_process_and_no_folder(tmp_path):
    "The watchdog: a driver killed with SIGKILL cannot clean up, yet within seconds its desktop is gone, folder and all"
    drv, mark, tmp, _ = start_driver(tmp_path)
    drv.kill(); drv.wait()
    wait_for(lambda: desktop_processes(mark) == [] and not tmp.exists(), 10)

def test_sweep_removes_what_a_killed_driver_and_its_watchdog_left(tmp_path):
    "Watchdog killed too: the next desktop (or sweep_desktops) kills the processes and deletes the folder"
    from coda.envs.desktop import sweep_desktops
    drv, mark, tmp, wd = start_driver(tmp_path)
    assert wd > 0, 'no watchdog'
    os.kill(wd, signal.SIGKILL); time.sleep(0.2); drv.kill(); drv.wait()
    assert tmp.exists()
    with Desktop(wm=None, bus=False) as d:
        assert desktop_processes(mark) == [] and not tmp.exists()
        assert d.tmp.exists() and d.tmp not in sweep_desktops()                # a live owner's folder is kept

def test_sweep_keeps_live_owners_and_removes_dead_ones(tmp_path):
    "Folders carry their owner's pid and start time; a folder whose owner is gone (and nothing of it runs) is deleted"
    import subprocess
    from coda.envs.desktop import desktop_folder, sweep_desktops
    mine = desktop_folder('a' * 12, str(tmp_path))
    code = ("import sys; sys.path.insert(0, %r)\nfrom coda.envs.desktop import desktop_folder\n"
            "print(desktop_folder('b' * 12, %r))") % (str(Path(__file__).parents[1]), str(tmp_path))
    dead = Path(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip())
    (tmp_path/'coda-desktop-link').symlink_to(dead); (tmp_path/'coda-desktop-').mkdir(); (tmp_path/'coda-desktop-x-y').mkdir()
    assert dead.is_dir() and dead.name.startswith('coda-desktop-' + 'b' * 12)
    assert sweep_desktops(str(tmp_path)) == [dead]
    assert mine.is_dir() and not dead.exists() and (tmp_path/'coda-desktop-link').is_symlink()
    assert (tmp_path/'coda-desktop-').is_dir() and (tmp_path/'coda-desktop-x-y').is_dir()          # not desktops' folders

def test_desktop_programs_get_a_temporary_folder_inside_the_desktop():
    with Desktop(wm=None, bus=False) as d:
        assert d.env['TMPDIR'] == str(d.tmp/'tmp') and (d.tmp/'tmp').is_dir()
