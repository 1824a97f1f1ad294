"""Full agent steps per second on scidesk, with screenshots: the real agent loop (`coda.agent.Agent` through
`coda.rollout.run_episodes`), each app's seed tasks demonstrated by the oracle planner and grounded by the
accessibility-tree executor (in-process chat backends, so no model time), 1280x800 screenshots rendered, PNG-encoded
and written with every step to a real run folder (fsynced), the planner reading both screenshot and tree.

Two layouts, side by side per app, alternating over `--rounds` (medians):
* in-process: the environment in the agent's process (`--in-process` in `coda eval`), `--workers` episodes at once;
* processes: each environment in its own worker process (`ProcessEnvFactory`, the default of `coda eval` and the
  pipeline), so rendering and encoding run on other cores than the agent.
Steps/s = agent steps recorded / wall time (environment and worker starts included, `--samples` passes over the
tasks each time). Where the time goes per step comes from the
step records (env_s includes encode_s; store_s is time the agent waited for the disk). Target: >= 150 steps/s on the
slowest app.

Usage: python bench/agent_steps.py [--apps Algebra Biochem GIS Astronomy] [--workers 2] [--rounds 3] [--samples 3]
"""
import os, statistics, tempfile, time
from fastcore.script import call_parse
from typing import Annotated
from pathlib import Path

def run_once(app, layout, workers, n=1):
    "(agent steps, wall seconds, step records) for one pass over `app`'s seed tasks"
    from functools import partial
    from coda.agent import Agent, AgentConfig
    from coda.aio import run_sync
    from coda.envs.scidesk import SciDesk, scidesk_tasks
    from coda.mini.grounder import A11yGrounder
    from coda.mini.oracle import OraclePlanner
    from coda.rollout import run_episodes, ProcessEnvFactory
    from coda.store import RunStore
    tasks = [t for t in scidesk_tasks([app]) if t.extra.get('oracle')]
    make = partial(SciDesk, apps=[app])
    make_env = make if layout == 'in-process' else ProcessEnvFactory(make)
    root = Path(tempfile.mkdtemp())/'run'
    store = RunStore(root, {'kind': 'bench'})
    agent = Agent(OraclePlanner(tasks), A11yGrounder(), AgentConfig(obs='both', stuck_after=50))
    t = time.perf_counter()
    res = run_sync(run_episodes(tasks, make_env, agent, store, n=n, workers=workers, progress=False))
    wall = time.perf_counter() - t
    if layout != 'in-process': make_env.shutdown()
    bad = [r for r in res if r.get('status') != 'done' or r.get('score') != 1.0]
    assert not bad, f"{app}: {len(bad)} of {len(res)} demonstrations did not succeed, e.g. {bad[0]}"
    recs = [s.to_dict() for e in store.episodes() for s in e.steps]
    return len(recs), wall, recs

def breakdown(recs)->str:
    "Mean ms per step: environment (of it encoding), store wait, and the rest of the step"
    m = lambda k: 1000 * statistics.fmean(r.get(k) or 0.0 for r in recs)
    return (f"env {m('env_s'):5.2f} (encode {m('encode_s'):4.2f})  store wait {m('store_s'):4.2f}  "
            f"rest of step {m('total_s') - m('env_s'):5.2f} ms")

@call_parse
def main(apps:Annotated[str, {'nargs': '+'}]=['Algebra', 'Biochem', 'GIS', 'Astronomy'],  # apps to measure
         workers:int=2,             # episodes at once
         rounds:int=3,              # measurements (the median is reported)
         samples:int=3,             # passes over the tasks per measurement (the worker processes start once per measurement)
        ):
    "Full agent steps per second on scidesk, environments in process and in worker processes"
    print(f"agent steps/s on scidesk with screenshots, {os.cpu_count()} CPUs, {workers} episodes at once, median of {rounds} rounds")
    slowest = {}
    for app in apps:
        runs = {'in-process': [], 'processes': []}
        run_once(app, 'in-process', 1)   # warm up: imports, fonts
        for _ in range(rounds):
            for layout in runs: runs[layout].append(run_once(app, layout, workers, samples))
        for layout, rs in runs.items():
            sps = statistics.median(n / w for n, w, _ in rs)
            if sps < slowest.get(layout, (float('inf'), ''))[0]: slowest[layout] = (sps, app)
            print(f"  {app:<10} {layout:<10} {sps:7.1f} steps/s  ({rs[0][0]} steps a measurement)  {breakdown([r for _, _, recs in rs for r in recs])}")
    for layout, (sps, app) in slowest.items():
        print(f"slowest app, {layout}: {app} at {sps:.1f} steps/s (target >= 150: {'met' if sps >= 150 else 'NOT met'})")
