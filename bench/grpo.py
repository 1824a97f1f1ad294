"""Decoupled GRPO speed: the reward step with the G executor requests in flight at once against one after another,
on a latency-bound local OpenAI-compatible server, and the wall time of one GRPO step on the tiny Qwen2.5-VL.

The executor is a real HTTP server on 127.0.0.1 (the scripted server the tests use) that answers every request after
`--latency` seconds, like a busy vLLM; the reward function is `coda.grpo.DecoupledReward`, the same object training
uses, with the backend's concurrency limit set to G (concurrent) or 1 (sequential). Both are timed side by side,
alternating, over `--rounds` rounds; medians are printed. Target: concurrent at least 5x faster for G = 8.

Usage: python bench/grpo.py [--G 8] [--latency 0.2] [--rounds 5] [--no-train]
"""
import argparse, hashlib, json, os, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]/'tests'))
os.environ.setdefault('TRL_EXPERIMENTAL_SILENCE', '1')

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--G', type=int, default=8, help='completions per state')
    ap.add_argument('--latency', type=float, default=0.2, help='seconds the executor server takes per request')
    ap.add_argument('--rounds', type=int, default=5, help='timed rounds of each')
    ap.add_argument('--no-train', action='store_true', help='skip the GRPO step timing')
    a = ap.parse_args()
    from agent_fixtures import ScriptedServer
    from test_grpo import write_episode, grounding_executor
    from coda.envs.scidesk import scidesk_tasks
    from coda.grpo import build_grpo_dataset, DecoupledReward, train_grpo
    from coda.models import OpenAIChat, build_tiny_qwen25vl
    root = Path(tempfile.mkdtemp())/'run'
    task = next(t for t in scidesk_tasks(['Algebra']) if t.id == 'A-01')
    write_episode(root, task, [("Thought: Click the expression field at the bottom.\nAction: click(start_box='(458,758)')",
                                "click(start_box='<|box_start|>(458,758)<|box_end|>')")])
    ds = build_grpo_dataset(root, 'j')
    comps = [[{'role': 'assistant', 'content': f'Thought: click the field, variant {i}\nAction: click'}] for i in range(a.G)]
    cols = dict(episode=[ds[0]['episode']] * a.G, step=[0] * a.G, gold=[ds[0]['gold']] * a.G)
    times = {'concurrent': [], 'sequential': []}
    with ScriptedServer(grounding_executor, latency=a.latency) as srv:
        rewards = {'concurrent': DecoupledReward(OpenAIChat(srv.url, 'executor', max_concurrency=a.G)),
                   'sequential': DecoupledReward(OpenAIChat(srv.url, 'executor', max_concurrency=1))}
        for r in rewards.values(): r(completions=comps[:1], **{k: v[:1] for k, v in cols.items()})   # warm up: connections, replay cache
        for _ in range(a.rounds):
            for name, r in rewards.items():
                t = time.perf_counter(); out = r(completions=comps, **cols); times[name].append(time.perf_counter() - t)
                assert len(out) == a.G and r.failures == 0
        peak = srv.max_inflight
    c, s = statistics.median(times['concurrent']), statistics.median(times['sequential'])
    print(f"reward step, G = {a.G}, executor latency {a.latency:.2f} s/request, median of {a.rounds} rounds (alternating)")
    print(f"  concurrent  {c:7.3f} s   (peak requests in flight at the server: {peak})")
    print(f"  sequential  {s:7.3f} s")
    print(f"  speed-up    {s / c:7.1f}x  (target >= 5x: {'met' if s / c >= 5 else 'NOT met'})")
    if a.no_train: return
    planner = build_tiny_qwen25vl(Path(tempfile.mkdtemp())/'planner')
    with ScriptedServer(grounding_executor) as srv:
        rw = DecoupledReward(OpenAIChat(srv.url, 'executor', max_concurrency=a.G))
        steps = 3
        t = time.perf_counter()
        tr = train_grpo(ds, planner, rw, Path(tempfile.mkdtemp())/'out', preset='coda', lora=True, max_steps=steps,
                        num_generations=a.G, per_device_train_batch_size=a.G, max_completion_length=32, save_strategy='no')
        wall = time.perf_counter() - t
    rt = tr.state.log_history[-1].get('train_runtime', wall)
    print(f"\nGRPO on the tiny Qwen2.5-VL (CPU, LoRA, G = {a.G}, 32 completion tokens, coda preset): {steps} steps, "
          f"train {rt:.1f} s = {rt / steps:.2f} s per step ({wall:.1f} s including model load and trainer set-up)")

if __name__ == '__main__': main()
