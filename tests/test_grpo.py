"""Decoupled GRPO on the tiny Qwen2.5-VL: the reward calls an executor over real HTTP (a scripted OpenAI-compatible
server, and the tiny model behind `transformers serve`); the planner's weights change, the executor's never do;
TRL's loss equals the written-out reference on the same tensors; `coda train grpo` trains, checkpoints and resumes."""
import hashlib, json, os, re, subprocess, sys, time
from pathlib import Path
import pytest
import torch
from agent_fixtures import ScriptedServer
from coda.actions import parse_action
from coda.envs.scidesk import SciDesk, scidesk_tasks
from coda.grpo import (build_grpo_dataset, DecoupledReward, train_grpo, recording_trainer, reference_loss, replay, load_planner)
from coda.judge import judgment_path
from coda.models import OpenAIChat, build_tiny_qwen25vl
from coda.prompts import split_planner
from coda.store import EpisodeWriter, _atomic_write

os.environ.setdefault('TRL_EXPERIMENTAL_SILENCE', '1')

def write_episode(root, task, replies, sample=0):
    "An episode folder as the agent writes one: one step per (planner reply, executor reply) pair on scidesk"
    env = SciDesk(); obs = env.reset(task)
    w = EpisodeWriter(Path(root)/'episodes'/task.app/task.id/str(sample), {'app': task.app, 'task': task.id, 'sample': sample,
                                                                         'instruction': task.instruction, 'steps': task.steps})
    for i, (pl, ex) in enumerate(replies):
        th, pa = split_planner(pl)
        acts = parse_action(ex, frame=(1288, 812), screen=(1280, 800)) if ex else parse_action(pa)
        w.add_step(dict(step=i, planner=pl, thought=th, planner_action=pa, executor=ex, kind='act', actions=[a.to_dict() for a in acts]), obs.png())
        obs = env.step(acts)
    w.add_final(obs.png()); w.finish({'app': task.app, 'task': task.id, 'sample': sample, 'status': 'done', 'score': env.evaluate(), 'steps': len(replies)})
    p = judgment_path(root, 'j', (task.app, task.id, sample)); p.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(p, json.dumps({'key': [task.app, task.id, sample], 'accepted': True, 'label': 1,
                                 'labels': {'positives': list(range(len(replies))), 'negative': None, 'clean_success': True}}).encode())

@pytest.fixture(scope='module')
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp('grpo')/'run'
    task = next(t for t in scidesk_tasks(['Algebra']) if t.id == 'A-01')
    write_episode(root, task, [("Thought: Click the expression field at the bottom.\nAction: click(start_box='(458,758)')",
                                "click(start_box='<|box_start|>(458,758)<|box_end|>')"),
                               ("Thought: Type the expression and press Enter.\nAction: type(content='17*23+4\\n')", "type(content='17*23+4\\n')")])
    return root

@pytest.fixture(scope='module')
def planner(tmp_path_factory):
    return build_tiny_qwen25vl(tmp_path_factory.mktemp('planner')/'tiny-planner')

def digest(folder):
    h = hashlib.sha256()
    for f in sorted(Path(folder).glob('*.safetensors')): h.update(f.read_bytes())
    return h.hexdigest()

def weights(model): return {k: v.detach().clone() for k, v in model.state_dict().items()}

def grounding_executor(body):
    "A scripted executor: clicks at a point derived from the thought's text, so different thoughts score differently"
    th = body['messages'][-1]['content'][0]['text'] if body['messages'][-1]['role'] == 'assistant' else ''
    n = int(hashlib.md5(th.encode()).hexdigest(), 16)
    return f"click(start_box='({n % 1288},{(n >> 12) % 812})')"

def test_dataset_and_replayed_prompt(run):
    ds = build_grpo_dataset(run, 'j')
    assert len(ds) == 2 and [len(x) for x in ds['images']] == [1, 2]
    assert json.loads(ds[1]['gold'])[0] == {'kind': 'type', 'text': '17*23+4', 'enter': True}
    pm = replay(ds[1]['episode'], 1).planner_messages()
    assert [m['role'] for m in pm] == ['system', 'user', 'assistant', 'user']
    assert pm[2]['content'][0]['text'].endswith("click(start_box='<|box_start|>(458,758)<|box_end|>')")

def test_one_grpo_step_calls_the_executor_over_http_and_trains_only_the_planner(run, planner, tmp_path):
    ds = build_grpo_dataset(run, 'j')
    before = weights(load_planner(planner)[0])
    with ScriptedServer(grounding_executor) as srv:
        ex = OpenAIChat(srv.url, 'executor', max_concurrency=8)
        rw = DecoupledReward(ex, continue_final=True)
        tr = train_grpo(ds.select([0]), planner, rw, tmp_path/'out', preset='coda', lora=False, trainer_cls=recording_trainer(),
                        max_steps=1, num_generations=4, per_device_train_batch_size=4, max_completion_length=16, learning_rate=5e-2, save_strategy='no')
        n_req = len(srv.requests)
    assert n_req == rw.calls >= 1 and rw.failures == 0
    assert all(b['continue_final_message'] and b['messages'][-1]['content'][0]['text'].endswith('\nAction: ') for b in srv.requests)
    rec = tr.records[-1]
    assert rec['inputs']['advantages'].abs().max() > 0, 'rewards did not differ within the group'
    assert abs(reference_loss(rec) - rec['loss']) < 1e-5
    after = weights(load_planner(tmp_path/'out'/'final')[0])
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and any('language_model' in k for k in changed)
    assert not any('visual' in k for k in changed), 'full fine-tuning keeps the vision tower frozen'
    import pandas as pd   # the step's success curve point: the share of completions whose executor action is the labelled one
    rows = pd.read_csv(tmp_path/'out'/'log.csv').dropna(subset=['reward'])
    assert len(rw.history) == len(rows) == 1 and len(rw.history[0]) == 4
    assert rows['match'].iloc[0] == sum(r >= 2 - 1e-9 for r in rw.history[0]) / 4

def test_grpo_against_a_served_tiny_executor(run, planner, served, tiny, tmp_path):
    "The executor is the tiny model behind `transformers serve`: it is called for every completion and its weights never change"
    ds = build_grpo_dataset(run, 'j')
    h0 = digest(tiny)
    rw = DecoupledReward(OpenAIChat(served, str(tiny), timeout=120, retries=1, max_concurrency=4), continue_final=False,
                         sampling=dict(temperature=0.0, max_tokens=8))
    t0 = time.perf_counter()
    tr = train_grpo(ds.select([0]), planner, rw, tmp_path/'out', preset='coda', lora=True,
                    max_steps=1, num_generations=4, per_device_train_batch_size=4, max_completion_length=12, learning_rate=1e-2, save_strategy='no')
    assert rw.calls >= 1 and rw.failures == 0 and digest(tiny) == h0
    assert (tmp_path/'out'/'final'/'adapter_config.json').exists() and (tmp_path/'out'/'log.csv').exists()
    print(f"GRPO step with a served executor: {time.perf_counter() - t0:.1f} s, {rw.calls} executor calls")

def test_train_grpo_command_checkpoints_and_resumes(run, planner, tmp_path):
    exe = Path(sys.executable).parent/'coda'
    cmd = [str(exe)] if exe.exists() else [sys.executable, '-c', 'from coda.cli import main; main()']
    with ScriptedServer(grounding_executor) as srv:
        base = cmd + ['train', 'grpo', '--app', 'Algebra', '--runs', str(run), '--judge', 'j', '--model', str(planner), '--out', str(tmp_path/'g'),
                      '--executor-url', srv.url, '--executor-model', 'executor', '--num-generations', '2', '--max-completion-length', '8',
                      '--save-steps', '1', '--lr', '1e-2']
        p = subprocess.run(base + ['--max-steps', '1'], capture_output=True, text=True, timeout=300, env={**os.environ, 'TRL_EXPERIMENTAL_SILENCE': '1'})
        assert p.returncode == 0, p.stderr[-3000:]
        assert (tmp_path/'g'/'checkpoint-1').exists() and 'done: 1 steps' in p.stdout
        p = subprocess.run(base + ['--max-steps', '2', '--resume'], capture_output=True, text=True, timeout=300, env={**os.environ, 'TRL_EXPERIMENTAL_SILENCE': '1'})
        assert p.returncode == 0, p.stderr[-3000:]
        assert 'done: 2 steps' in p.stdout and (tmp_path/'g'/'checkpoint-2').exists()
    import pandas as pd
    log = pd.read_csv(tmp_path/'g'/'log.csv')
    assert 'reward' in log and (tmp_path/'g'/'reward.png').exists()
    assert log['match'].between(0, 1).sum() >= 1          # the resumed call's step has its success share
