"""Rollout throughput: episodes per second against the number of workers, for a model-latency-bound agent (local pool
and Ray) and for scidesk alone, the Ray backend's overhead per episode against the local pool, and where the time goes.

* latency-bound: the planner and executor are a real OpenAI-compatible HTTP server on 127.0.0.1 answering every
  request after `--latency` seconds (standing in for a busy GPU server: on this 2-core CPU a served model would be
  CPU-bound, not latency-bound); each episode is the counter task (3 clicks, then the answer: 4 planner and 3 executor
  requests, 7 in all; the bench checks that every episode succeeds with exactly those requests before printing).
  Measured on the local pool (environments in the run's threads) and on Ray (environments in actors started and
  answering before the clock starts), the worker counts alternated within each round, medians of `--rounds`.
  Scaling efficiency at W workers = throughput(W) / (W x throughput(1)); target >= 0.9 at 8.
* scidesk alone: Algebra answer tasks with a server that answers at once, so the environment and the framework are
  the work (CPU-bound: on 2 cores threads cannot scale it far).
* Ray against the local pool: the same scidesk episodes with each environment in a Ray actor (started and warm
  before timing) against the local pool, alternating, median of `--rounds`; overhead = (Ray - local) / episodes.

Where the time goes, per episode (means; one episode's own time, from its reset to its score):
  model      time inside model requests as the client measures them (server latency + HTTP + waiting for the loop);
             `excess/req` is that per request minus the server's latency, `worst` the slowest request's (a connection
             refused by a full listen backlog costs a 1 s retry)
  env        time inside the environment's reset/step/evaluate (worker threads; for Ray: the remote call and the PNG
             decoding in the driver)
  encode     time encoding screenshots in this process (Observation.png; in worker threads or on the loop, whichever
             calls it; Ray actors encode in their own processes, not seen here)
  store      time inside the run folder's writes (meta, steps, screenshots, result); `on loop` is the part that ran on
             the event loop (and so stalled every other episode), the rest ran in other threads
  framework  the episode's time less model, env, encode and on-loop store: the agent's own work, thread hand-offs
             and waiting for a busy event loop
  blocked    event loop stalls: time a 5 ms timer fired late by more than 1 ms, per episode (all causes)
  busy       sum of episode times / (workers x wall time): how full the workers kept (the rest: start, finish, imbalance)
  slowdown   mean episode time / that at the smallest worker count: how much running together slows each episode

Usage: python bench/rollout.py [--latency 0.2] [--episodes 16] [--workers 1 2 4 8] [--rounds 3] [--no-ray]
"""
import asyncio, os, statistics, sys, tempfile, threading, time
from fastcore.script import call_parse
from typing import Annotated
from pathlib import Path
TESTS = Path(__file__).resolve().parents[1]/'tests'
sys.path.insert(0, str(TESTS))

class Clock:
    "Seconds added up by name, from any thread"
    def __init__(self): self.t, self.lock = {}, threading.Lock()
    def add(self, k, dt):
        with self.lock: self.t[k] = self.t.get(k, 0.0) + dt
    def __getitem__(self, k): return self.t.get(k, 0.0)
    def wrap(self, k, fn, split_loop=False):
        "`fn`, its time added to `k` (to `k + ' on loop'` as well when called on the main thread and `split_loop`)"
        def timed(*a, **kw):
            t = time.perf_counter()
            try: return fn(*a, **kw)
            finally:
                dt = time.perf_counter() - t
                self.add(k, dt)
                if split_loop and threading.current_thread() is threading.main_thread(): self.add(k + ' on loop', dt)
        return timed

CLOCK = Clock()                  # reset before each measurement

def count_encoding():
    "Count the time inside Observation.png (the screenshot's encoding; a cached frame costs nothing) wherever it runs"
    from coda.envs.core import Observation
    orig, inside = Observation.png, threading.local()
    def png(self):
        if getattr(inside, 'on', False): return orig(self)
        inside.on = True
        try: return CLOCK.wrap('encode', orig, split_loop=True)(self)
        finally: inside.on = False
    Observation.png = png

class TimedEnv:
    "An environment whose reset/step/evaluate time is counted as env time; anything else passes through"
    def __init__(self, env): self.env = env
    def reset(self, task): return CLOCK.wrap('env', self.env.reset)(task)
    def step(self, actions): return CLOCK.wrap('env', self.env.step)(actions)
    def evaluate(self): return CLOCK.wrap('env', self.env.evaluate)()
    def close(self): return self.env.close()
    def __getattr__(self, k): return getattr(self.env, k)        # kill, pid

class TimedFactory:
    "A make_env whose environments are `TimedEnv`s; `start`, `shutdown` and the rest pass through"
    def __init__(self, make): self.make = make
    def __call__(self): return TimedEnv(self.make())
    def __getattr__(self, k): return getattr(self.make, k)

def timed_store(root):
    "A RunStore whose writes are timed (the writer's methods wherever they run, and the episode's start)"
    from coda.store import RunStore
    class TimedStore(RunStore):
        def start(self, *a, **kw):
            w = CLOCK.wrap('store', super().start, split_loop=True)(*a, **kw)
            for m in ('add_step', 'add_final', 'finish'):
                if callable(getattr(w, m, None)): setattr(w, m, CLOCK.wrap('store', getattr(w, m), split_loop=True))
            return w
    return TimedStore(root, {})

async def watch_loop(stop:asyncio.Event, period=0.005):
    "Count event-loop stalls: a `period` timer that fires more than 1 ms late"
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(period)
        if (late := time.perf_counter() - t - period) > 0.001: CLOCK.add('blocked', late)

def measure(tasks, make_env, policy, workers, n=1, latency=0.0, want_requests=None, want_steps=None):
    "Run the episodes against a fresh scripted server; check they all succeed; (wall seconds, breakdown per episode)"
    from agent_fixtures import ScriptedServer
    from coda.agent import Agent, AgentConfig
    from coda.aio import run_sync
    from coda.models import OpenAIChat
    from coda.rollout import run_episodes
    CLOCK.t.clear()
    root = tempfile.mkdtemp(prefix='bench-rollout-')
    with ScriptedServer(policy, latency=latency) as srv:
        async def go():
            p, e = OpenAIChat(srv.url, 'planner', max_concurrency=64), OpenAIChat(srv.url, 'executor', max_concurrency=64)
            stop = asyncio.Event()
            probe = asyncio.ensure_future(watch_loop(stop))
            try: return await run_episodes(tasks, make_env, Agent(p, e, AgentConfig()), timed_store(root), n=n, workers=workers, progress=False)
            finally:
                stop.set()
                await probe
                await p.aclose()
                await e.aclose()
        t = time.perf_counter()
        res = run_sync(go())
        wall = time.perf_counter() - t
        requests = len(srv.requests)
    k = len(tasks) * n
    bad = [r for r in res if r.get('status') != 'done' or r.get('score') != 1.0 or (want_steps and r.get('steps') != want_steps)]
    assert len(res) == k and not bad, f"{len(bad)} of {len(res)} episodes did not succeed, e.g. {bad[:1]}"
    assert want_requests is None or requests == want_requests * k, f"{requests} requests for {k} episodes, not {want_requests} each"
    from coda.store import RunStore
    steps = [s for ep in RunStore(root).episodes(finished_only=True) for s in ep.steps]
    model = sum(s.get('planner_s', 0) + s.get('executor_s', 0) for s in steps)
    ep_s = statistics.mean(r['seconds'] for r in res)
    b = dict(episode=ep_s, model=model / k, env=CLOCK['env'] / k, encode=CLOCK['encode'] / k, store=CLOCK['store'] / k,
             store_loop=CLOCK['store on loop'] / k, blocked=CLOCK['blocked'] / k, requests=requests / k,
             excess=(model / requests - latency) if requests else 0.0, busy=sum(r['seconds'] for r in res) / (workers * wall),
             worst=max((max(s.get('planner_s', 0), s.get('executor_s', 0)) for s in steps), default=latency) - latency)
    b['framework'] = ep_s - b['model'] - b['env'] - CLOCK['encode'] / k - b['store_loop']
    return wall, b

def median_breakdown(bs):
    return {key: statistics.median(b[key] for b in bs) for key in bs[0]}

HEAD = (f"{'workers':>8}{'ep/s':>8}{'effic.':>8}{'busy':>6}{'slowdn':>7} | per episode, ms: {'episode':>8}{'model':>8}{'env':>7}{'encode':>7}"
        f"{'store':>7}{'(loop)':>7}{'framew.':>8}{'blocked':>8} | {'excess/req':>10}{'worst':>9}")

def row(w, tput, eff, b, ep1):
    ms = lambda x: f"{1000 * x:>7.1f}"
    return (f"{w:>8}{tput:>8.2f}{eff:>8.2f}{b['busy']:>6.2f}{b['episode'] / ep1:>7.2f} |                  {1000 * b['episode']:>8.1f}{1000 * b['model']:>8.1f}"
            f"{ms(b['env'])}{ms(b['encode'])}{ms(b['store'])}{ms(b['store_loop'])}{1000 * b['framework']:>8.1f}{1000 * b['blocked']:>8.1f} | {1000 * b['excess']:>8.1f} ms{1000 * b['worst']:>6.0f} ms")

def scaling(name, runs:dict, workers, episodes, target=0.9):
    "Print throughput, efficiency and the breakdown per worker count from {w: [(wall, breakdown), ...]}; the efficiency at the largest"
    print(f"\n{name}\n{HEAD}")
    w0 = workers[0]
    per_worker = episodes / statistics.median(x[0] for x in runs[w0]) / w0
    ep1 = median_breakdown([x[1] for x in runs[w0]])['episode']
    for w in workers:
        tput = episodes / statistics.median(x[0] for x in runs[w])
        eff = tput / (w * per_worker)
        print(row(w, tput, eff, median_breakdown([x[1] for x in runs[w]]), ep1))
    if target is not None: print(f"  scaling efficiency at {workers[-1]} workers: {eff:.3f} (target >= {target}: {'met' if eff >= target else 'NOT met'})")
    return eff

@call_parse
def main(latency:float=0.2,         # seconds per model request (latency-bound part)
         episodes:int=16,           # episodes per measurement
         workers:Annotated[int, {'nargs': '+'}]=[1, 2, 4, 8],   # worker counts to measure
         rounds:int=3,              # rounds (worker counts and backends alternate within each; medians reported)
         no_ray:bool=False,         # skip Ray
        ):
    "Rollout throughput: episodes per second at growing worker counts, local pool and Ray"
    from agent_fixtures import CounterEnv, counting_policy, Task
    from test_rollout import answer_policy, ALG
    from coda.envs.scidesk import SciDesk
    from coda.rollout import RayEnvFactory
    count_encoding()
    print(f"rollout bench: {os.cpu_count()} CPUs, latency {latency:.2f} s per request, {episodes} episodes per measurement, "
          f"{rounds} rounds (medians), workers {workers}")

    fac = None
    if not no_ray:
        import ray
        t = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,     # the actors import CounterEnv from tests/
                 runtime_env={'env_vars': {'PYTHONPATH': os.pathsep.join(filter(None, [str(TESTS), os.environ.get('PYTHONPATH')]))}})
        print(f"ray.init {time.perf_counter() - t:.1f} s (not counted)")
        fac = RayEnvFactory(CounterEnv)      # 0.25 CPU per actor: 8 fit on 2 CPUs

    counter = [Task(id=f'C-{i:02d}', steps=8) for i in range(episodes)]
    local, remote, starts = {w: [] for w in workers}, {w: [] for w in workers}, []
    for _ in range(rounds):
        for w in workers:
            local[w].append(measure(counter, TimedFactory(CounterEnv), counting_policy(3), w, latency=latency, want_requests=7, want_steps=4))
            if fac is None: continue
            t = time.perf_counter()
            fac.start(w)
            starts.append((w, time.perf_counter() - t))   # actors started and warm: off the clock
            remote[w].append(measure(counter, TimedFactory(fac), counting_policy(3), w, latency=latency, want_requests=7, want_steps=4))
    title = f"latency-bound agent: counter episodes (7 requests of {latency:.2f} s each, 4 steps), {episodes} episodes"
    scaling(f"{title}, local pool (environments in threads)", local, workers, episodes)
    if fac is not None:
        scaling(f"{title}, Ray (environments in actors, started before the clock)", remote, workers, episodes)
        print("  actor start-up (not counted): " + ', '.join(f"{w} actors {s:.2f} s" for w, s in starts[:len(workers)]))
        fac.shutdown()

    tasks = ALG
    n = max(1, episodes // len(tasks))
    eps = len(tasks) * n
    alone = {w: [] for w in workers}
    for _ in range(rounds):
        for w in workers: alone[w].append(measure(tasks, TimedFactory(SciDesk), answer_policy(tasks), w, n=n, want_requests=1, want_steps=1))
    scaling(f"scidesk alone (Algebra answer tasks, 1 request each, server answers at once), {eps} episodes: CPU-bound, 2 cores cap it",
            alone, workers, eps, target=None)
    if fac is None: return
    W = min(4, max(workers))
    sd = RayEnvFactory(SciDesk)
    loc, ray_ = [], []
    try:
        for _ in range(rounds):
            loc.append(measure(tasks, TimedFactory(SciDesk), answer_policy(tasks), W, n=n, want_requests=1, want_steps=1))
            sd.start(W)                                                    # off the clock
            ray_.append(measure(tasks, TimedFactory(sd), answer_policy(tasks), W, n=n, want_requests=1, want_steps=1))
    finally: sd.shutdown(ray_too=True)
    l, r = statistics.median(x[0] for x in loc), statistics.median(x[0] for x in ray_)
    print(f"\nRay against the local pool, {W} workers, {eps} scidesk episodes, median of {rounds} (actors started before the clock)")
    print(f"  local pool {l:.3f} s ({1000 * l / eps:.1f} ms/episode), Ray {r:.3f} s ({1000 * r / eps:.1f} ms/episode): "
          f"overhead {1000 * (r - l) / eps:+.1f} ms per episode")
    print(f"{HEAD}\n{row('local', eps / l, 1.0, median_breakdown([x[1] for x in loc]), median_breakdown([x[1] for x in loc])['episode'])}")
    print(row('Ray', eps / r, l / r, median_breakdown([x[1] for x in ray_]), median_breakdown([x[1] for x in loc])['episode']))
