"""Is Stage 2's gain on held-out generated tasks the judged exploration's doing, or only more SFT on the demonstrations?

A control beside a finished miniature run of `coda pipeline` (`runs/reproduce` by default): the baseline fine-tuned
with Stage 2's recipe (the run's `stage2` settings: the same steps, learning rate, accumulation, seed and launcher,
`coda train sft` under `accelerate launch`) on the replayed demonstrations alone, no exploration rows, then evaluated
on the run's held-out generated tasks with the run's samples and seeds, served like every row. Stage 2 trains on the
judged rows *and* replays these demonstrations, so if this control reaches Stage 2's held-out rate, replay explains
the gain; if it stays at the baseline's, the judged rows do.

Usage: python bench/replay_control.py [--run runs/reproduce] [--out <run>/replay-control]
It prints the held-out successes of the baseline, Stage 2, the checker-label Stage 2 (when the run has it) and the
control, per task and in all. Two to three minutes on 2 cores.
"""
from fastcore.script import call_parse
from pathlib import Path


def successes(runs)->dict:
    "Checker-passed episodes per (app, task id) in evaluation runs (every finished or failed episode counts)"
    from coda.store import RunStore
    from coda.metrics import is_success
    out = {}
    for run in runs:
        for r in RunStore(run).records():
            k = (r['app'], r['task'])
            n, ok = out.get(k, (0, 0))
            out[k] = (n + 1, ok + is_success(r.get('score'), r.get('status')))
    return out


@call_parse
def main(run:str='runs/reproduce',  # a finished miniature run of coda pipeline
         out:str='',                # where the control's model and episodes go (default: <run>/replay-control)
        ):
    "The replay control: Stage 2 trained on the replayed demonstrations alone, evaluated as the stage2 row"
    from coda.paths import from_root
    from coda.pipeconfig import ModelRef, Record, load_config, config_dict, config_changes
    from coda.pipeline import Pipeline, expand_runs, sft_summary
    root = from_root(run)
    out = Path(out) if out else root/'replay-control'
    rec = Record.read(root).data
    cfg = load_config(rec['config_file'], run=str(root))
    if changed := config_changes(rec['config'], config_dict(cfg)):
        raise SystemExit(f"{rec['config_file']} has changed since the run ({changed}): the control would not use the run's recipe")
    p = Pipeline(cfg, progress=True)
    st = dict(cfg.stage2)
    replay = expand_runs(st.pop('replay', []), root)
    base = p.cfg.models.planner                   # its paths hold the run folder
    model = out/'model'
    if not (model/'config.json').exists():
        argv = p.train_command(['train', 'sft', '--runs', *replay, '--judge', 'checker', '--model', base.path, '--out', model,
                                '--config', p.write_args(out/'args.yaml', {**st, **({'codec': base.codec} if base.codec else {}), 'seed': cfg.seed}), '--resume'])
        p.launch('replay_control', argv, 'SFT on the demonstrations alone')
        print(f"control: the baseline fine-tuned on the demonstrations alone ({sft_summary(model)})")
    held = p.tasks('heldout')
    try: p.rollout(('replay-control', ModelRef(path=str(model), codec=base.codec)), held, out/'heldout', cfg.evaluation.heldout_samples, 'replay_control')
    finally: p.servers.close()
    rows = {r: list(rec['stages'][f'eval_heldout_{r}']['outputs']['runs'].values()) for r in ('baseline', 'stage2', 'stage2_checker')
            if f'eval_heldout_{r}' in rec['stages']}
    res = {**{k: successes(v) for k, v in rows.items()}, 'replay only (control)': successes([out/'heldout'])}
    print(f"\n{'held-out task':52s}" + ''.join(f'{k:>24s}' for k in res))
    for t in held:
        print(f'{t.instruction[:50]:52s}' + ''.join(f"{'%d/%d' % tuple(reversed(r.get((t.app, t.id), (0, 0)))):>24s}" for r in res.values()))
    tot = {k: (sum(n for n, _ in r.values()), sum(ok for _, ok in r.values())) for k, r in res.items()}
    print(f"{'all':52s}" + ''.join(f"{'%d/%d' % (ok, n):>24s}" for n, ok in tot.values()))
