"""The executor's backends on a real X server: Xvfb, a Tk window that logs what it receives, pyautogui and xdotool.

These tests need Debian's xvfb, xdotool, xclip and python3-tk (`make test` installs them). Without them they are
skipped, except in CI (CI=true), where a missing package is a failure.
"""
import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import pytest
from coda.actions import Action, parse_action, execute, PyAutoGUIBackend, XdotoolBackend

W, H = 1280, 800
PROBE = Path(__file__).parent/'apps'/'tk_probe.py'
pytestmark = pytest.mark.xvfb

from needs import need_programs as _need

@pytest.fixture(scope='module')
def display():
    "A private Xvfb server; yields its DISPLAY name and checks it is gone afterwards"
    _need('Xvfb', 'xdotool', 'xclip')
    r, w = os.pipe()
    xvfb = subprocess.Popen(['Xvfb', '-displayfd', str(w), '-screen', '0', f'{W}x{H}x24', '-nolisten', 'tcp'],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f: num = f.readline().strip()
    assert num.isdigit(), 'Xvfb did not report a display'
    yield f':{num}'
    xvfb.terminate(); xvfb.wait(10)
    assert xvfb.poll() is not None

class Probe:
    "The Tk probe window on `display`, and the events it logged"
    def __init__(self, display, tmp):
        self.log = Path(tmp)/'events.jsonl'; self.log.touch()
        env = {**os.environ, 'DISPLAY': display}
        self.proc = subprocess.Popen([sys.executable, str(PROBE), str(self.log), str(W), str(H)], env=env)
        self.wait_for(lambda e: e['ev'] == 'ready', 20)
        self.wait_for(lambda e: e['ev'] == 'root-ready', 20)
    def events(self): return [json.loads(l) for l in self.log.read_text().splitlines() if l.strip()]
    def wait_for(self, pred, timeout=5.0):
        t = time.time()
        while time.time() - t < timeout:
            if any(pred(e) for e in self.events()): return True
            if self.proc.poll() is not None: raise RuntimeError('the probe window died')
            time.sleep(0.05)
        raise AssertionError(f'event not seen; log: {self.events()[-15:]}')
    def mark(self): self.n = len(self.events())
    def since(self): return self.events()[self.n:]
    def close(self): self.proc.terminate(); self.proc.wait(10)

@pytest.fixture(params=['xdotool', 'pyautogui'])
def rig(request, display, tmp_path):
    "(backend, probe) for each backend on the shared display"
    probe = Probe(display, tmp_path)
    if request.param == 'xdotool': backend = XdotoolBackend(display)
    else:
        os.environ['DISPLAY'] = display  # pyautogui binds to one display per process, at import
        backend = PyAutoGUIBackend(display)
    yield backend, probe
    probe.close()

def run(backend, text, **kw):
    return execute(parse_action(text, frame=(W, H), screen=(W, H)), backend, screen=(W, H), **kw)

def presses(evs, num): return [(e['x'], e['y']) for e in evs if e['ev'] == 'press' and e['num'] == num]

def test_click_right_double_land_where_parsed(rig):
    backend, probe = rig
    probe.mark()
    run(backend, "click(start_box='(400,300)')\n\nright_single(start_box='(500,350)')\n\nleft_double(start_box='(600,400)')")
    probe.wait_for(lambda e: e['ev'] == 'release' and e['num'] == 1 and e['x'] == 600)
    evs = probe.since()
    assert presses(evs, 1) == [(400, 300), (600, 400), (600, 400)]
    assert presses(evs, 3) == [(500, 350)]

def test_uitars_frame_maps_to_screen(rig):
    "A UI-TARS-1.5 click in the 1288x812 frame lands on the screen pixel it means"
    backend, probe = rig
    probe.mark()
    execute(parse_action("Thought: centre\nAction: click(start_box='<|box_start|>(644,406)<|box_end|>')"), backend)
    probe.wait_for(lambda e: e['ev'] == 'press')
    assert presses(probe.since(), 1) == [(640, 400)]

def test_type_ascii_then_enter(rig):
    backend, probe = rig
    run(backend, "click(start_box='(400,120)')\n\ntype(content='x = sin(3)*2\\n')")
    probe.wait_for(lambda e: e['ev'] == 'enter')
    assert [e['text'] for e in probe.events() if e['ev'] == 'enter'] == ['x = sin(3)*2']

def test_type_non_ascii_and_angle_brackets(rig):
    "Non-ASCII and <> go through the clipboard (pyautogui) or xdotool's own unicode typing"
    backend, probe = rig
    run(backend, "click(start_box='(400,120)')\n\ntype(content='Größe < 5 Å\\n')")
    probe.wait_for(lambda e: e['ev'] == 'enter', 10)
    assert [e['text'] for e in probe.events() if e['ev'] == 'enter'][-1] == 'Größe < 5 Å'

def test_hotkey_with_modifier(rig):
    backend, probe = rig
    probe.mark()
    run(backend, "click(start_box='(400,120)')\n\nhotkey(key='ctrl s')")
    probe.wait_for(lambda e: e['ev'] == 'key' and e['keysym'] == 's')
    k = [e for e in probe.since() if e['ev'] == 'key' and e['keysym'] == 's']
    assert k and k[0]['ctrl'] and not k[0]['shift']

def test_scroll_all_four_directions(rig):
    "Vertical and horizontal wheel clicks, 5 each, at the parsed point (buttons 4/5 up/down, 6/7 left/right)"
    backend, probe = rig
    probe.mark()
    run(backend, "scroll(start_box='(300,700)', direction='up')\n\nscroll(start_box='(300,700)', direction='down')\n\n"
                 "scroll(start_box='(300,700)', direction='left')\n\nscroll(start_box='(300,700)', direction='right')")
    probe.wait_for(lambda e: e['ev'] == 'release' and e['num'] == 7 and len(presses(probe.since(), 7)) == 5)
    evs = probe.since()
    for num in (4, 5, 6, 7): assert presses(evs, num) == [(300, 700)] * 5, (num, presses(evs, num))

def test_drag_presses_moves_releases(rig):
    backend, probe = rig
    probe.mark()
    run(backend, "drag(start_box='(200,300)', end_box='(700,600)')")
    probe.wait_for(lambda e: e['ev'] == 'release' and e['num'] == 1)
    evs = probe.since()
    assert presses(evs, 1) == [(200, 300)]
    assert [(e['x'], e['y']) for e in evs if e['ev'] == 'release' and e['num'] == 1] == [(700, 600)]
    assert any(e['ev'] == 'drag' for e in evs), 'no motion between press and release'

def test_out_of_screen_points_are_clamped(rig):
    backend, probe = rig
    probe.mark()
    execute([Action('click', 5000., 9000.)], backend, screen=(W, H))
    probe.wait_for(lambda e: e['ev'] == 'press')
    assert presses(probe.since(), 1) == [(W - 1, H - 1)]

def test_control_actions_touch_nothing(rig):
    backend, probe = rig
    probe.mark()
    assert run(backend, "wait()\n\nfinished(content='x')\n\ncall_user()\n\nnonsense") == []
    time.sleep(0.3)
    assert [e for e in probe.since() if e['ev'] in ('press', 'key')] == []

def test_xvfb_leaves_no_process(display):
    "The probe and xdotool calls leave nothing running on the display once closed (checked with pgrep)"
    out = subprocess.run(['pgrep', '-f', f'{sys.executable} {PROBE}'], capture_output=True, text=True).stdout.split()
    assert out == [], out
