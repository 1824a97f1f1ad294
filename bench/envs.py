"""Environment speed: scidesk's apps without and with screenshots (PNG encoding included), the encoders side by side,
and the real desktop's screenshot, action and reset latencies.

Each app replays its tasks' oracle actions (realistic clicks, typing, menus, drags) in a loop; the same action
sequence is timed with rendering off (accessibility tree only) and on (a 1280x800 screenshot per step), side by side
in one run. A full step with screenshots is `env.step` plus `obs.png()`, the PNG the agent sends and the store keeps,
made by the app's own incremental `FrameEncoder` (only the bands of rows a step changed are deflated again); the time
of each part is printed. Resets are timed apart (resets/s). Targets: >= 1,000 steps/s without screenshots and
>= 150 full steps/s with screenshots, encoding included, on the slowest app.

The encoder comparison replays the same frames in order through Pillow (`compress_level=1`, what every frame cost
before) and through one incremental encoder (with the standard zlib, and with zlib-ng, the default),
alternating frame by frame: the first frame (encoded whole) and the following ones, in ms and KB, with the share of
bands deflated again.

The desktop part (`coda.envs.desktop`, skipped without Xvfb) grabs 1280x800 screenshots of a real KAlgebra window with
mss and, side by side, with Pillow's ImageGrab (what pyautogui uses); times actions sent with xdotool (a click, a
hotkey, typing 10 characters; the device call only, no settling); and times a full `DesktopEnv.reset` (fresh Xvfb,
openbox, bus, app started and settled). Target: screenshot under 10 ms.

Usage: python bench/envs.py [--seconds 3] [--apps Algebra GIS] [--no-desktop]
"""
import os, shutil, statistics, time
from fastcore.script import call_parse
from typing import Annotated
from coda.envs.scidesk import APPS, app_class, scidesk_tasks, oracle_actions
from coda.envs.core import FrameEncoder, pillow_png, ZLIB

def episodes(app, render):
    "(env, [(task, [step lists])]) for one app"
    env = app_class(app)(render=render)
    return env, [t for t in scidesk_tasks([app])]

def run(app, render, seconds):
    "(steps/s of env.step, full steps/s (step + PNG), resets/s, ms per step drawing, ms per step encoding): each timed apart"
    env, tasks = episodes(app, render)
    clock = dict(step=0.0, reset=0.0, png=0.0)
    def timed(part, fn, *args):
        "`fn(*args)`, its seconds added to `clock[part]`"
        t = time.perf_counter()
        r = fn(*args)
        clock[part] += time.perf_counter() - t
        return r
    steps = resets = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for t in tasks:
            obs = timed('reset', env.reset, t)
            resets += 1
            if render: timed('png', obs.png)
            for st in t.extra['oracle']:
                obs = timed('step', env.step, oracle_actions(st, obs))
                steps += 1
                if render: timed('png', obs.png)
    t_step, t_reset, t_png = clock['step'], clock['reset'], clock['png']
    return steps / t_step, steps / (t_step + t_png), resets / t_reset, 1000 * t_step / steps, 1000 * t_png / steps

def frames(app):
    "The frames of every oracle of `app`, in the order an environment shows them (each reset, then each step)"
    env, tasks = episodes(app, True)
    out = []
    for t in tasks:
        obs = env.reset(t)
        out.append(obs.screenshot)
        for st in t.extra['oracle']:
            obs = env.step(oracle_actions(st, obs))
            out.append(obs.screenshot)
    return out

def compare(app, repeats=3):
    "Per encoder: (first frame ms, median ms of the others, mean KB, share of bands deflated again), frames interleaved"
    fs = frames(app)
    encs = {'Pillow level 1': None, 'incremental, zlib': 'zlib', 'incremental, zlib-ng': 'ng'}
    ms = {k: [[] for _ in fs] for k in encs}
    kb = {k: [] for k in encs}
    share = {}
    import zlib
    for r in range(repeats):
        live = {k: (pillow_png if v is None else FrameEncoder(zlib=zlib if v == 'zlib' else ZLIB)) for k, v in encs.items()}
        for i, f in enumerate(fs):
            for k, enc in live.items():   # alternate the encoders frame by frame
                t = time.perf_counter()
                p = enc(f)
                ms[k][i].append(1000 * (time.perf_counter() - t))
                if r == 0: kb[k].append(len(p) / 1000)
        for k, enc in live.items():
            if k not in share and enc is not pillow_png: share[k] = enc.stats['bands'] / (enc.stats['frames'] * len(enc._bands))
    return {k: (statistics.median(ms[k][0]), statistics.median(statistics.median(x) for x in ms[k][1:]),
                statistics.mean(x for x in (statistics.mean(ms[k][i]) for i in range(1, len(fs)))), statistics.mean(kb[k]), share.get(k))
            for k in encs}, len(fs)

def pct(xs, q): return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]

def desktop(n_grabs=200, n_actions=30, n_resets=3):
    "Screenshot, action and reset latencies on a real desktop with KAlgebra (a Tk window if KAlgebra is missing)"
    from PIL import ImageGrab
    from coda.actions import Action
    from coda.envs.desktop import Desktop, DesktopEnv
    from coda.envs.kalgebra import INPUT
    from coda.tasks import Task
    kal = shutil.which('kalgebra') is not None
    print(f"\ndesktop: 1280x800 Xvfb + openbox, app = {'KAlgebra 22.12' if kal else 'a Tk window'}")
    with Desktop() as d:
        if kal:
            d.launch(['kalgebra'], 'kalgebra', env={'QTWEBENGINE_DISABLE_SANDBOX': '1'})
            d.wait_window('^KAlgebra$')
        else:
            d.launch(['python3', '-c', 'import tkinter as t; r = t.Tk(); t.Entry(r).pack(); r.mainloop()'], 'tk')
            d.wait_window('tk')
        d.settle(5, 0.5)
        mss_ms, pil_ms = [], []
        for i in range(n_grabs):
            t = time.perf_counter()
            d.screenshot()
            mss_ms.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            ImageGrab.grab(xdisplay=d.display)
            pil_ms.append(1000 * (time.perf_counter() - t))
        print(f"{'screenshot (ms)':<34}{'median':>8}{'p95':>8}")
        print(f"{'  mss -> PIL image (ours)':<34}{statistics.median(mss_ms):>8.2f}{pct(mss_ms, .95):>8.2f}")
        print(f"{'  PIL ImageGrab (pyautogui path)':<34}{statistics.median(pil_ms):>8.2f}{pct(pil_ms, .95):>8.2f}")
        med = statistics.median(mss_ms)
        print(f"  target < 10 ms: {'met' if med < 10 else 'NOT met'} ({statistics.median(pil_ms) / med:.1f}x faster than ImageGrab)")
        acts = {'click': [Action('click', *INPUT)], 'hotkey ctrl+a': [Action('hotkey', keys=('ctrl', 'a'))],
                'type 10 characters': [Action('type', text='1+2+3+4+5')]}
        print(f"{'action via xdotool (ms)':<34}{'median':>8}{'p95':>8}")
        for name, a in acts.items():
            ms = []
            for _ in range(n_actions):
                t = time.perf_counter()
                d.act(a, pause=0)
                ms.append(1000 * (time.perf_counter() - t))
            print(f"{'  ' + name:<34}{statistics.median(ms):>8.1f}{pct(ms, .95):>8.1f}")
    if kal:
        env, ms = DesktopEnv(), []
        task = Task(id='bench', app='KAlgebra', instruction='x', steps=1)
        try:
            for _ in range(n_resets):
                t = time.perf_counter()
                env.reset(task)
                ms.append(time.perf_counter() - t)
        finally: env.close()
        print(f"{'DesktopEnv.reset, KAlgebra (s)':<34}{statistics.median(ms):>8.2f}{max(ms):>8.2f}  (median, max of {n_resets})")

@call_parse
def main(seconds:float=3.0,                          # seconds per measurement
         apps:Annotated[str, {'nargs': '+'}]=APPS,   # apps to measure
         no_desktop:bool=False,                      # skip the real-desktop latencies
        ):
    "Environment speed: scidesk steps per second, PNG encoders, and the real desktop's screenshot and action latencies"
    cores = os.sched_getaffinity(0) if hasattr(os, 'sched_getaffinity') else None
    try: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError): pass
    print(f"scidesk steps per second, one core, oracle action sequences, {seconds:.0f} s per measurement (resets timed apart)")
    print(f"deflate: {ZLIB.__name__}; a full step = env.step (draw) + obs.png() (the app's incremental encoder)\n")
    print(f"{'app':<12}{'steps/s, no shots':>18}{'steps/s, shots':>16}{'full steps/s':>14}{'draw ms':>9}{'encode ms':>11}{'resets/s':>10}")
    rows = []
    for app in apps:
        try:
            fast, _, _, _, _ = run(app, False, seconds)
            slow, full, rs, draw, enc = run(app, True, seconds)
        except ImportError as e:
            print(f"{app:<12} not available ({e})")
            continue
        rows.append((fast, full))
        print(f"{app:<12}{fast:>18,.0f}{slow:>16,.0f}{full:>14,.0f}{draw:>9.2f}{enc:>11.2f}{rs:>10,.0f}")
    if rows:
        f, s = min(r[0] for r in rows), min(r[1] for r in rows)
        print(f"\nslowest app: {f:,.0f} steps/s without screenshots (target >= 1,000: {'met' if f >= 1000 else 'NOT met'}), "
              f"{s:,.0f} full steps/s with screenshots, encoding included (target >= 150: {'met' if s >= 150 else 'NOT met'})")
        print("\nPNG encoders on the same frames in order (1280x800; first frame whole, then each following one; medians of 3 passes)")
        print(f"{'app':<11}{'encoder':<24}{'first ms':>9}{'later ms (median)':>19}{'later ms (mean)':>17}{'KB':>7}{'bands redone':>14}")
        for app in apps:
            try: res, n = compare(app)
            except ImportError: continue
            for k, (first, med, mean, kb, share) in res.items():
                print(f"{app:<11}{k:<24}{first:>9.2f}{med:>19.2f}{mean:>17.2f}{kb:>7.0f}{'' if share is None else f'{share:.0%}':>14}")
            base = res['Pillow level 1'][2]
            ups = ', '.join(f"{k.split(', ')[1]} {base / v[2]:.1f}x" for k, v in res.items() if v[4] is not None)
            print(f"{'':<11}{n} frames; mean speed-up over Pillow on the later frames: {ups}")
    if not no_desktop:
        if cores: os.sched_setaffinity(0, cores)   # Xvfb and the app are separate processes: give them every core again
        if shutil.which('Xvfb') and shutil.which('xdotool'): desktop()
        else: print("\ndesktop: skipped (Xvfb and xdotool are not installed: make sysdeps)")
