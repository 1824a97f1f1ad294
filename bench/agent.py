"""Framework overhead of the agent loop, where a step's time goes, and overlap of concurrent episodes.

Runs the real agent (`coda.agent.Agent`) with the real HTTP client (`coda.models.OpenAIChat`) through
`coda.rollout.run_episodes` against a real OpenAI-compatible server on 127.0.0.1 whose replies are scripted and whose
latency is fixed (so the model's cost is known and the framework's is what remains), on the counter environment with
1280x800 screenshots, writing every step to a real run folder (fsynced). Prints, per step (medians over steps):

* model: seconds inside the planner's and executor's requests (`planner_s + executor_s` of the step records);
* env: inside the environment's step, less the screenshot's encoding (`env_s - encode_s`);
* encoding: the screenshot's PNG encoding, in the environment's worker thread (`encode_s`);
* store: how long the agent waited for the disk (`store_s`: the previous step's write, which runs in the store's
  writer threads while the agent goes on);
* framework: the rest of the time from a step's start to the next one's: building messages, base64 and JSON,
  parsing, stuck detection, handing the record to the store, the event loop (one-time costs such as opening
  connections are left out); target < 1 ms;

and the wall time of W concurrent episodes against one with a latency-bound server (target <= 1.15x), with the
longest time the event loop stood still meanwhile (a blocking call on it stalls every episode). Each run starts a new
event loop, whose HTTP clients are set up by a first request before the clock starts (that one-time cost is printed
on its own).

Usage: python bench/agent.py [--latency 0.2] [--steps 8] [--episodes 8] [--repeat 3] [--store-on-loop]
"""
import asyncio, statistics, sys, tempfile, time
from pathlib import Path
from fastcore.script import call_parse
sys.path.insert(0, str(Path(__file__).resolve().parents[1]/'tests'))
from agent_fixtures import CounterEnv, ScriptedServer, Task, counting_policy
from coda.agent import Agent, AgentConfig
from coda.models import OpenAIChat
from coda.rollout import run_episodes
from coda.store import RunStore, EpisodeWriter

async def _stalls(done:asyncio.Event, out:list):
    "The longest gap between wake-ups of a coroutine asleep 5 ms at a time, until `done` (a stalled event loop)"
    gap, t = 0.0, time.perf_counter()
    while not done.is_set():
        await asyncio.sleep(0.005)
        now = time.perf_counter()
        gap, t = max(gap, now - t - 0.005), now
    out.append(gap)

HELLO = [{'role': 'user', 'content': [{'type': 'text', 'text': 'hello'}]}]

def run(url, tasks, workers, root, target, stalls=None, setup=None):
    """Run `tasks` through run_episodes on a new event loop: (results, wall seconds). The clients' one-time set-up (their
    first request on this loop, timed into `setup`) comes first, outside the clock and the stall watch."""
    async def go():
        p, e = OpenAIChat(url, 'planner', max_concurrency=64), OpenAIChat(url, 'executor', max_concurrency=64)
        try:
            t = time.perf_counter()
            r = await asyncio.gather(p.chat(HELLO), e.chat(HELLO))
            if setup is not None: setup.append(time.perf_counter() - t - max(x.seconds for x in r))
            done = asyncio.Event()
            watch = asyncio.create_task(_stalls(done, stalls)) if stalls is not None else None
            t = time.perf_counter()
            try: res = await run_episodes(tasks, lambda: CounterEnv(target=target), Agent(p, e, AgentConfig()), RunStore(root), workers=workers, progress=False)
            finally:
                took = time.perf_counter() - t
                done.set()
                if watch: await watch
            return res, took
        finally:
            await p.aclose()
            await e.aclose()
    return asyncio.run(go())

def writes_on_loop():
    "Make the store's writes on the event loop, as before they moved to writer threads (for comparison)"
    def at_once(self, fn, *args):
        f = asyncio.get_running_loop().create_future()
        try: f.set_result(fn(*args))
        except Exception as e: f.set_exception(e)
        return f
    EpisodeWriter.soon = at_once

PARTS = ('model', 'env', 'encoding', 'store', 'framework')

def breakdown(root)->dict:
    "Per step (but the last of each episode): {part: [seconds]}, from the step records"
    out = {k: [] for k in PARTS + ('step',)}
    for e in RunStore(root).episodes(finished_only=True):
        s = [x.to_dict() for x in e.steps]
        for a, b in zip(s, s[1:]):
            step, enc, store = b['started'] - a['started'], a.get('encode_s', 0.0), a.get('store_s', 0.0)   # older records lack the last two
            model = a['planner_s'] + a['executor_s']
            for k, v in zip(PARTS + ('step',), (model, a['env_s'] - enc, enc, store, step - model - a['env_s'] - store, step)): out[k].append(v)
    return out

def merge(into:dict, d:dict):
    for k, v in d.items(): into.setdefault(k, []).extend(v)

def show(title:str, d:dict):
    med = statistics.median
    print(f"{title}: {1000*med(d['step']):.2f} ms a step = " + ' + '.join(f"{k} {1000*med(d[k]):.2f}" for k in PARTS) + ' (ms, medians)')

@call_parse
def main(latency:float=0.2,         # seconds the server takes per request (latency-bound)
         steps:int=8,               # steps per episode
         episodes:int=8,            # concurrent episodes
         repeat:int=3,              # rounds (medians are reported)
         store_on_loop:bool=False,  # the store's writes on the event loop, as before (for comparison)
        ):
    "Framework overhead of the agent loop, where a step's time goes, and overlap of concurrent episodes"
    if store_on_loop: writes_on_loop()
    target = steps - 1
    mk = lambda k: [Task(id=f'C-{i:02d}', steps=steps) for i in range(k)]
    fast, slow, one, many, stalls1, stallsW, setup = {}, {}, [], [], [], [], []
    with ScriptedServer(counting_policy(target), latency=0.0) as fs, ScriptedServer(counting_policy(target), latency=latency) as ss:
        run(fs.url, mk(1), 1, tempfile.mkdtemp(), target)  # warm-up (imports, connections)
        for r in range(repeat):
            d = tempfile.mkdtemp()
            res, _ = run(fs.url, mk(4), 1, d, target, setup=setup)
            merge(fast, breakdown(d))
            assert all(x['score'] == 1.0 for x in res), res
            d = tempfile.mkdtemp()
            res, t1 = run(ss.url, mk(1), 1, d, target, stalls1)
            one.append(t1)
            merge(slow, breakdown(d))
            d = tempfile.mkdtemp()
            res, tw = run(ss.url, mk(episodes), episodes, d, target, stallsW)
            many.append(tw)
            assert all(x['score'] == 1.0 for x in res), res
        inflight = ss.max_inflight
    med = statistics.median
    fw = med(fast['framework'])
    print(f"agent loop, {steps} steps/episode ({2 * steps - 1} requests), 1280x800 screenshots, scripted server on 127.0.0.1, {repeat} rounds"
          + (", store writes ON THE EVENT LOOP (--store-on-loop)" if store_on_loop else ", store writes in its writer threads") + "\n")
    show("server latency 0     ", fast)
    show(f"server latency {latency:.2f} s", slow)
    print(f"\nper-step framework overhead (latency 0): {1000*fw:.2f} ms   (target < 1 ms: {'met' if fw < 0.001 else 'NOT met'})")
    ratio = med(many) / med(one)
    print(f"one episode, latency {latency:.2f} s : {med(one):6.2f} s   (the model alone: {(2 * steps - 1) * latency:.2f} s)")
    print(f"{episodes} concurrent episodes       : {med(many):6.2f} s   ratio {ratio:.2f}x   (target <= 1.15x: {'met' if ratio <= 1.15 else 'NOT met'})")
    print(f"longest event-loop stall: {1000*max(stalls1):.1f} ms with one episode, {1000*max(stallsW):.1f} ms with {episodes}")
    print(f"most requests in flight at the server: {inflight}")
    print(f"one-time client set-up on a new event loop (first request, less the server's time; outside the figures above): {1000*med(setup):.1f} ms")

