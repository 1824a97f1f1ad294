"""Decoupled GRPO on the tiny Qwen2.5-VL: the reward calls an executor over real HTTP (a scripted OpenAI-compatible
server, and the tiny model behind `transformers serve`); the planner's weights change, the executor's never do;
TRL's loss equals the written-out reference on the same tensors; prompts of different lengths share a step with the
log-probs each has alone; a planner codec (copy slots) encodes the prompts and decodes the completions;
`run_grpo_command` takes a YAML, flags and a codec, and trains in two processes under `accelerate launch`;
`coda train grpo` trains, checkpoints and resumes."""
import argparse, hashlib, json, os, re, socket, subprocess, sys, time
from pathlib import Path
import pytest, torch
from agent_fixtures import ScriptedServer
from coda.envs.scidesk import SciDesk, scidesk_tasks
from coda.grpo import (build_grpo_dataset, DecoupledReward, train_grpo, recording_trainer, reference_loss, load_planner,
                       encode_grpo_dataset, add_grpo_args, run_grpo_command)
from coda.records import replay, Judgment, Labels
from coda.models import OpenAIChat
from coda.tiny import build_tiny_qwen25vl
from coda.store import write_scripted_episode, file_judgment, read_episode

os.environ.setdefault('TRL_EXPERIMENTAL_SILENCE', '1')

def write_episode(root, task, replies, sample=0):
    "An episode folder as the agent writes one, one step per (planner reply, executor reply) pair on scidesk, judged a success by judge 'j'"
    write_scripted_episode(root, task, replies, SciDesk(), sample, stop=None)
    file_judgment(root, Judgment(key=(task.app, task.id, sample), judge='j', accepted=True, label=1, labels=Labels.success(len(replies))), fsync=False)

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
    pm = replay(read_episode(ds[1]['episode']), 1).planner_messages()
    assert [m['role'] for m in pm] == ['system', 'user', 'assistant', 'user']
    assert pm[2]['content'][0]['text'].endswith("click(start_box='<|box_start|>(458,758)<|box_end|>')")

def open_fds()->int: return len(os.listdir('/proc/self/fd'))

def reward_batch(ds, G:int)->dict:
    "TRL's keyword arguments for one state's G completions (each a different thought)"
    row = ds.select_columns(['episode', 'gold'])[0]   # without decoding the row's images
    return dict(completions=[[{'role': 'assistant', 'content': f'Thought: click the field, variant {i}\nAction: click'}] for i in range(G)],
                episode=[row['episode']] * G, step=[0] * G, gold=[row['gold']] * G)

def test_a_thousand_reward_calls_leave_the_descriptors_flat(run):
    "TRL calls the reward from sync code once per batch: one loop and one client serve every call, no socket left behind"
    ds, G = build_grpo_dataset(run, 'j'), 2
    with ScriptedServer(grounding_executor) as srv:
        ex = OpenAIChat(srv.url, 'executor', max_concurrency=G)
        rw = DecoupledReward(ex)
        batch = reward_batch(ds, G)
        for _ in range(20): rw(**batch)   # warm: the connections are open
        client, before = next(iter(ex._sessions.values()))[0], open_fds()
        for _ in range(1000): assert len(rw(**batch)) == G
        after = open_fds()
        assert rw.failures == 0 and len(srv.requests) == 1020 * G
        assert after <= before + 2, f"{after - before} descriptors more after 1,000 reward calls"
        assert len(ex._sessions) == 1 and next(iter(ex._sessions.values()))[0] is client   # no client set up per call
        rw.close()

def test_closing_the_reward_closes_its_connections(run):
    ds, G = build_grpo_dataset(run, 'j'), 4
    with ScriptedServer(grounding_executor) as srv:
        base = open_fds()
        with DecoupledReward(OpenAIChat(srv.url, 'executor', max_concurrency=G)) as rw:
            rw(**reward_batch(ds, G))
            assert open_fds() >= base + G   # G keep-alive connections (both ends in this process)
            client = next(iter(rw.executor._sessions.values()))[0]
        assert client.is_closed and not rw.executor._sessions
        end = time.monotonic() + 3
        while open_fds() > base and time.monotonic() < end: time.sleep(0.01)   # the server's ends close a moment later
        assert open_fds() <= base
        assert rw(**reward_batch(ds, 1)) and rw.failures == 0   # called again: new connections

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

def varied(completions, **kw):
    "A reward that differs within a group (random weights rarely write a click the executor could ground)"
    return [float(len(c[-1]['content']) % 3) for c in completions]

def alone_logps(tr, row, prompt_ids, completion_ids):
    "Per-token log-probs of `completion_ids` after the dataset row's prompt encoded alone (no padding), as TRL's loss computes them"
    proc = tr.processing_class
    x = proc(images=row['images'], text=[proc.apply_chat_template(row['prompt'], add_generation_prompt=True, tokenize=False)], return_tensors='pt')
    assert torch.equal(x['input_ids'][0], prompt_ids), 'the record holds this prompt'
    ids = torch.cat([x['input_ids'], completion_ids[None]], 1)
    mm = torch.cat([x['mm_token_type_ids'], torch.zeros_like(completion_ids)[None]], 1)
    with torch.no_grad():
        logp, _, _ = tr._get_per_token_logps_and_entropies(tr.model, ids, torch.ones_like(ids), len(completion_ids), pixel_values=x['pixel_values'],
                                                           image_grid_thw=x['image_grid_thw'], num_images=[len(row['images'])], mm_token_type_ids=mm)
    return logp[0]

def test_padded_prompts_have_the_log_probs_of_each_prompt_alone(run, planner, tmp_path):
    "Two prompts of different lengths (1 and 2 screenshots) in one batch: each completion's log-probs are those of its prompt alone"
    ds = build_grpo_dataset(run, 'j')
    tr = train_grpo(ds, planner, varied, tmp_path/'out', lora=False, trainer_cls=recording_trainer(), max_steps=1, num_generations=2,
                    per_device_train_batch_size=4, max_completion_length=8, learning_rate=0.0, save_strategy='no')   # lr 0: the record's weights stay
    i, logp = tr.records[-1]['inputs'], tr.records[-1]['logp']
    lengths = i['prompt_mask'].sum(1).tolist()
    assert len(set(lengths)) == 2, 'both prompts are in the batch, left-padded to the longer one'
    vs = tr.processing_class.tokenizer.convert_tokens_to_ids('<|vision_start|>')
    rows = {len(r['images']): r for r in ds}
    for b in range(len(lengths)):
        p = i['prompt_ids'][b][i['prompt_mask'][b].bool()]
        n = int(i['completion_mask'][b].sum())
        alone = alone_logps(tr, rows[int((p == vs).sum())], p, i['completion_ids'][b][:n])
        # right-padded (the bug) the shorter prompt's rows differed by 2.5e-4; left-padded by 5e-7
        assert (alone - logp[b][:n]).abs().max().item() < 1e-5, f'row {b} (prompt of {lengths[b]} tokens): padded log-probs differ from alone'

def test_grpo_steps_with_two_prompts_of_different_lengths(run, planner, tmp_path):
    "The default batch holds 2 prompts per step: mm_token_type_ids mark exactly the image pads of the left-padded ids, and TRL's loss is the reference"
    ds = build_grpo_dataset(run, 'j')
    before = weights(load_planner(planner)[0])
    tr = train_grpo(ds, planner, varied, tmp_path/'out', preset='coda', lora=False, trainer_cls=recording_trainer(), max_steps=2, num_generations=2,
                    max_completion_length=8, learning_rate=5e-2, save_strategy='no')
    assert tr.args.per_device_train_batch_size == 4, 'default: two prompts per step'
    pad = tr.model.config.image_token_id
    for rec in tr.records:
        i = rec['inputs']
        ids, mm = i['prompt_ids'], i['mm_token_type_ids'][:, :i['prompt_ids'].size(1)]
        assert len(set(i['prompt_mask'].sum(1).tolist())) == 2
        assert torch.equal(ids == pad, mm == 1), 'mm_token_type_ids misaligned with the left-padded prompt ids'
        assert abs(reference_loss(rec) - rec['loss']) < 1e-5
    assert tr.records[-1]['loss'] != 0, 'the KL term makes the second step loss non-zero'
    after = weights(load_planner(tmp_path/'out'/'final')[0])
    assert any(not torch.equal(before[k], after[k]) for k in before)

class Typist:
    "An executor stand-in: types the text quoted in the thought, then Enter"
    async def chat(self, messages, **kw):
        from coda.models import Reply
        m = re.search(r"'([^']*)'", messages[-1]['content'][0]['text'])
        return Reply(f"type(content='{m[1] if m else ''}\\n')", None, None, 0.0, 1, 'typist', 'typist')

class SlotsAsCodec:
    "The miniature's copy slots (coda.mini.slots) written as a planner codec from its public functions"
    def encode(self, messages):
        from coda.mini.slots import delex_messages, slot_values, instruction_of
        return delex_messages(messages, slot_values(instruction_of(messages)))
    def decode(self, text, messages):
        from coda.mini.slots import relex, slot_values, instruction_of
        return relex(text, slot_values(instruction_of(messages)))

def test_copy_slots_are_a_codec(run):
    "encode_grpo_dataset and DecoupledReward(codec=...) do what delex_grpo_row and SlotReward do"
    from coda.mini.slots import delex_grpo_row, SlotReward
    ds = build_grpo_dataset(run, 'j')
    enc = encode_grpo_dataset(ds, SlotsAsCodec())
    assert enc['prompt'] == ds.map(delex_grpo_row)['prompt'] and enc['prompt'] != ds['prompt']
    assert enc['gold'] == ds['gold'] and [len(x) for x in enc['images']] == [1, 2]
    done = [[{'role': 'assistant', 'content': f"Thought: Type '{t}' and press Enter.\nAction: type"}] for t in ('<v0>*<v1>+<v2>', '<v0>*<v1>', '17*23+4')]
    kw = dict(episode=[ds[1]['episode']] * 3, step=[1] * 3, gold=[ds[1]['gold']] * 3)
    rs = DecoupledReward(Typist(), codec=SlotsAsCodec())(completions=done, **kw)
    assert rs == SlotReward(Typist())(completions=done, **kw) and rs[0] == rs[2] == 2.0 > rs[1]

class TaggedCodec:
    "A test codec: the planner reads 'TASK: ' for 'Task: '; decoding marks the completion, so the executor shows that it read the decoded text"
    def __init__(self): self.requests = []
    def encode(self, messages):
        return [{**m, 'content': [{**p, 'text': p['text'].replace('Task: ', 'TASK: ')} if p.get('text') else p for p in m['content']]} for m in messages]
    def decode(self, text, messages):
        self.requests.append(messages)
        return 'decoded ' + text

def test_run_grpo_command_with_a_yaml_flags_and_a_codec(run, planner, tmp_path, capsys):
    "The YAML's GRPOConfig fields and coda keys apply, the flags given win, the codec encodes the prompts and decodes the completions"
    cfg = tmp_path/'grpo.yaml'
    cfg.write_text("preset: trl\nlora: false\nfreeze_vision: false\npoint_scale: 2.0\nexecutor_concurrency: 3\nno_continue: true\n"
                   "num_generations: 4\nmax_steps: 5\nmax_completion_length: 8\nsave_strategy: 'no'\n")
    codec = TaggedCodec()
    with ScriptedServer(grounding_executor) as srv:
        a = add_grpo_args(argparse.ArgumentParser()).parse_args([
            '--app', 'Algebra', '--runs', str(run), '--judge', 'j', '--model', str(planner), '--out', str(tmp_path/'g'), '--config', str(cfg),
            '--executor-url', srv.url, '--executor-model', 'executor', '--num-generations', '2', '--max-steps', '1', '--lr', '1e-2',
            '--temperature', '0.7', '--top-p', '0.9', '--seed', '3', '--shuffle'])
        a.codec = codec   # the Python API takes a codec object; `--codec` names one for coda.plugins.load_codec
        tr = run_grpo_command(a)
        requests = list(srv.requests)
    out = capsys.readouterr().out
    assert out.count('done: 1 steps; model in') == 1 and '2 positive steps of Algebra' in out
    c = tr.args
    assert (c.num_generations, c.max_steps, c.per_device_train_batch_size, c.learning_rate) == (2, 1, 4, 1e-2)   # flags over the YAML; 2 prompts a step
    assert (c.temperature, c.top_p, c.seed, c.max_completion_length, c.beta, c.loss_type) == (0.7, 0.9, 3, 8, 0.0, 'dapo')   # preset trl
    rw = tr.reward_funcs[0]
    assert (rw.point_scale, rw.executor.max_concurrency, rw.continue_final, rw.codec) == (2.0, 3, False, codec)
    assert any(p.requires_grad for n, p in tr.model.named_parameters() if 'visual' in n), 'freeze_vision: false'
    assert all('TASK: ' in json.dumps(p) and 'Task: ' not in json.dumps(p) for p in tr.train_dataset['prompt'])
    assert len(codec.requests) == 4 and len(requests) == rw.calls >= 1 and not any(b.get('continue_final_message') for b in requests)
    assert all(b['messages'][-1]['content'][0]['text'].startswith('decoded ') for b in requests)
    assert all(m[-1]['content'][-1]['text'].startswith('Task: ') for m in codec.requests), 'decoded with the plain planner messages'
    assert (tmp_path/'g'/'final'/'model.safetensors').exists() and (tmp_path/'g'/'log.csv').exists()

LAUNCHED = """
import argparse, os, sys
import coda.grpo as g
write_curves = g.write_curves
def counted(*a, **kw):   # who writes log.csv and reward.png
    with open(sys.argv[1], 'a') as f: f.write(os.environ.get('RANK', '?') + '\\n')
    return write_curves(*a, **kw)
g.write_curves = counted
tr = g.run_grpo_command(g.add_grpo_args(argparse.ArgumentParser()).parse_args(sys.argv[2:]))
scored = len(tr.reward_funcs[0].history[0])   # this process's completions of a step
print(f'rank {tr.args.process_index} of {tr.args.world_size}: {tr.state.global_step} steps, {scored} completions scored', flush=True)
"""

def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]

def test_two_processes_train_together_and_write_once(run, planner, tmp_path):
    "Two CPU processes under `accelerate launch` share each step's prompts; the main one alone writes the curves and prints"
    script, calls, out = tmp_path/'launched.py', tmp_path/'curves.calls', tmp_path/'g'
    script.write_text(LAUNCHED)
    def policy(body):   # step 0's prompt (one assistant turn: the thought) always gets the labelled click, step 1's (a type) never matches
        return "click(start_box='(458,758)')" if sum(m['role'] == 'assistant' for m in body['messages']) == 1 else grounding_executor(body)
    exe = Path(sys.executable).parent/'accelerate'
    launch = [str(exe)] if exe.exists() else [sys.executable, '-m', 'accelerate.commands.launch']
    # `--cpu --num_processes 2` would start ONE process (accelerate's CPU launcher needs mpirun); `--multi_gpu` is torchrun,
    # and the trainer (use_cpu on a machine without a GPU) joins the processes over gloo
    launch += ['launch', '--multi_gpu', '--num_processes', '2', '--num_machines', '1', '--mixed_precision', 'no', '--dynamo_backend', 'no',
               '--main_process_port', str(free_port())]
    with ScriptedServer(policy) as srv:
        args = ['--app', 'Algebra', '--runs', str(run), '--judge', 'j', '--model', str(planner), '--out', str(out), '--no-lora',
                '--executor-url', srv.url, '--executor-model', 'executor', '--num-generations', '2', '--per-device-train-batch-size', '2',
                '--max-steps', '2', '--max-completion-length', '8', '--lr', '1e-2', '--save-steps', '100']
        t0 = time.perf_counter()
        p = subprocess.run(launch + [str(script), str(calls)] + args, capture_output=True, text=True, timeout=480,
                           env={**os.environ, 'TRL_EXPERIMENTAL_SILENCE': '1', 'CUDA_VISIBLE_DEVICES': '', 'OMP_NUM_THREADS': '1'})
        secs = time.perf_counter() - t0
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert 'rank 0 of 2: 2 steps, 2 completions scored' in p.stdout and 'rank 1 of 2: 2 steps, 2 completions scored' in p.stdout
    assert p.stdout.count('positive steps of Algebra') == p.stdout.count('done: 2 steps') == 1, p.stdout
    assert calls.read_text() == '0\n', 'log.csv and reward.png are written by the main process only'
    assert (out/'final'/'model.safetensors').exists() and (out/'final'/'processor_config.json').exists() and (out/'reward.png').exists()
    import pandas as pd
    log = pd.read_csv(out/'log.csv').dropna(subset=['reward'])
    assert len(log) == 2 and (log['match'] == 0.5).all(), 'match counts the completions of both processes'
    print(f"2 GRPO steps in two CPU processes under accelerate launch: {secs:.1f} s")
