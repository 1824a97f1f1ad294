"""Rollout throughput: episodes per second against the number of workers, for a model-latency-bound agent and for
scidesk alone, and the Ray backend's overhead per episode against the local pool, measured side by side.

* latency-bound: the planner and executor are a real OpenAI-compatible HTTP server on 127.0.0.1 answering every
  request after `--latency` seconds (standing in for a busy GPU server: on this 2-core CPU a served model would be
  CPU-bound, not latency-bound); each episode is the counter task (3 clicks, then the answer: 7 requests).
  Scaling efficiency at W workers = throughput(W) / (W x throughput(1)); target >= 0.8 at 8.
* scidesk alone: Algebra answer tasks with a server that answers at once, so the environment and the framework are
  the work (CPU-bound: on 2 cores threads cannot scale it far).
* Ray: the same scidesk episodes with each environment in a Ray actor (a local Ray, actors started and warmed up
  before timing) against the local pool, alternating, median of `--rounds`; overhead = (Ray - local) / episodes.

Usage: python bench/rollout.py [--latency 0.2] [--episodes 16] [--workers 1 2 4 8] [--rounds 3] [--no-ray]
"""
import argparse, os, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]/'tests'))

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--latency', type=float, default=0.2, help='seconds per model request (latency-bound part)')
    ap.add_argument('--episodes', type=int, default=16, help='episodes per measurement')
    ap.add_argument('--workers', type=int, nargs='+', default=[1, 2, 4, 8], help='worker counts to measure')
    ap.add_argument('--rounds', type=int, default=3, help='rounds of the Ray-vs-local comparison')
    ap.add_argument('--no-ray', action='store_true', help='skip the Ray comparison')
    a = ap.parse_args()
    from agent_fixtures import ScriptedServer, CounterEnv, counting_policy, Task
    from test_rollout import answer_policy, ALG
    from coda.agent import Agent, AgentConfig, run_sync
    from coda.envs.scidesk import SciDesk
    from coda.models import OpenAIChat
    from coda.rollout import run_episodes, RayEnvFactory
    from coda.store import RunStore

    def timed(tasks, make_env, policy, workers, n=1, latency=0.0):
        with ScriptedServer(policy, latency=latency) as srv:
            async def go():
                m = OpenAIChat(srv.url, 'model', max_concurrency=64)
                try: return await run_episodes(tasks, make_env, Agent(m, m, AgentConfig()), RunStore(tempfile.mkdtemp(), {}), n=n, workers=workers, progress=False)
                finally: await m.aclose()
            t = time.perf_counter(); res = run_sync(go()); dt = time.perf_counter() - t
        assert len(res) == len(tasks) * n and all(r['status'] == 'done' for r in res), res[:2]
        return dt

    counter = [Task(id=f'C-{i:02d}', steps=8) for i in range(a.episodes)]
    print(f"latency-bound agent: counter episodes (7 requests each, {a.latency:.2f} s per request), {a.episodes} episodes")
    print(f"{'workers':>8}{'episodes/s':>12}{'efficiency':>12}")
    base = None
    for w in a.workers:
        dt = timed(counter, CounterEnv, counting_policy(3), w, latency=a.latency)
        tput = a.episodes / dt
        if base is None: base = tput / w          # per-worker throughput at the smallest count
        eff = tput / (w * base)
        print(f"{w:>8}{tput:>12.2f}{eff:>12.2f}")
    last_eff = eff
    print(f"  scaling efficiency at {a.workers[-1]} workers: {last_eff:.2f} (target >= 0.8: {'met' if last_eff >= 0.8 else 'NOT met'})")

    tasks = ALG
    n = max(1, a.episodes // len(tasks))
    print(f"\nscidesk alone (Algebra answer tasks, server answers at once), {len(tasks) * n} episodes")
    print(f"{'workers':>8}{'episodes/s':>12}")
    for w in a.workers:
        dt = timed(tasks, SciDesk, answer_policy(tasks), w, n=n)
        print(f"{w:>8}{len(tasks) * n / dt:>12.1f}")
    if a.no_ray: return
    import ray
    t = time.perf_counter(); ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False); t_init = time.perf_counter() - t
    W = 4
    fac = RayEnvFactory(SciDesk)
    class Kept:
        "A warm actor that run_episodes may 'close' without killing it (reused in every round)"
        def __init__(self, env): self.env = env
        def reset(self, task): return self.env.reset(task)
        def step(self, actions): return self.env.step(actions)
        def evaluate(self): return self.env.evaluate()
        def close(self): pass
    envs = [fac() for _ in range(W)]
    for e in envs: e.reset(tasks[0])                       # actors started and warm
    pool = [Kept(e) for e in envs]
    def from_pool(): return pool.pop()
    local, remote = [], []
    try:
        for _ in range(a.rounds):
            local.append(timed(tasks, SciDesk, answer_policy(tasks), W, n=n))
            pool[:] = [Kept(e) for e in envs]
            remote.append(timed(tasks, from_pool, answer_policy(tasks), W, n=n))
    finally: fac.shutdown(ray_too=True)
    l, r = statistics.median(local), statistics.median(remote)
    eps = len(tasks) * n
    print(f"\nRay against the local pool, {W} workers, {eps} scidesk episodes, median of {a.rounds} (ray.init {t_init:.1f} s not included)")
    print(f"  local pool {l:.3f} s ({1000 * l / eps:.1f} ms/episode), Ray {r:.3f} s ({1000 * r / eps:.1f} ms/episode): "
          f"overhead {1000 * (r - l) / eps:+.1f} ms per episode")

if __name__ == '__main__': main()
