"""Decoupled GRPO speed: the reward step with the G executor requests in flight at once against one after another,
called through TRL's own call path, on a latency-bound local OpenAI-compatible server; the descriptors and the
per-call cost of many reward calls; and the wall time of one GRPO step on the tiny Qwen2.5-VL.

The executor is a real HTTP server on 127.0.0.1 (the scripted server the tests use: one write per answer, a
backlog of 1024) that answers every request after `--latency` seconds, like a busy vLLM; the reward function is
`coda.grpo.DecoupledReward`, the same object training uses, with the backend's concurrency limit set to G
(concurrent) or 1 (sequential). Each reward call goes through `GRPOTrainer._calculate_rewards` of a real TRL
trainer on the tiny planner (`--direct`: the reward object called from plain sync code, as TRL does, without
building a trainer). Both variants are timed side by side, alternating, over `--rounds` rounds; medians are
printed. Targets: concurrent at least 6x faster for G = 8 at 0.2 s latency; no descriptor left open by `--calls`
reward calls.

Where the time of a concurrent call goes: the executor server (the latency, once: all G requests wait together),
encoding the G request bodies (the screenshot as PNG, base64, JSON), and the rest (framework, HTTP, the loop hop).

Usage: python bench/grpo.py [-g 8] [--latency 0.2] [--rounds 5] [--calls 300] [--direct] [--no-train]
"""
import os, statistics, sys, tempfile, time
from pathlib import Path
from fastcore.script import call_parse
sys.path.insert(0, str(Path(__file__).resolve().parents[1]/'tests'))
os.environ.setdefault('TRL_EXPERIMENTAL_SILENCE', '1')

def open_fds()->int: return len(os.listdir('/proc/self/fd'))

def trl_caller(ds, planner, G:int, reward):
    "A function that scores one state's G completions through `GRPOTrainer._calculate_rewards`, with a settable reward"
    from trl import GRPOTrainer
    from coda.grpo import grpo_config, load_planner
    model, proc = load_planner(planner)
    cfg = grpo_config(tempfile.mkdtemp(), 'coda', num_generations=G, per_device_train_batch_size=G, max_completion_length=32, save_strategy='no')
    tr = GRPOTrainer(model=model, reward_funcs=[reward], args=cfg, train_dataset=ds, processing_class=proc)
    row = ds[0]
    inputs = [dict(row) for _ in range(G)]
    def call(reward, completions):
        tr.reward_funcs[0] = reward
        r = tr._calculate_rewards(inputs, [row['prompt']] * len(completions), completions, [[1, 2, 3]] * len(completions))
        return r[:, 0].tolist()
    return call

def direct_caller(ds, G:int):
    "A function that calls the reward object from plain sync code, with the batch's columns, as TRL does"
    row = ds.select_columns(['episode', 'gold', 'step'])[0]
    def call(reward, completions):
        n = len(completions)
        return reward(prompts=[None] * n, completions=completions, episode=[row['episode']] * n, step=[row['step']] * n, gold=[row['gold']] * n)
    return call

def encode_seconds(reward, ds, completions, reps:int=5)->float:
    "Median seconds to build the G executor request bodies of one call (screenshot PNG + base64 + JSON)"
    import json
    from coda.prompts import Conversation, split_planner
    conv = reward._conversation(ds.select_columns(['episode'])[0]['episode'], 0)
    msgs = []
    for c in completions:
        thought, _ = split_planner(c[-1]['content'])
        cv = Conversation(conv.instruction, conv.language, conv.window, conv.keep_user, list(conv.context))
        cv.add_assistant(c[-1]['content'])
        msgs.append(cv.executor_messages(thought))
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        for m in msgs: json.dumps(reward.executor.request_body(m, True, **reward.sampling))
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)

@call_parse
def main(G:int=8,                   # completions per state
         latency:float=0.2,         # seconds the executor server takes per request
         rounds:int=5,              # timed rounds of each
         calls:int=300,             # reward calls (no latency) for the descriptor count and the per-call cost
         direct:bool=False,         # call the reward object from sync code instead of through a TRL trainer's _calculate_rewards
         no_train:bool=False,       # skip the GRPO step timing
        ):
    "Decoupled GRPO speed: the reward step with the G executor requests in flight at once against one after another"
    from agent_fixtures import ScriptedServer
    from test_grpo import write_episode, grounding_executor
    from coda.envs.scidesk import scidesk_tasks
    from coda.grpo import build_grpo_dataset, DecoupledReward, train_grpo
    from coda.models import OpenAIChat
    from coda.tiny import build_tiny_qwen25vl
    root = Path(tempfile.mkdtemp())/'run'
    task = next(t for t in scidesk_tasks(['Algebra']) if t.id == 'A-01')
    write_episode(root, task, [("Thought: Click the expression field at the bottom.\nAction: click(start_box='(458,758)')",
                                "click(start_box='<|box_start|>(458,758)<|box_end|>')")])
    ds = build_grpo_dataset(root, 'j')
    comps = [[{'role': 'assistant', 'content': f'Thought: click the field, variant {i}\nAction: click'}] for i in range(G)]
    planner = None if direct and no_train else build_tiny_qwen25vl(Path(tempfile.mkdtemp())/'planner')
    times = {'concurrent': [], 'sequential': []}
    fd0 = open_fds()
    with ScriptedServer(grounding_executor, latency=latency) as srv:
        rewards = {'concurrent': DecoupledReward(OpenAIChat(srv.url, 'executor', max_concurrency=G)),
                   'sequential': DecoupledReward(OpenAIChat(srv.url, 'executor', max_concurrency=1))}
        t = time.perf_counter()
        call = direct_caller(ds, G) if direct else trl_caller(ds, planner, G, rewards['concurrent'])
        path = 'the reward called from sync code' if direct else "TRL's GRPOTrainer._calculate_rewards"
        setup = time.perf_counter() - t
        for r in rewards.values(): call(r, comps[:1])   # warm up: the replay cache, the first connection
        for _ in range(rounds):
            for name, r in rewards.items():
                t = time.perf_counter()
                out = call(r, comps)
                times[name].append(time.perf_counter() - t)
                assert len(out) == G and r.failures == 0
        peak = srv.max_inflight
        enc = encode_seconds(rewards['concurrent'], ds, comps)
        for r in rewards.values(): r.close()
    c, s = statistics.median(times['concurrent']), statistics.median(times['sequential'])
    print(f"reward step through {path} (set up in {setup:.1f} s), G = {G}, executor latency {latency:.2f} s/request, "
          f"median of {rounds} rounds (alternating)")
    print(f"  concurrent  {c:7.3f} s   (peak requests in flight at the server: {peak})")
    print(f"  sequential  {s:7.3f} s")
    print(f"  speed-up    {s / c:7.1f}x  (target >= 6x: {'met' if s / c >= 6 else 'NOT met'})")
    print(f"  where a concurrent call's {c * 1e3:.0f} ms go: executor server {latency * 1e3:.0f} ms (all G requests wait together), "
          f"encoding the G request bodies {enc * 1e3:.1f} ms, framework + HTTP + loop hop {max(0.0, c - latency - enc) * 1e3:.1f} ms")

    # many calls against a server without latency: descriptors, and what one call costs beyond the executor
    with ScriptedServer(grounding_executor) as srv:
        rw = DecoupledReward(OpenAIChat(srv.url, 'executor', max_concurrency=G))
        t = time.perf_counter()
        call(rw, comps)
        first = time.perf_counter() - t   # cold: client set-up, connections
        for _ in range(5): call(rw, comps)
        before, ts = open_fds(), []
        for _ in range(calls):
            t = time.perf_counter()
            call(rw, comps)
            ts.append(time.perf_counter() - t)
        after = open_fds()
        rw.close()
        reqs = len(srv.requests)
    time.sleep(0.2)   # the server's ends of the closed connections close a moment later
    end = open_fds()
    ts.sort()
    print(f"\n{calls} reward calls of G = {G} on a server without latency ({reqs} requests): open descriptors {before} before, "
          f"{after} after ({after - before:+d}: {'no leak' if after <= before else 'LEAKED'}); {end} after close() "
          f"({end - fd0:+d} against the start of the bench: the background loop's own selector and wake-up pair)")
    print(f"  per call: median {ts[len(ts) // 2] * 1e3:.1f} ms, p90 {ts[int(len(ts) * 0.9)] * 1e3:.1f} ms (encoding {enc * 1e3:.1f} ms of it); "
          f"the first call on a new client {first * 1e3:.1f} ms; client set-up per call: none (one client on the background loop for the run)")
    if no_train: return
    with ScriptedServer(grounding_executor) as srv:
        rw = DecoupledReward(OpenAIChat(srv.url, 'executor', max_concurrency=G))
        steps = 3
        t = time.perf_counter()
        tr = train_grpo(ds, planner, rw, Path(tempfile.mkdtemp())/'out', preset='coda', lora=True, max_steps=steps,
                        num_generations=G, per_device_train_batch_size=G, max_completion_length=32, save_strategy='no')
        wall = time.perf_counter() - t
        rw.close()
    rt = tr.state.log_history[-1].get('train_runtime', wall)
    print(f"\nGRPO on the tiny Qwen2.5-VL (CPU, LoRA, G = {G}, 32 completion tokens, coda preset): {steps} steps, "
          f"train {rt:.1f} s = {rt / steps:.2f} s per step ({wall:.1f} s including model load and trainer set-up)")

