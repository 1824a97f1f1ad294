"""Is Stage 2's gain on held-out generated tasks the judged exploration's doing, or only more SFT on the demonstrations?

A control beside a finished miniature run (`runs/reproduce/table1` by default): the baseline fine-tuned with Stage 2's
recipe (`coda.pipeline.train_planner`: the same steps, learning rate, accumulation and seed) on the bootstrap's
demonstrations alone, no exploration rows, then evaluated on the run's held-out generated tasks with the run's
samples and seeds. Stage 2 trains on the judged rows *and* replays these demonstrations, so if this control reaches
Stage 2's held-out rate, replay explains the gain; if it stays at the baseline's, the judged rows do.

Usage: python bench/replay_control.py [--run runs/reproduce/table1] [--out <run>/replay-control]
It prints the held-out successes of the baseline, Stage 2, the oracle-judge Stage 2 (when the run has it) and the
control, per task and in all. Two to three minutes on 2 cores.
"""
import argparse, json
from pathlib import Path


def successes(run:Path)->dict:
    "Checker-passed episodes per (app, task id) in one evaluation run (every finished or failed episode counts)"
    from coda.store import RunStore
    from coda.metrics import is_success
    out = {}
    for r in RunStore(run).records():
        k = (r['app'], r['task'])
        n, ok = out.get(k, (0, 0))
        out[k] = (n + 1, ok + is_success(r.get('score'), r.get('status')))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--run', default='runs/reproduce/table1', help='a finished miniature run folder')
    ap.add_argument('--out', default='', help="where the control's model and episodes go (default: <run>/replay-control)")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(2)
    from coda.paths import from_root
    from coda.pipeline import MiniConfig, train_planner, rollout, miniature_tasks
    root = from_root(a.run); out = Path(a.out) if a.out else root/'replay-control'
    params = json.loads((root/'params.json').read_text())
    cfg = MiniConfig(**{**params, 'apps': tuple(params['apps']), 'run': str(root)})
    demos = [root/'seed'] + ([root/'demos'] if (root/'demos').exists() else [])
    held = miniature_tasks(cfg)['heldout']   # the held-out generated tasks as run_miniature draws them
    stored = json.loads((root/'stages'/'generate.json').read_text())['heldout']
    assert [t.instruction for t in held] == stored, 'the held-out tasks differ from the run\'s: other code or settings'
    model = out/'model'
    if not (model/'config.json').exists():
        info = train_planner(cfg, demos, 'checker', root/'models'/'baseline', model, cfg.sft_steps, cfg.sft_lr)
        print(f"control: the baseline fine-tuned on {info['rows']} demonstration turns, {cfg.sft_steps} steps")
    rollout(cfg, model, held, out/'heldout', cfg.heldout_samples, progress=True, name='heldout_replay_control')
    rows = {'baseline': root/'heldout'/'baseline', 'stage2': root/'heldout'/'stage2', 'stage2_oracle': root/'heldout'/'stage2_oracle',
            'replay only (control)': out/'heldout'}
    res = {k: successes(p) for k, p in rows.items() if p.exists()}
    print(f"\n{'held-out task':52s}" + ''.join(f'{k:>24s}' for k in res))
    for t in held:
        print(f'{t.instruction[:50]:52s}' + ''.join(f"{'%d/%d' % tuple(reversed(r.get((t.app, t.id), (0, 0)))):>24s}" for r in res.values()))
    tot = {k: (sum(n for n, _ in r.values()), sum(ok for _, ok in r.values())) for k, r in res.items()}
    print(f"{'all':52s}" + ''.join(f"{'%d/%d' % (ok, n):>24s}" for n, ok in tot.values()))


if __name__ == '__main__': main()
