"""Is copying values the tiny planner's blocker? An experiment beside the miniature, never on test tasks.

Two tiny planners are bootstrapped side by side on the same demonstrations, 450 SFT steps each, as the miniature
bootstraps its baseline (`coda.mini.prepare.planner_texts` and `build_planner`, then `coda train sft` with its bootstrap settings): one plain, one with *copy slots*:
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
from fastcore.script import call_parse
from typing import Annotated
import yaml
from pathlib import Path


def family_tasks(seed:int, per_app:int, test:list)->list:
    "Generated tasks of the five demonstrable families (`coda.mini.teacher.template_oracle`), each with its oracle"
    from coda.mini.teacher import template_tasks
    return template_tasks(['Algebra', 'Astronomy', 'Biochem'], per_app, seed, avoid=test, oracle=True)

def run(out:Path, slots:bool, data:str, steps:int, demos:int=30):
    "Bootstrap one planner into `out` (resumable) and evaluate it; prints its successes"
    from coda.pipeconfig import load_config
    from coda.files import TrainedModel
    from coda.pipeline import Pipeline
    from coda.mini.teacher import template_tasks
    from coda.mini.prepare import build_planner, planner_texts
    from coda.mini.oracle import record_demonstrations
    from coda.mini.slots import SlotChat
    from coda.plugins import load_codec
    from coda.judge import checker_judgments
    from coda.envs.scidesk import scidesk_tasks, SciDesk
    from coda.agent import AgentConfig
    from coda.sft import add_sft_args, run_sft_command
    from coda.models import LocalChat
    from coda.mini.grounder import A11yGrounder
    from coda.rollout import evaluate
    cfg, t0 = load_config('params/mini.yaml', run=str(out)), time.time()   # the miniature's sizes and tasks
    apps = list(cfg.tasks.apps)
    test = Pipeline(cfg, dry_run=True, progress=False, log=lambda *a: None).tasks('test')
    seed, train = [t for t in scidesk_tasks(apps) if t.split == 'seed'], [t for t in scidesk_tasks(apps) if t.split == 'train']
    demo_tasks = family_tasks(7, demos, test) if data == 'families' else []
    seen = {t.instruction for t in demo_tasks}
    fresh = [t for t in (family_tasks(99, 12, test) if data == 'families' else template_tasks(apps, 4, 99, avoid=test)) if t.instruction not in seen]
    runs = [out/'seed'] + ([out/'demos'] if demo_tasks else [])
    for run_dir, tasks in zip(runs, (seed, demo_tasks)):
        if not run_dir.exists():
            record_demonstrations(tasks, run_dir, workers=1)
            checker_judgments(run_dir)
    M, codec = out/'models', cfg.models.planner.codec if slots else None   # the miniature's planner reads through its codec: the copy slots
    if not (M/'random'/'config.json').exists():   # the miniature's bootstrap (coda.mini.prepare): its tokenizer texts, planner and SFT settings
        build_planner(planner_texts(runs, train, load_codec(codec) if codec else None), M/'random', seed=cfg.seed, **cfg.prepare_args['planner'])
    if not (M/'baseline'/'config.json').exists():
        (M/'bootstrap.yaml').write_text(yaml.safe_dump({**cfg.prepare_args['bootstrap'], 'max_steps': steps, 'seed': cfg.seed, **({'codec': codec} if codec else {})}))
        run_sft_command(add_sft_args(argparse.ArgumentParser()).parse_args(
            ['--runs', *map(str, runs), '--judge', 'checker', '--model', str(M/'random'), '--out', str(M/'baseline'), '--config', str(M/'bootstrap.yaml'), '--resume']))
    name = 'slots' if slots else 'plain'
    print(f"{name}: {TrainedModel.read(M/'baseline', 'sft').info['rows']} demonstration turns, bootstrap done at {time.time() - t0:.0f} s", flush=True)
    for T in (1.0, 0.3):
        p = LocalChat(M/'baseline', defaults=dict(temperature=T), seed=0)
        a = cfg.agent
        ag = AgentConfig(obs=a.obs, planner_sampling={**a.planner_sampling, 'temperature': T}, executor_sampling=dict(a.executor_sampling), stuck_after=a.stuck_after)
        res = evaluate(fresh, SciDesk, SlotChat(p) if slots else p, A11yGrounder(), out/f'fresh-T{T}', n=2, workers=1, config=ag, progress=False, seed=0)
        ok = sum(r['score'] >= 1 for r in res['records'])
        print(f"RESULT {name} data={data} steps={steps} T={T}: {ok} of {len(res['records'])} episodes on {len(fresh)} fresh tasks succeed", flush=True)

@call_parse
def main(data:Annotated[str, {'choices': ('seed', 'families')}]='families',  # what the planners are bootstrapped on
         steps:int=450,             # bootstrap SFT steps
         out:str='runs/bench-copy-slots',   # folder for both planners (resumed if there)
         demos:int=30,              # generated tasks per app tried for family demonstrations (--data families)
         only:Annotated[str, {'choices': ('slots', 'plain')}]=None,  # run one planner in this process (the default runs both at once, one core each)
        ):
    "Is copying values the tiny planner's blocker? An experiment beside the miniature, never on test tasks"
    root = Path(out)/data
    if only: return run(root/only, only == 'slots', data, steps, demos)
    procs = [subprocess.Popen([sys.executable, __file__, '--data', data, '--steps', str(steps), '--demos', str(demos), '--out', out, '--only', k],
                              env={**os.environ, 'OMP_NUM_THREADS': '1'}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for k in ('slots', 'plain')]
    for p in procs:
        for line in p.stdout:
            if line.startswith('RESULT'): print(line.rstrip(), flush=True)
        p.wait()
