"""Framework overhead of the agent loop, and overlap of concurrent episodes.

Runs the real agent (`coda.agent.Agent`) with the real HTTP client (`coda.models.OpenAIChat`) against a real
OpenAI-compatible server on 127.0.0.1 whose replies are scripted and whose latency is fixed (so the model's
cost is known and the framework's is what remains), on the counter environment with 1280x800 screenshots,
writing every step to a real run folder. Prints:

* per-step overhead = time from a step's start to the next one's - time inside model requests - time inside the
  environment (one-time costs such as opening connections are left out),
  which includes building messages, base64 and JSON, parsing, stuck detection and the store's fsynced writes;
  the screenshot's PNG encoding runs in the environment's worker thread as part of producing the observation and
  is printed separately; target < 5 ms;
* wall time of W concurrent episodes against one, with a latency-bound server; target < 1.5x.

Usage: python bench/agent.py [--latency 0.2] [--steps 8] [--episodes 8] [--repeat 3]
"""
import argparse, asyncio, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]/'tests'))
from agent_fixtures import CounterEnv, ScriptedServer, Task, counting_policy
from coda.agent import Agent, AgentConfig
from coda.models import OpenAIChat
from coda.rollout import run_episodes
from coda.store import RunStore

def run(url, tasks, workers, root, target):
    async def go():
        p, e = OpenAIChat(url, 'planner', max_concurrency=64), OpenAIChat(url, 'executor', max_concurrency=64)
        try: return await run_episodes(tasks, lambda: CounterEnv(target=target), Agent(p, e, AgentConfig()), RunStore(root), workers=workers, progress=False)
        finally: await p.aclose(); await e.aclose()
    t = time.perf_counter(); res = asyncio.run(go()); return res, time.perf_counter() - t

def overhead(root):
    "Per step: time from its start to the next step's start, minus the time inside model requests and the environment"
    per_step = []
    for e in RunStore(root).episodes(finished_only=True):
        s = e['steps']
        per_step += [b['started'] - a['started'] - a['planner_s'] - a['executor_s'] - a['env_s'] for a, b in zip(s, s[1:])]
    return per_step

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--latency', type=float, default=0.2, help='seconds the server takes per request (latency-bound)')
    ap.add_argument('--steps', type=int, default=8, help='steps per episode')
    ap.add_argument('--episodes', type=int, default=8, help='concurrent episodes')
    ap.add_argument('--repeat', type=int, default=3, help='rounds (medians are reported)')
    a = ap.parse_args()
    target = a.steps - 1
    mk = lambda k: [Task(id=f'C-{i:02d}', steps=a.steps) for i in range(k)]
    ovh0, ovhL, one, many = [], [], [], []
    with ScriptedServer(counting_policy(target), latency=0.0) as fast, ScriptedServer(counting_policy(target), latency=a.latency) as slow:
        run(fast.url, mk(1), 1, tempfile.mkdtemp(), target)  # warm-up (imports, connections)
        for r in range(a.repeat):
            d = tempfile.mkdtemp(); run(fast.url, mk(4), 1, d, target); ovh0 += overhead(d)
            d = tempfile.mkdtemp(); _, t1 = run(slow.url, mk(1), 1, d, target); one.append(t1); ovhL += overhead(d)
            d = tempfile.mkdtemp(); res, tw = run(slow.url, mk(a.episodes), a.episodes, d, target); many.append(tw)
            assert all(x['score'] == 1.0 for x in res), res
        enc = []
        env = CounterEnv(); obs = env.reset(None)
        for _ in range(20):
            o = env._obs(); t = time.perf_counter(); o.png(); enc.append(time.perf_counter() - t)
        inflight = slow.max_inflight
    med = statistics.median
    print(f"agent loop, {a.steps} steps/episode, 1280x800 screenshots, scripted server on 127.0.0.1, {a.repeat} rounds (medians)\n")
    print(f"per-step framework overhead, server latency 0      : {1000*med(ovh0):6.2f} ms   (target < 5 ms: {'met' if med(ovh0) < 0.005 else 'NOT met'})")
    print(f"per-step framework overhead, server latency {a.latency:.2f} s : {1000*med(ovhL):6.2f} ms")
    print(f"PNG encoding of one screenshot (once a step, in the environment's thread, counted as environment time): {1000*med(enc):.2f} ms")
    print(f"one episode, latency {a.latency:.2f} s            : {med(one):6.2f} s")
    print(f"{a.episodes} concurrent episodes                  : {med(many):6.2f} s   ratio {med(many)/med(one):.2f}x   (target < 1.5x: {'met' if med(many)/med(one) < 1.5 else 'NOT met'})")
    print(f"most requests in flight at the server          : {inflight}")

if __name__ == '__main__': main()
