"""The agent loop over real HTTP: a scripted OpenAI-compatible server on 127.0.0.1, the real OpenAIChat client, the
counter environment; every way an episode ends; `coda eval` end to end; and runs killed with SIGKILL and resumed."""
import asyncio, json, os, random, signal, subprocess, sys, time
from pathlib import Path
from agent_fixtures import CounterEnv, ScriptedServer, Task, counting_policy
from coda.actions import Action
from coda.agent import Agent, AgentConfig, osworld_actions
from coda.aio import run_sync
from coda.models import OpenAIChat
from coda.store import RunStore
from coda.export import steps_dataset
from coda.viewer import to_html

HERE = Path(__file__).parent

def run_episode(policy, env=None, task=None, **cfg):
    env, task, steps = env or CounterEnv(), task or Task(), []
    with ScriptedServer(policy) as srv:
        async def go():
            p, e = OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor')
            try: return await Agent(p, e, AgentConfig(**cfg)).run(env, task, on_step=lambda r, png: steps.append((r, png)))
            finally:
                await p.aclose()
                await e.aclose()
        res = run_sync(go())
    return res, [r for r, _ in steps], srv, env, [png for _, png in steps]

def planner_then(executor_reply, planner_reply="Thought: Click the + button.\nAction: click(start_box='(1,1)')"):
    def policy(body):
        if body['model'] == 'planner': return planner_reply(body) if callable(planner_reply) else planner_reply
        return executor_reply(body) if callable(executor_reply) else executor_reply
    return policy

def test_answer_task_succeeds_and_requests_follow_the_protocol():
    res, steps, srv, env, pngs = run_episode(counting_policy(3))
    assert (res['stop'], res['answer'], res['score'], res['steps']) == ('ANS', '3', 1.0, 4)
    assert [s['kind'] for s in steps] == ['act'] * 3 + ['answer']
    assert steps[0]['actions'] == [{'kind': 'click', 'x': 640.0, 'y': 400.0}]
    ex = [b for b in srv.requests if b['model'] == 'executor']
    assert len(ex) == 3 and all(b.get('continue_final_message') is True and b.get('add_generation_prompt') is False for b in ex)
    assert ex[0]['messages'][-1] == {'role': 'assistant', 'content': [{'type': 'text', 'text': 'Thought: Click the + button in the middle of the window.\nAction: '}]}
    assert ex[0]['messages'][0]['role'] == 'user' and '## Action Space' in ex[0]['messages'][0]['content'][0]['text']
    pl = [b for b in srv.requests if b['model'] == 'planner']
    assert (pl[0]['temperature'], pl[0]['top_p'], pl[0]['max_tokens']) == (1.0, 0.9, 1500)
    imgs = [p for m in pl[-1]['messages'] for p in m['content'] if isinstance(m['content'], list) and p['type'] == 'image_url']
    assert len(imgs) == 2 and imgs[0]['image_url']['url'].startswith('data:image/png;base64,')
    # the executed action was written back into the planner's history
    first_asst = next(m for m in pl[1]['messages'] if m['role'] == 'assistant')
    assert first_asst['content'][0]['text'].endswith("\nAction: click(start_box='<|box_start|>(644,406)<|box_end|>')")
    assert all(p[:8] == b'\x89PNG\r\n\x1a\n' for p in pngs)
    assert steps[0]['planner_prompt_tokens'] == 100 and steps[0]['executor_completion_tokens'] == 1

def test_done_fail_call_user_budget():
    res, steps, *_ = run_episode(planner_then("finished(content='ok')"))
    assert (res['stop'], res['score']) == ('DONE', 0.0)
    res, steps, *_ = run_episode(planner_then('x', "Thought: There is no such setting.\nAction: FAIL"))
    assert res['stop'] == 'FAIL' and steps[0]['kind'] == 'fail'
    res, steps, *_ = run_episode(planner_then('call_user()'))
    assert res['stop'] == 'FAIL' and [s['kind'] for s in steps] == ['call_user'] * 3 + ['fail']
    res, steps, *_ = run_episode(planner_then("scroll(start_box='(10,700)', direction='down')"), task=Task(steps=2), stuck_after=5)
    assert (res['stop'], res['steps']) == ('BUDGET', 2)

def test_unparseable_executor_is_resampled_then_invalid():
    n = {'ex': 0}
    def ex(body):
        n['ex'] += 1
        return 'I would rather not.' if n['ex'] <= 4 else "click(start_box='(644,406)')"
    res, steps, srv, *_ = run_episode(planner_then(ex), task=Task(steps=2))
    assert [s['kind'] for s in steps] == ['invalid', 'act'] and steps[0]['executor_attempts'] == 4 and steps[1]['executor_attempts'] == 1

def test_stuck_on_unchanged_screen():
    res, steps, *_ = run_episode(planner_then("click(start_box='(10,10)')"))
    assert res['stop'] == 'STUCK' and [s['kind'] for s in steps] == ['act', 'act', 'stuck']

def test_crashed_environment_is_an_error_not_a_success():
    res, steps, *_ = run_episode(counting_policy(3), env=CounterEnv(crash_at=2))
    assert (res['status'], res['stop'], res['score']) == ('error', 'ERROR', 0.0) and 'the app crashed' in res['reason']

def test_dead_server_is_an_error_naming_the_endpoint():
    async def go():
        p = OpenAIChat('http://127.0.0.1:9/v1', 'planner', retries=1, backoff=0.01, timeout=2)
        return await Agent(p, p).run(CounterEnv(), Task())
    res = run_sync(go())
    assert res['status'] == 'error' and '127.0.0.1:9' in res['reason']

def test_executor_on_a_server_without_continue_final_gets_a_fresh_turn_not_an_error():
    "A server that answers 422 to vLLM's continuation fields (transformers serve): the episode runs and succeeds"
    with ScriptedServer(counting_policy(3), continue_final=False) as srv:
        async def go():
            p, e = OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor')
            try: return await Agent(p, e, AgentConfig()).run(CounterEnv(), Task()), e
            finally:
                await p.aclose()
                await e.aclose()
        res, ex = run_sync(go())
    assert (res['status'], res['stop'], res['score']) == ('done', 'ANS', 1.0) and ex.continue_final_supported is False
    sent = [b for b in srv.requests if b['model'] == 'executor']
    assert ['continue_final_message' in b for b in sent] == [True, False, False, False]   # refused once, then sent without

def test_a_task_without_checks_is_unscored_not_an_error():
    "An environment whose evaluate() gives None (no checks): status 'unscored', score None, the stop kept"
    class Unchecked(CounterEnv):
        def evaluate(self): return None
    res, steps, *_ = run_episode(counting_policy(3), env=Unchecked())
    assert (res['status'], res['score'], res['stop'], res['steps']) == ('unscored', None, 'ANS', 4) and 'error' not in res

def test_a11y_observation_sends_text_only():
    res, steps, srv, *_ = run_episode(counting_policy(1), obs='a11y')
    body = next(b for b in srv.requests if b['model'] == 'planner')
    txt = body['messages'][-1]['content'][0]['text']
    assert txt.startswith('Given the info from accessibility tree as below:\n[label] count = 0') and 'image_url' not in json.dumps(body)

def test_steps_say_where_their_time_went():
    "the records gave model and environment seconds only: the screenshot's encoding (inside env_s) and the wait for the disk were invisible"
    res, steps, *_ = run_episode(counting_policy(3))
    assert res['score'] == 1.0 and len(steps) == 4
    assert all(isinstance(s['encode_s'], float) and 0 < s['encode_s'] <= s['env_s'] for s in steps), [(s.get('encode_s'), s['env_s']) for s in steps]
    assert all(s['store_s'] == 0.0 for s in steps)          # a store that writes at once: nothing to wait for

def test_the_agent_runs_at_most_one_step_ahead_of_its_store():
    "an on_step that returns its write under way: the agent goes on, and awaits it before handing over the next step"
    disk, handed = [], []
    async def write(rec):
        await asyncio.sleep(0.3)
        disk.append(rec['step'])
    def on_step(rec, png):
        handed.append((rec['step'], list(disk), rec['store_s']))
        return write(rec)
    with ScriptedServer(counting_policy(3)) as srv:
        async def go():
            p, e = OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor')
            try: return await Agent(p, e, AgentConfig()).run(CounterEnv(), Task(), on_step=on_step)
            finally:
                await p.aclose()
                await e.aclose()
        res = run_sync(go())
    assert res['score'] == 1.0 and disk == [0, 1, 2, 3]                                     # the last write too, before it returned
    assert [(k, d) for k, d, _ in handed] == [(0, []), (1, [0]), (2, [0, 1]), (3, [0, 1, 2])]
    assert handed[0][2] == 0.0 and any(w > 0 for *_, w in handed[1:])                       # the waits are recorded

# ---------------------------------------------------------------- coda eval, the store's exports, kills

def write_tasks(path, n_tasks):
    path.write_text(''.join(json.dumps({'type': 'Counter', 'id': f'C-{i:02d}', 'instruction': 'Click + three times, then answer.', 'steps': 8}) + '\n'
                            for i in range(n_tasks)))
    return path

def eval_cmd(srv, tasks, run, n, workers=2):
    exe = Path(sys.executable).parent/'coda'
    cmd = [str(exe)] if exe.exists() else [sys.executable, '-c', 'from coda.cli import main; main()']
    return cmd + ['eval', '--tasks', str(tasks), '--env', 'agent_fixtures:CounterEnv', '--run', str(run), '--n', str(n),
                  '--workers', str(workers), '--planner-url', srv.url, '--planner-model', 'planner', '--executor-url', srv.url,
                  '--executor-model', 'executor', '--k', '1', '2']

def env_with_fixtures():
    return {**os.environ, 'PYTHONPATH': os.pathsep.join([str(HERE), os.environ.get('PYTHONPATH', '')])}

SERVED = ['planner', 'executor']   # the server lists its models as vLLM does, so `coda eval`'s preflight is one GET /models, no chat request

def test_eval_command_runs_resumes_and_exports(tmp_path):
    tasks, run = write_tasks(tmp_path/'tasks.jsonl', 3), tmp_path/'run'
    with ScriptedServer(counting_policy(3), models=SERVED) as srv:
        p = subprocess.run(eval_cmd(srv, tasks, run, 2), capture_output=True, text=True, env=env_with_fixtures(), timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        assert 'Counter' in p.stdout and '100.0' in p.stdout, p.stdout
        n_req = len(srv.requests)
        p = subprocess.run(eval_cmd(srv, tasks, run, 2), capture_output=True, text=True, env=env_with_fixtures(), timeout=300)
        assert p.returncode == 0 and len(srv.requests) == n_req, 'a finished run resumed without new requests'
    store = RunStore(run)
    assert len(store.records()) == 6 and all(r['score'] == 1.0 for r in store.records())
    assert (run/'metrics.md').exists() and (run/'metrics.csv').exists()
    ds = steps_dataset(run)
    assert len(ds) == 6 * 4 and ds[0]['image'].size == (1280, 800) and ds.features['image'].__class__.__name__ == 'Image'
    html = to_html(run).read_text()
    assert html.count('class="step"') == 24 and html.count('class="pt"') == 18   # 3 clicks drawn per episode
    for src in __import__('re').findall(r'src="([^"]+)"', html): assert (run/src).exists()

def test_eval_seed_reaches_every_request_and_repeats(tmp_path):
    "`coda eval --seed` sends each model request a seed derived from the task, sample and step: two runs send the same ones"
    tasks, seeds = write_tasks(tmp_path/'tasks.jsonl', 2), []
    for i in range(2):
        with ScriptedServer(counting_policy(3), models=SERVED) as srv:
            p = subprocess.run(eval_cmd(srv, tasks, tmp_path/f'run{i}', 2) + ['--seed', '7'], capture_output=True, text=True, env=env_with_fixtures(), timeout=300)
            assert p.returncode == 0, p.stderr[-3000:]
            seeds.append(sorted(b['seed'] for b in srv.requests))
    assert seeds[0] == seeds[1] and len(set(seeds[0])) == len(seeds[0]) >= 16   # 4 episodes x 4 steps x 2 models, each its own
    assert {e.meta['seed'] for e in RunStore(tmp_path/'run0').episodes()} == {e.meta['seed'] for e in RunStore(tmp_path/'run1').episodes()}
    with ScriptedServer(counting_policy(3)) as srv:
        p = subprocess.run(eval_cmd(srv, tasks, tmp_path/'run2', 2), capture_output=True, text=True, env=env_with_fixtures(), timeout=300)
        assert p.returncode == 0 and srv.requests and all('seed' not in b for b in srv.requests)

def test_killed_runs_resume_to_exactly_one_result_each(tmp_path):
    "SIGKILL at random moments, at least 5 times, then a last uninterrupted run: one result per (app, task, sample)"
    tasks, run = write_tasks(tmp_path/'tasks.jsonl', 6), tmp_path/'run'
    rng, kills = random.Random(0), 0
    with ScriptedServer(counting_policy(3), latency=0.1) as srv:
        for attempt in range(12):
            proc = subprocess.Popen(eval_cmd(srv, tasks, run, 3), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=env_with_fixtures(), start_new_session=True)
            time.sleep(rng.uniform(0.5, 3.0))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                kills += 1
            else: break
            if kills >= 6: break
        assert kills >= 5, f'only {kills} kills landed before the run finished'
        p = subprocess.run(eval_cmd(srv, tasks, run, 3), capture_output=True, text=True, env=env_with_fixtures(), timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
    store = RunStore(run)
    recs = store.records()
    keys = sorted((r['app'], r['task'], r['sample']) for r in recs)
    assert keys == sorted(('Counter', f'C-{i:02d}', s) for i in range(6) for s in range(3))
    for e in store.episodes():
        assert e.result is not None
        steps = e.steps
        assert [s.number for s in steps] == list(range(e.result['steps'])), e.dir
        assert all(e.screenshot(s) is not None for s in steps)
        assert e.result['score'] == 1.0
    leftovers = [p for p in run.rglob('.*.tmp')]
    assert not leftovers or all(p.stat().st_size >= 0 for p in leftovers)

def test_agent_against_a_live_transformers_serve(served, tiny):
    """Both models are the tiny random Qwen2.5-VL behind a real `transformers serve`: the loop, the HTTP protocol,
    images and token accounting work end to end (the text is random, so only shapes and counts are checked).
    `transformers serve` cannot continue a final assistant turn (it rejects vLLM's fields), so the executor
    writes a fresh reply here, as in the reference code."""
    steps = []
    async def go():
        p = OpenAIChat(served, str(tiny), timeout=120, retries=1)
        try:
            cfg = AgentConfig(continue_final=False, min_pixels=56 * 56, max_pixels=224 * 224, max_resample=0,
                              planner_sampling=dict(temperature=0.0, max_tokens=12), executor_sampling=dict(temperature=0.0, max_tokens=12))
            return await Agent(p, p, cfg).run(CounterEnv(), Task(steps=2), on_step=lambda r, png: steps.append(r))
        finally: await p.aclose()
    res = run_sync(go())
    assert res['status'] == 'done' and res['stop'] in ('BUDGET', 'STUCK', 'DONE', 'ANS', 'FAIL') and 1 <= len(steps) <= 2
    s = steps[0]
    assert s['planner_prompt_tokens'] > 66 and 0 < s['planner_completion_tokens'] <= 12   # 64 image tokens + 2 markers at least
    if s['executor_attempts']: assert s['executor_prompt_tokens'] > s['planner_prompt_tokens'] - 66

def test_agent_solves_a_scidesk_task_end_to_end():
    "Planner and executor over HTTP, UI-TARS-1.5 frame coordinates, the Algebra app, its checker: the full stack scores 1"
    from coda.envs.scidesk import SciDesk, scidesk_tasks
    task = next(t for t in scidesk_tasks(['Algebra']) if t.id == 'A-01')
    def policy(body):
        turn = sum(m['role'] == 'assistant' for m in body['messages'])
        if body['model'] == 'planner':
            return ["Thought: Click the expression field at the bottom.\nAction: click(start_box='(458,758)')",
                    "Thought: Type the expression and press Enter.\nAction: type(content='17*23+4\\n')",
                    "Thought: The console shows 395.\nAction: ```ANS 395```"][turn]
        return ["click(start_box='<|box_start|>(458,758)<|box_end|>')", "type(content='17*23+4\\n')"][turn - 1]
    res, steps, srv, env, pngs = run_episode(policy, env=SciDesk(), task=task)
    assert (res['stop'], res['answer'], res['score']) == ('ANS', '395', 1.0), (res, steps)
    a = steps[0]['actions'][0]
    assert a['kind'] == 'click' and abs(a['x'] - 458 * 1280 / 1288) < 1e-9 and abs(a['y'] - 758 * 800 / 812) < 1e-9

# ---------------------------------------------------------------- OSWorld's step API

SCIDESK_REPLIES = {'planner': ["Thought: Click the expression field at the bottom.\nAction: click(start_box='(458,758)')",
                               "Thought: Type the expression and press Enter.\nAction: type(content='17*23+4\\n')",
                               "Thought: The console shows 395.\nAction: ```ANS 395```"],
                   'executor': ["click(start_box='<|box_start|>(458,758)<|box_end|>')", "type(content='17*23+4\\n')"]}

def scidesk_policy(body):
    "The reply for the turn the request is at: the same conversation gets the same reply, whoever drives the episode"
    turn = sum(m['role'] == 'assistant' for m in body['messages'])
    return SCIDESK_REPLIES['planner'][turn] if body['model'] == 'planner' else SCIDESK_REPLIES['executor'][turn - 1]

def test_predict_in_a_loop_takes_the_steps_run_takes():
    "OSWorld's loop (predict, then step the env, until DONE/FAIL) on a scidesk task: run()'s actions, requests and score"
    from coda.envs.scidesk import SciDesk, scidesk_tasks
    task = next(t for t in scidesk_tasks(['Algebra']) if t.id == 'A-01')
    res, steps, ran, *_ = run_episode(scidesk_policy, env=SciDesk(), task=task)
    assert (res['stop'], res['score']) == ('ANS', 1.0)
    want = [osworld_actions([Action.from_dict(d) for d in s['actions']]) for s in steps]
    env, got, responses = SciDesk(), [], []
    with ScriptedServer(scidesk_policy) as srv:
        agent = Agent(OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor'))
        agent.reset()
        obs = env.reset(task)
        for _ in range(task.steps):
            response, actions = agent.predict(task.instruction, {'screenshot': obs.png(), 'accessibility_tree': None})
            got.append(actions)
            responses.append(response)
            obs = env.step([Action.from_dict(d) for d in agent.last_step['actions']])
            if actions[-1] in ('DONE', 'FAIL'): break
    assert got == want and len(got) == 3
    assert got[0][0].endswith("pyautogui.click(455.155, 746.798, button='left')\n") and got[1][0].endswith("pyautogui.press('enter')\n")
    assert got[2] == ['DONE'] and responses[2].endswith('```ANS 395```') and env.evaluate() == 1.0
    assert responses[0] == "Thought: Click the expression field at the bottom.\nAction: click(start_box='<|box_start|>(458,758)<|box_end|>')"
    assert srv.requests == ran.requests     # the same history, images included, in every planner and executor request
    assert agent.last_step['actions'] == steps[-1]['actions'] == [{'kind': 'answer', 'text': '395'}]

def test_eval_without_run_writes_under_the_working_directory(tmp_path):
    "A relative run_dir ($CODA_RUN_DIR=myruns) is the working directory's, not the checkout's"
    tasks, cwd = write_tasks(tmp_path/'tasks.jsonl', 1), tmp_path/'work'
    cwd.mkdir()
    with ScriptedServer(counting_policy(3), models=SERVED) as srv:
        cmd = eval_cmd(srv, tasks, 'unused', 2, workers=1)
        i = cmd.index('--run')
        del cmd[i:i + 2]
        p = subprocess.run(cmd, capture_output=True, text=True, env={**env_with_fixtures(), 'CODA_RUN_DIR': 'myruns'}, cwd=cwd, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = list((cwd/'myruns').glob('eval-*'))
    assert len(runs) == 1 and len(RunStore(runs[0]).records()) == 2, p.stdout
    assert not (Path(__file__).parent.parent/'myruns').exists()
