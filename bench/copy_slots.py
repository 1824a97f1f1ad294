"""Is copying values the tiny planner's blocker? An experiment beside the miniature, never on test tasks.

Two tiny planners are bootstrapped side by side on the same demonstrations, 450 SFT steps each, as the miniature
bootstraps its baseline (`coda.mini.prepare.build_planner`, `coda.sft.train_sft`): one plain, one with *copy slots*:
the values of the task's instruction (numbers, words with digits, quoted strings, colours, variable names) are
replaced by slot tokens `<v0>`, `<v1>`, ... in everything it reads and trains on, and its replies get the values
back, so copying a value becomes choosing a slot. Both are then run by the agent (grounder executor, scidesk) on
generated tasks with values not in their demonstrations, and the checkers count successes.

`--data seed`: the 17 seed demonstrations only (the miniature's bootstrap); `--data families`: those plus
demonstrations of five generated-task families whose procedures the seed and train tasks show (store a value,
angle mode, precision, Julian date, PDB fetch; never a test task's procedure).

Usage: python bench/copy_slots.py [--data families] [--steps 450] [--out runs/bench-copy-slots] [--only slots|plain]
It prints, per planner and temperature, the successes on the fresh tasks. Two planners take about 15 minutes on
2 cores (run at once, one core each).
"""
import argparse, os, subprocess, sys, time
from pathlib import Path

from coda.mini.slots import slot_values, delex, delex_sft_row, SlotChat   # the same mapping as the miniature's (its planner's codec)

def family_tasks(seed:int, per_app:int, test:list)->list:
    "Generated tasks of the five demonstrable families (`coda.mini.teacher.template_oracle`), each with its oracle"
    from coda.mini.teacher import template_tasks
    return template_tasks(['Algebra', 'Astronomy', 'Biochem'], per_app, seed, avoid=test, oracle=True)

def run(out:Path, slots:bool, data:str, steps:int, demos:int=30):
    "Bootstrap one planner into `out` (resumable) and evaluate it; prints its successes"
    from coda.pipeline import load_config, Pipeline
    from coda.mini.teacher import template_tasks
    from coda.mini.prepare import build_planner
    from coda.mini.oracle import record_demonstrations
    from coda.judge import checker_judgments
    from coda.envs.scidesk import scidesk_tasks
    from coda.agent import AgentConfig
    from coda.sft import sft_examples, rows_to_dataset, train_sft
    from coda.envs.scidesk import SciDesk
    from coda.models import LocalChat
    from coda.mini.grounder import A11yGrounder
    from coda.rollout import evaluate
    cfg, t0 = load_config('params/mini.yaml', run=str(out)), time.time()   # the miniature's sizes and tasks
    apps, boot = list(cfg.tasks.apps), cfg.prepare_args['bootstrap']
    test = Pipeline(cfg, dry_run=True, progress=False, log=lambda *a: None).tasks('test')
    seed, train = [t for t in scidesk_tasks(apps) if t.split == 'seed'], [t for t in scidesk_tasks(apps) if t.split == 'train']
    demo_tasks = family_tasks(7, demos, test) if data == 'families' else []
    seen = {t.instruction for t in demo_tasks}
    fresh = [t for t in (family_tasks(99, 12, test) if data == 'families' else template_tasks(apps, 4, 99, avoid=test)) if t.instruction not in seen]
    runs = [out/'seed']
    if not (out/'seed').exists(): record_demonstrations(seed, out/'seed', workers=1); checker_judgments(out/'seed')
    if demo_tasks:
        runs.append(out/'demos')
        if not (out/'demos').exists(): record_demonstrations(demo_tasks, out/'demos', workers=1); checker_judgments(out/'demos')
    rows, _ = sft_examples(runs, 'checker')
    if slots: rows = [delex_sft_row(r) for r in rows]
    M = out/'models'
    if not (M/'baseline'/'config.json').exists():
        texts = [''.join(p.get('text') or '' for m in r['messages'] for p in m['content']) for r in rows]
        env = SciDesk()
        try:
            for t in train:
                x = t.instruction + '\n' + (env.reset(t).a11y_text or '')
                texts.append(delex(x, slot_values(t.instruction)) if slots else x)
        finally: env.close()
        build_planner(texts + ['system\nuser\nassistant\n'] * 20, M/'random', seed=cfg.seed, **cfg.prepare_args['planner'])
        train_sft(rows_to_dataset(rows), M/'random', M/'baseline', lora=False, freeze_vision=True, max_steps=steps, lr=boot['lr'],
                  per_device_train_batch_size=1, grad_accum=4, save_steps=max(50, steps // 3), seed=cfg.seed, lr_scheduler_type='cosine',
                  warmup_steps=min(10, steps // 10))
    name = 'slots' if slots else 'plain'
    print(f"{name}: {len(rows)} demonstration turns, bootstrap done at {time.time() - t0:.0f} s", flush=True)
    for T in (1.0, 0.3):
        p = LocalChat(M/'baseline', defaults=dict(temperature=T), seed=0)
        a = cfg.agent
        ag = AgentConfig(obs=a.obs, planner_sampling={**a.planner_sampling, 'temperature': T}, executor_sampling=dict(a.executor_sampling), stuck_after=a.stuck_after)
        res = evaluate(fresh, SciDesk, SlotChat(p) if slots else p, A11yGrounder(), out/f'fresh-T{T}', n=2, workers=1, config=ag, progress=False, seed=0)
        ok = sum(r['score'] >= 1 for r in res['records'])
        print(f"RESULT {name} data={data} steps={steps} T={T}: {ok} of {len(res['records'])} episodes on {len(fresh)} fresh tasks succeed", flush=True)

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--data', choices=('seed', 'families'), default='families', help='what the planners are bootstrapped on')
    ap.add_argument('--steps', type=int, default=450, help='bootstrap SFT steps')
    ap.add_argument('--out', default='runs/bench-copy-slots', help='folder for both planners (resumed if there)')
    ap.add_argument('--demos', type=int, default=30, help='generated tasks per app tried for family demonstrations (--data families)')
    ap.add_argument('--only', choices=('slots', 'plain'), help='run one planner in this process (the default runs both at once, one core each)')
    a = ap.parse_args()
    out = Path(a.out)/a.data
    if a.only: return run(out/a.only, a.only == 'slots', a.data, a.steps, a.demos)
    procs = [subprocess.Popen([sys.executable, __file__, '--data', a.data, '--steps', str(a.steps), '--demos', str(a.demos), '--out', a.out, '--only', k],
                              env={**os.environ, 'OMP_NUM_THREADS': '1'}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for k in ('slots', 'plain')]
    for p in procs:
        for line in p.stdout:
            if line.startswith('RESULT'): print(line.rstrip(), flush=True)
        p.wait()

if __name__ == '__main__': main()
