"""coda.judge_train: judge SFT rows from a checker-labelled run, from another judge's decisions and from
AgentRewardBench's layout; a rank-8 LoRA judge on the tiny Qwen2.5-VL, merged, served by LocalChat to
coda.judge.Judge; `coda train judge` through argparse; and the same training under `accelerate launch` with two
CPU processes."""
from coda.procs import free_port
import argparse, io, json, os, subprocess, sys, time
from pathlib import Path
import pytest
from PIL import Image

from coda.aio import run_sync
from coda.envs.scidesk import scidesk_tasks
from coda.judge import Judge, arb_annotations, checker_judgments, load_trajectory, parse_verdict, preset
from coda.store import judgment_path
from coda.mini.tinyjudge import record_mixed, run_outcomes
from coda.store import RunStore
from coda.judge_train import (LORA_R, UNSCORED, add_judge_args, arb_sft_rows, balance_rows, judge_sft_rows,
                              run_judge_command, train_judge, write_arb_trajectory)


def _png(color=(240, 240, 240)):
    b = io.BytesIO()
    Image.new('RGB', (640, 400), color).save(b, 'PNG')
    return b.getvalue()


def _file(run, name, key, accepted, verdict, votes):
    p = judgment_path(run, name, key)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(dict(key=list(key), judge=name, accepted=accepted, label=int(accepted), votes=votes, verdict=verdict, n_steps=1)))


@pytest.fixture(scope='module')
def mixed(tmp_path_factory):
    "A checker-labelled mixed run of six scidesk tasks, plus an episode that ended in an error and one of a task without checks"
    run = tmp_path_factory.mktemp('judge-train')/'mixed'
    record_mixed([t for t in scidesk_tasks() if t.split == 'train'][::5][:6], run, p_fail=0.5, seed=1)
    store = RunStore(run)
    for task, status in [('X-err', 'error'), ('X-uns', UNSCORED)]:
        w = store.start('Algebra', task, 0, {'instruction': 'Store 7 in a variable named z.'})
        w.add_step({'step': 0, 'thought': 'Click the input line.', 'kind': 'act', 'actions': []}, _png())
        w.add_final(_png((250, 250, 250)))
        w.finish({'stop': 'DONE', 'status': status, 'score': None if status == UNSCORED else 0.0, 'steps': 1})
    checker_judgments(run)
    _file(run, 'checker', ('Algebra', 'X-uns', 0), False, None, [])     # as an older checker_judgments filed unscored episodes
    return run


def test_checker_rows_balanced_with_the_first_error_and_no_broken_or_unscored_episode(mixed):
    out = run_outcomes(mixed)
    scored = out[~out.task.str.startswith('X-')]
    rows, counts = judge_sft_rows(mixed, resolution=(320, 200))
    assert counts.loc['total', ['episodes', 'successes', 'skipped']].tolist() == [len(scored), int((scored.score >= 1).sum()), 2]
    assert not any(r['task'].startswith('X-') for r in rows)
    assert sum(r['source'] == 'success' for r in rows) == sum(r['source'] == 'failure' for r in rows)
    noise = json.loads((mixed/'noise.json').read_text())
    firsts = 0
    for r in rows:
        assert len(r['images']) == sum(p['type'] == 'image' for p in r['messages'][0]['content']) >= 2
        v = parse_verdict(r['messages'][-1]['content'][0]['text'])
        assert v.parsed and v.correct == (r['source'] == 'success')
        n = noise[f"{r['app']}/{r['task']}"]
        if not v.correct and n['kind'] and n['first_error'] <= r['step']:
            assert (v.first_error, v.error_type) == (n['first_error'], n['error_type'])
            firsts += 1
    assert firsts, 'no failure took its first error from noise.json'
    unbalanced, _ = judge_sft_rows(mixed, resolution=(320, 200), balance=False)
    assert balance_rows(unbalanced, 0) == rows


def test_a_codec_encodes_the_prompt_only(mixed):
    class Upper:
        def encode(self, messages):
            return [{**m, 'content': [{**p, 'text': p['text'].upper()} if p.get('text') else p for p in m['content']]} for m in messages]
        def decode(self, text, messages): return text
    plain, _ = judge_sft_rows(mixed, balance=False, max_frames=2)
    coded, _ = judge_sft_rows(mixed, balance=False, max_frames=2, codec=Upper())
    for p, c in zip(plain, coded):
        assert c['messages'][0]['content'][0]['text'] == p['messages'][0]['content'][0]['text'].upper()
        assert c['messages'][-1] == p['messages'][-1] and c['images'] == p['images']


def test_another_judges_decisions_are_the_truth_unscored_episodes_included(mixed):
    wrong = dict(correct=False, redundant=[], optimized=False, first_error=1, error_type='clicked the output', correct_action='click the input',
                 parsed=True, error='')
    unparsed = dict(correct=False, redundant=[], optimized=None, first_error=None, error_type='', correct_action='', parsed=False, error='no literal')
    ok = run_outcomes(mixed).query('score >= 1').iloc[0]
    _file(mixed, 'teacher', ('Algebra', 'X-uns', 0), False, wrong, [{'reply': '...'}])
    _file(mixed, 'teacher', ('Algebra', 'X-err', 0), False, wrong, [{'reply': '...'}])
    _file(mixed, 'teacher', (ok.app, ok.task, 0), False, unparsed, [{'reply': '...'}])   # an unreadable rejection: the decision's verdict
    rows, counts = judge_sft_rows(mixed, 'teacher', balance=False)
    got = {r['task']: parse_verdict(r['messages'][-1]['content'][0]['text']) for r in rows}
    assert set(got) == {'X-uns', ok.task} and counts.loc['total', 'skipped'] == 1
    assert (got['X-uns'].first_error, got['X-uns'].correct_action) == (1, 'click the input')
    assert not got[ok.task].correct and got[ok.task].first_error == rows[[r['task'] for r in rows].index(ok.task)]['step']


def test_lora_r8_judge_is_merged_and_judges_through_localchat(mixed, tiny, tmp_path):
    from coda.models import LocalChat
    rows, _ = judge_sft_rows(mixed, resolution=(320, 200), max_frames=2)
    t0 = time.time()
    model = train_judge(rows, tiny, tmp_path/'judge', steps=2, batch_size=2, lr=1e-3, max_frames=2, resolution=(320, 200), cpu=True)
    print(f"LoRA judge: {len(rows)} rows, 2 steps, merged, in {time.time() - t0:.1f} s")
    assert model == tmp_path/'judge'/'merged' and (model/'model.safetensors').exists() and (model/'tokenizer.json').exists()
    adapter = json.loads((tmp_path/'judge'/'model'/'adapter_config.json').read_text())
    assert adapter['r'] == LORA_R == 8 and adapter['lora_alpha'] == 16
    info = json.loads((tmp_path/'judge'/'judge.json').read_text())
    assert (info['lora'], info['lora_r'], info['steps'], info['rows'], info['processes'], info['runs']) == (True, 8, 2, len(rows), 1, [str(mixed)])
    assert not list((tmp_path/'judge'/'model').glob('checkpoint-*'))
    d = run_sync(Judge(LocalChat(model), preset('single', max_tokens=8, max_frames=2)).judge(load_trajectory(RunStore(mixed).episode_dirs()[0])))
    assert len(d.votes) == 1 and d.votes[0]['reply'] is not None and not d.error
    assert train_judge(rows, tiny, tmp_path/'judge') == model                     # finished: reused


def test_run_judge_command_from_argparse(mixed, tiny, tmp_path):
    (tmp_path/'judge.yaml').write_text('lora_r: 4\nsteps: 5\nlr: 0.001\n')
    ap = add_judge_args(argparse.ArgumentParser(prog='coda train judge'))
    a = ap.parse_args(['--runs', str(mixed), '--labels', 'checker', '--base', str(tiny), '--out', str(tmp_path/'cli'), '--config', str(tmp_path/'judge.yaml'),
                       '--steps', '1', '--batch-size', '2', '--frames', '2', '--resolution', '320x200', '--cpu'])
    assert (a.arb_split, a.lora_r, a.no_lora) == ('dev', None, False)
    model = run_judge_command(a)
    info = json.loads((tmp_path/'cli'/'judge.json').read_text())
    assert model == tmp_path/'cli'/'merged'
    assert (info['steps'], info['lora_r'], info['lr'], info['max_frames'], info['resolution'], info['judge']) == (1, 4, 0.001, 2, [320, 200], 'checker')
    full = run_judge_command(ap.parse_args(['--runs', str(mixed), '--base', str(tiny), '--out', str(tmp_path/'full'), '--no-lora', '--steps', '1',
                                            '--frames', '2', '--cpu']))
    assert full == tmp_path/'full'/'model' and json.loads((tmp_path/'full'/'judge.json').read_text())['lora'] is False
    slots = run_judge_command(ap.parse_args(['--runs', str(mixed), '--base', str(tiny), '--out', str(tmp_path/'slots'), '--steps', '1', '--frames', '2',
                                             '--codec', 'coda.mini.slots.SlotCodec', '--cpu']))   # loaded by coda.plugins.load_codec
    assert json.loads((slots.parent/'judge.json').read_text())['codec'] == 'coda.mini.slots.SlotCodec'
    with pytest.raises(SystemExit, match='nothing to train on'): run_judge_command(ap.parse_args(['--base', str(tiny), '--out', str(tmp_path/'x')]))
    with pytest.raises(SystemExit): ap.parse_args(['--base', 'b', '--out', 'o', '--arb-split', 'test'])


def test_arb_rows_from_a_folder_in_its_layout(tmp_path):
    try: dev = arb_annotations('dev')
    except FileNotFoundError:
        if os.environ.get('CI') == 'true': pytest.fail('make setup installs agent-reward-bench (--no-deps)')
        pytest.skip('agent-reward-bench is not installed')
    labelled = dev[dev.label.notna()]
    succ, fail, bad = labelled[labelled.label == 1].iloc[0], labelled[labelled.label == 0].iloc[0], labelled[labelled.label == 0].iloc[1]
    for r in (succ, fail, bad): write_arb_trajectory(tmp_path, r, n_steps=3)
    p = tmp_path/'cleaned'/bad['benchmark']/bad['model_name']/bad['exp_name']/f"{bad['task_id']}.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), 'valid': False}))                # invalid: skipped as ARB's runner does
    rows, counts = arb_sft_rows(tmp_path, balance=False, max_frames=2)
    assert counts.loc['total', ['episodes', 'successes', 'failures', 'skipped']].tolist() == [2, 1, 1, len(labelled) - 2]
    by = {r['key']: parse_verdict(r['messages'][-1]['content'][0]['text']) for r in rows}
    s, f = (by[f"arb|{r['benchmark']}|{r['model_name']}|{r['task_id']}"] for r in (succ, fail))   # one task, several agents: the key tells them apart
    assert s.correct and not f.correct and f.first_error == 3
    assert s.optimized == (not succ['trajectory_optimality'].startswith(('1.', '2.')))
    assert all(len(r['images']) == 2 and r['app'] in {succ['benchmark'], fail['benchmark']} for r in rows)
    assert len(arb_sft_rows(tmp_path)[0]) == 2                                          # balanced: one of each already
    with pytest.raises(ValueError, match="evaluates on 'test'"): arb_sft_rows(tmp_path, 'test')
    with pytest.raises(ValueError): arb_sft_rows(tmp_path, None)




SCRIPT = '''
import sys
from pathlib import Path
from accelerate import PartialState
from coda.judge_train import train_judge
run, base, out = sys.argv[1:4]
model = train_judge([run], base, out, steps=2, batch_size=1, lr=1e-3, max_frames=2, resolution=(320, 200), cpu=True, save_steps=1)
s = PartialState()
Path(out, f'returned-{s.process_index}.txt').write_text(str(model))
'''


def test_train_judge_under_accelerate_launch_with_two_processes(mixed, tiny, tmp_path):
    "Every process trains its shard; only the main one merges and writes judge.json; both return the merged folder"
    from coda.models import LocalChat
    script = tmp_path/'train_judge.py'
    script.write_text(SCRIPT)
    out = tmp_path/'ddp'
    # `--cpu --num_processes 2` would start one process (accelerate's CPU launcher wants mpirun for more); `--multi_gpu` starts two
    # under torchrun, and on CPU (no visible GPU, cpu=True) they form one MULTI_CPU job over gloo
    cmd = [str(Path(sys.executable).parent/'accelerate'), 'launch', '--multi_gpu', '--num_processes', '2', '--num_machines', '1', '--mixed_precision', 'no',
           '--dynamo_backend', 'no', '--main_process_port', str(free_port()), str(script), str(mixed), str(tiny), str(out)]
    t0 = time.time()
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'OMP_NUM_THREADS': '1', 'CUDA_VISIBLE_DEVICES': ''}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    secs = time.time() - t0
    assert p.returncode == 0, p.stderr[-4000:]
    print(f"accelerate launch, 2 CPU processes, 2 steps + merge: {secs:.1f} s")
    info = json.loads((out/'judge.json').read_text())
    assert info['processes'] == 2 and info['steps'] == 2 and info['lora_r'] == 8
    assert [(out/f'returned-{i}.txt').read_text() for i in range(2)] == [str(out/'merged')] * 2
    assert not list((out/'model').glob('checkpoint-*')) and (out/'merged'/'model.safetensors').exists()
    assert run_sync(LocalChat(out/'merged').chat([{'role': 'user', 'content': 'judge this'}], max_tokens=4)).completion_tokens > 0
