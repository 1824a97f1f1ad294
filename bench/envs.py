"""Environment steps per second: scidesk's apps without and with screenshots, on one core.

Each app replays its tasks' oracle actions (realistic clicks, typing, menus, drags) in a loop; the same action
sequence is timed with rendering off (accessibility tree only) and on (a 1280x800 screenshot per step), side by side
in one run. Only `env.step` is timed for steps/s (resets are timed apart and printed as resets/s). Targets:
>= 1,000 steps/s without screenshots, >= 100 with. PNG encoding (done by the agent, once a step) is printed apart.

Usage: python bench/envs.py [--seconds 3] [--apps Algebra GIS]
"""
import argparse, os, statistics, time, io
from coda.envs.scidesk import APPS, app_class, scidesk_tasks, oracle_actions

def episodes(app, render):
    "(env, [(task, [step lists])]) for one app"
    env = app_class(app)(render=render)
    return env, [t for t in scidesk_tasks([app])]

def run(app, render, seconds):
    "(steps per second of env.step, resets per second, PNG encode times): step time and reset time are summed apart"
    env, tasks = episodes(app, render)
    steps = resets = 0; t_step = t_reset = 0.0; encode = []; t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for t in tasks:
            tr = time.perf_counter(); obs = env.reset(t); t_reset += time.perf_counter() - tr; resets += 1
            for st in t.extra['oracle']:
                acts = oracle_actions(st, obs)
                ts = time.perf_counter(); obs = env.step(acts); t_step += time.perf_counter() - ts; steps += 1
            if render and len(encode) < 30:
                te = time.perf_counter(); buf = io.BytesIO(); obs.screenshot.save(buf, 'PNG', compress_level=1); encode.append(time.perf_counter() - te)
    return steps / t_step, resets / t_reset, encode

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--seconds', type=float, default=3.0, help='seconds per measurement')
    ap.add_argument('--apps', nargs='+', default=[a for a in APPS], help='apps to measure')
    a = ap.parse_args()
    try: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError): pass
    print(f"scidesk steps per second, one core, oracle action sequences, {a.seconds:.0f} s per measurement (reset time included)\n")
    print(f"{'app':<12}{'steps/s, no screenshots':>25}{'steps/s, screenshots':>22}{'resets/s (with)':>17}{'PNG encode ms':>15}")
    rows = []
    for app in a.apps:
        try: fast, _, _ = run(app, False, a.seconds); slow, rs, enc = run(app, True, a.seconds)
        except ImportError as e: print(f"{app:<12} not available ({e})"); continue
        rows.append((fast, slow))
        print(f"{app:<12}{fast:>25,.0f}{slow:>22,.0f}{rs:>17,.0f}{1000 * statistics.median(enc):>15.1f}")
    if rows:
        f, s = min(r[0] for r in rows), min(r[1] for r in rows)
        print(f"\nslowest app: {f:,.0f} steps/s without screenshots (target >= 1,000: {'met' if f >= 1000 else 'NOT met'}), "
              f"{s:,.0f} with (target >= 100: {'met' if s >= 100 else 'NOT met'})")

if __name__ == '__main__': main()
