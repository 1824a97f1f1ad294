"""The trajectory judge against real HTTP servers: verdict parsing on real-format replies, the voting cascade and the
resolution schedule as a server sees them, ensembles, step labels, ARB precision/recall on a stored scidesk run with
parse failures and empty replies, `coda judge` killed and resumed, and a run judged by a tiny Qwen2.5-VL served by
`transformers serve`."""
import base64, io, json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from PIL import Image
from agent_fixtures import ScriptedServer
from coda.agent import Agent, AgentConfig
from coda.aio import run_sync
from coda.envs.scidesk import SciDesk, scidesk_tasks
from coda.judge import Judge, Ensemble, parse_verdict, label_steps, load_trajectory, judge_run, judge_eval, judge_labels
from coda.store import read_judgments, judgment_path
from coda.records import Labels
from coda.metrics import judge_prf
from coda.models import OpenAIChat
from coda.rollout import run_episodes
from coda.store import RunStore

HERE = Path(__file__).parent
T = '<res_dict>{"Correctness": True, "Redundant": [], "Optimized": True, "First_Error_Step": None, "Error_Type": "", "Correct_Action": ""}</res_dict>'
F = ('The value typed is wrong.\n<res_dict>{"Correctness": False, "Redundant": [], "Optimized": False, "First_Error_Step": 1, '
     '"Error_Type": "wrong answer", "Correct_Action": "answer the value shown"}</res_dict>')

# ------------------------------------------------------------------ a stored scidesk run with known outcomes
ANS_TASKS = [t for t in scidesk_tasks(['Algebra']) if len(t.evaluate) == 1 and t.evaluate[0].get('value') == 'ANS'][:6]

def answering_policy(body):
    "Planner answers right for even-numbered tasks and wrong for odd ones (one step each)"
    text = ' '.join(p.get('text', '') for m in body['messages'] for p in (m['content'] if isinstance(m['content'], list) else [{'text': m['content']}]))
    t = next(t for t in ANS_TASKS if t.instruction in text)
    i = ANS_TASKS.index(t)
    ans = t.evaluate[0]['args'][0] if i % 2 == 0 else 'wrong'
    return f"Thought: The answer is {ans}.\nAction: ```ANS {ans}```"

@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "6 Algebra answer tasks x 1 sample: 3 successes, 3 failures, each with a step screenshot and a final screenshot"
    root = tmp_path_factory.mktemp('judged')/'run'
    with ScriptedServer(answering_policy) as srv:
        async def go():
            p = OpenAIChat(srv.url, 'planner')
            try: return await run_episodes(ANS_TASKS, SciDesk, Agent(p, p, AgentConfig()), RunStore(root, {}), n=1, workers=2, progress=False)
            finally: await p.aclose()
        res = run_sync(go())
    assert sorted(r['score'] for r in res) == [0.0] * 3 + [1.0] * 3
    return root

def test_stored_episode_loads_with_its_final_screen(run):
    ep = RunStore(run).episode_dirs()[0]
    t = load_trajectory(ep)
    assert (ep/'final.png').exists() and len(t.frames) == 2 and t.captions[-1] == 'The screen after the last step'
    assert t.n_steps == 1 and t.instruction and 'answer' in t.steps[0]

# ------------------------------------------------------------------ voting over real HTTP
def image_sizes(body):
    out = []
    for m in body['messages']:
        for p in m['content'] if isinstance(m['content'], list) else []:
            if p['type'] == 'image_url':
                out.append(Image.open(io.BytesIO(base64.b64decode(p['image_url']['url'].split(',', 1)[1]))).size)
    return out

def judge_with(replies, config, run_dir, **kw):
    "A Judge over a ScriptedServer replying from `replies` in order; returns (decision, requests)"
    replies = list(replies)
    t = load_trajectory(RunStore(run_dir).episode_dirs()[0])
    with ScriptedServer(lambda body: replies.pop(0)) as srv:
        async def go():
            m = OpenAIChat(srv.url, 'judge', retries=0)
            try: return await Judge(m, config, **kw).judge(t)
            finally: await m.aclose()
        d = run_sync(go())
    return d, srv.requests

def test_cascade_stops_at_the_first_rejection(run):
    d, reqs = judge_with([F, T, T, T], 'coda', run)
    assert (d.accepted, len(reqs), d.label, d.verdict.first_error) == (False, 1, 0, 1)
    d, reqs = judge_with([T, T, F, T], 'seagent', run)
    assert (d.accepted, len(reqs)) == (False, 3)
    assert [(r['temperature'], r.get('top_p')) for r in reqs] == [(0.0, None), (1.0, 0.6), (1.0, 0.6)]
    d, reqs = judge_with([T, 'It looks done to me.', T, T], 'coda', run)
    assert (d.accepted, len(reqs), d.votes[1]['verdict']['parsed']) == (False, 2, False)
    d, reqs = judge_with([T, T, T, T], 'coda', run)
    assert (d.accepted, len(reqs), d.label) == (True, 4, 1)
    assert all(r['max_tokens'] == 1024 for r in reqs)

def test_resolution_schedule_low_first(run):
    d, reqs = judge_with([T] * 4, 'coda-multires', run)
    assert [image_sizes(r)[0] for r in reqs] == [(640, 400), (1280, 800), (768, 480), (768, 480)]   # low first, whole, then two 60 % details
    texts = [' '.join(p.get('text', '') for p in r['messages'][0]['content']) for r in reqs]
    assert 'a detail' not in texts[1] and '0%-60% across' in texts[2] and '40%-100% across' in texts[3]

def test_votes_see_different_inputs(run):
    "voting@4's votes sample at T 1.0 and each sees the frames through its own crop: four different requests"
    d, reqs = judge_with([T] * 4, 'coda', run)
    images = [tuple(p['image_url']['url'] for p in r['messages'][0]['content'] if p['type'] == 'image_url') for r in reqs]
    assert len(reqs) == 4 and len(set(images)) == 4 and all(r['temperature'] == 1.0 for r in reqs)
    d, reqs = judge_with([F], 'coda-multires', run)
    assert len(reqs) == 1 and image_sizes(reqs[0]) == [(640, 400), (640, 400)]     # a failure costs one cheap request

def test_frame_limit_keeps_first_and_last(tmp_path, run):
    from coda.judge import Trajectory, judge_messages
    def png(c):
        b = io.BytesIO()
        Image.new('RGB', (64, 40), (c, c, c)).save(b, 'PNG')
        return b.getvalue()
    t = Trajectory('x', [png(i * 20) for i in range(10)], [f'f{i}' for i in range(10)])
    parts = judge_messages(t, max_frames=5)[0]['content']
    caps = [p['text'].strip() for p in parts if p['type'] == 'text' and p['text'].strip().startswith('Frame')]
    assert caps == ['Frame 1: f0', 'Frame 3: f2', 'Frame 5: f4', 'Frame 8: f7', 'Frame 10: f9']

def test_ensemble_is_an_and(run):
    t = load_trajectory(RunStore(run).episode_dirs()[0])
    with ScriptedServer(lambda b: T if b['model'] == 'tuned' else F) as srv:
        async def go(short):
            a, b = OpenAIChat(srv.url, 'tuned'), OpenAIChat(srv.url, 'base')
            try: return await Ensemble([Judge(a, 'single', name='tuned'), Judge(b, 'single', name='base')], short_circuit=short).judge(t)
            finally:
                await a.aclose()
                await b.aclose()
        d = run_sync(go(True))
        assert not d.accepted and [v['judge'] for v in d.votes] == ['tuned', 'base']
    with ScriptedServer(lambda b: T) as srv:
        async def go2():
            a, b = OpenAIChat(srv.url, 'tuned'), OpenAIChat(srv.url, 'base')
            try: return await Ensemble([Judge(a, 'coda', name='tuned'), Judge(b, 'single', name='base')]).judge(t)
            finally:
                await a.aclose()
                await b.aclose()
        d = run_sync(go2())
        assert d.accepted and len(d.votes) == 5

def test_dead_judge_server_is_na_not_a_rejection(run):
    t = load_trajectory(RunStore(run).episode_dirs()[0])
    async def go():
        m = OpenAIChat('http://127.0.0.1:9/v1', 'judge', retries=1, backoff=0.01, timeout=2)
        try: return await Judge(m, 'coda').judge(t)
        finally: await m.aclose()
    d = run_sync(go())
    assert d.label == -1 and '127.0.0.1:9' in d.error

# ------------------------------------------------------------------ labels (research §7.7)
def test_labels_from_worked_examples():
    v = parse_verdict('<res_dict>{"Correctness": False, "Redundant": [5, 6], "Optimized": False, "First_Error_Step": 4}</res_dict>')
    assert label_steps(v, 8) == Labels([0, 1, 2], 3, False)
    assert label_steps(parse_verdict(T), 4) == Labels([0, 1, 2, 3], None, True)
    assert label_steps(parse_verdict('<res_dict>{"Correctness": False, "First_Error_Step": 2}</res_dict>'), 6, min_error_step=3) == Labels()
    assert label_steps(parse_verdict(''), 6) == Labels()

def test_a_correct_verdict_with_a_first_error_is_not_a_clean_success():
    "Correctness True with First_Error_Step 3 (1-based): positives stop before step 3, whatever Correctness says"
    v = parse_verdict('<res_dict>{"Correctness": True, "Redundant": [], "First_Error_Step": 3}</res_dict>')
    assert label_steps(v, 5) == Labels([0, 1], 2, False)
    v = parse_verdict('<res_dict>{"Correctness": True, "Redundant": [4], "First_Error_Step": 2}</res_dict>')
    assert label_steps(v, 5) == Labels([0], 1, False)
    assert label_steps(v, 5, min_error_step=3) == Labels()                 # too early to keep a prefix: nothing

def test_parse_failures_are_rejections():
    for bad in ['', 'ok', '<res_dict>{"Correctness": "True"}</res_dict>', '<res_dict>{"Correctness": True</res_dict>',
                '<res_dict>{"Correctness": True, **x}</res_dict>', "<res_dict>[True]</res_dict>"]:
        v = parse_verdict(bad)
        assert not v.parsed and not v.correct, bad
    assert parse_verdict('```json\n{"Correctness": false, "First_Error_Step": 2}\n```').first_error == 2

def test_conflicting_keys_are_a_rejection():
    for bad in ["<res_dict>{'Correctness': False, 'correctness': True}</res_dict>",
                '<res_dict>{"Correctness": True, "Correctness": False}</res_dict>',
                '<res_dict>{"Correctness": False, "First Error Step": 2, "first_error_step": None, "correctness ": True}</res_dict>']:
        v = parse_verdict(bad)
        assert not v.correct and not v.parsed and 'conflicting keys' in v.error, (bad, v)

def test_only_the_last_verdict_counts():
    "A malformed final verdict is a rejection: an earlier True is not fallen back on"
    for bad in ['<res_dict>{"Correctness": True}</res_dict> Let me fix that: <res_dict>{"Correctness": Tru</res_dict>',
                '<res_dict>{"Correctness": True}</res_dict>\n<res_dict>{"Correctness": "maybe"}</res_dict>',
                '```python\n{"Correctness": True}\n```\n```python\n{"Correctness": True,\n```',
                '<res_dict>{"Correctness": True}</res_dict> and finally <res_dict>']:
        v = parse_verdict(bad)
        assert not v.correct and not v.parsed and (v.error.startswith('the last') or 'Correctness is' in v.error), (bad, v)
    assert parse_verdict('<res_dict>{"Correctness": False}</res_dict> ok, in fact: <res_dict>{"Correctness": False, "First_Error_Step": 2}</res_dict>').first_error == 2

def test_quoted_templates_are_rejections():
    "A template or example dict quoted in prose next to 'Correctness is False' is not a success"
    for bad in ['The answer format is {"Correctness": True, "Redundant": []}. Here Correctness is False: 5 was typed, not 4.',
                'e.g. {"Correctness": True} -- but the dialog is still open, so no.',
                'Correctness is False, since the value is wrong.\n<res_dict>{"Correctness": True, "Redundant": []}</res_dict>',
                'Template: <res_dict>{"Correctness": False}</res_dict>\nMine: <res_dict>{"Correctness": True}</res_dict>',
                '**Correctness**: false.\n```json\n{"Correctness": true}\n```']:
        v = parse_verdict(bad)
        assert not v.correct and not v.parsed and v.error, (bad, v)
    assert parse_verdict('Correctness: True, the value 4 is shown.\n<res_dict>{"Correctness": True}</res_dict>').correct
    assert parse_verdict('It is not correct.\n<res_dict>{"Correctness": False, "First_Error_Step": 1}</res_dict>').first_error == 1

def test_huge_numbers_never_raise():
    "A 5,000-digit hex literal (its repr is over Python's int-to-str limit) made the parser raise"
    for reply in ['<res_dict>{"Correctness": 0x' + 'f' * 5000 + '}</res_dict>',
                  '<res_dict>{"Correctness": False, "First_Error_Step": 0x' + 'f' * 5000 + ', "Redundant": [0x' + 'f' * 5000 + ', 2]}</res_dict>',
                  '<res_dict>{"Correctness": False, "Error_Type": 0x' + 'f' * 5000 + ', "First_Error_Step": "' + '9' * 5000 + '"}</res_dict>',
                  '<res_dict>{"Correctness": False, "Redundant": ' + '[' * 100000 + ']' * 100000 + '}</res_dict>']:
        v = parse_verdict(reply)
        repr(v)
        json.dumps(v.__dict__)
        assert not v.correct and v.first_error is None
    v = parse_verdict('<res_dict>{"Correctness": False, "First_Error_Step": 0x' + 'f' * 5000 + ', "Redundant": [0x' + 'f' * 5000 + ', 2]}</res_dict>')
    assert v.parsed and v.redundant == [2]

# ------------------------------------------------------------------ judging a run: P/R with ARB semantics
def scripted_judge_policy(body):
    "True for tasks 0, 1 (right, wrong), False for 2, 3 (right, wrong), garbage for 4 (right), a cut-off verdict for 5 (wrong)"
    text = body['messages'][0]['content'][0]['text']
    i = next(i for i, t in enumerate(ANS_TASKS) if f"'{t.instruction}'" in text)
    return [T, T, F, F, 'I cannot tell.', '<res_dict>{"Correctness": Tr'][i]   # (an empty reply is a model error: coda.models)

def test_judge_run_stores_labels_and_scores_with_arb_semantics(run, tmp_path):
    import shutil
    r = tmp_path/'run'
    shutil.copytree(run, r)
    with ScriptedServer(scripted_judge_policy) as srv:
        async def go():
            m = OpenAIChat(srv.url, 'judge', retries=0)
            try: return await judge_run(r, Judge(m, 'single', name='j'), workers=3, progress=False)
            finally: await m.aclose()
        c = run_sync(go())
        assert c == dict(judged=6, skipped=0, failed=0, accepted=2, errored=0)
        c2 = run_sync(go())
        assert c2['judged'] == 0 and c2['skipped'] == 6 and len(srv.requests) == 6     # resumed: nothing asked again
    recs = {tuple(x['key'])[1]: x for x in read_judgments(r, 'j')}
    assert len(recs) == 6 and recs[ANS_TASKS[0].id]['labels'] == {'positives': [0], 'negative': None, 'clean_success': True}
    assert recs[ANS_TASKS[2].id]['labels'] == {'positives': [], 'negative': 0, 'clean_success': False}
    filed = json.loads(judgment_path(r, 'j', ('Algebra', ANS_TASKS[2].id, 0)).read_text())   # the keys in the order they were always filed in
    assert list(filed) == ['key', 'judge', 'accepted', 'label', 'votes', 'verdict', 'labels', 'n_steps', 'score', 'status']
    assert list(filed['labels']) == ['positives', 'negative', 'clean_success'] and filed['verdict'] == filed['votes'][0]['verdict']
    y_true, y_pred = judge_labels(r, 'j')
    truth = {t.id: int(i % 2 == 0) for i, t in enumerate(ANS_TASKS)}
    assert sorted(zip(y_true, y_pred)) == sorted((truth[t.id], [1, 1, 0, 0, 0, 0][i]) for i, t in enumerate(ANS_TASKS))
    m = judge_prf(y_true, y_pred)
    assert (m['tp'], m['fp'], m['fn'], m['tn']) == (1, 1, 2, 2) and m['precision'] == 0.5 and abs(m['recall'] - 1 / 3) < 1e-12
    table = judge_eval(r, ['j'], {'j': 'single'})
    assert table.loc['single', 'Precision'] == 50.0 and table.loc['single', 'Recall'] == 33.3 and table.loc['single', 'n'] == 6

def test_limit_judges_that_many_and_counts_only_earlier_judgments_as_already_judged(run, tmp_path):
    import shutil
    r = tmp_path/'run'
    shutil.copytree(run, r)
    with ScriptedServer(scripted_judge_policy) as srv:
        async def go(limit):
            m = OpenAIChat(srv.url, 'judge', retries=0)
            try: return await judge_run(r, Judge(m, 'single', name='j'), workers=2, progress=False, limit=limit)
            finally: await m.aclose()
        first, second, third = run_sync(go(2)), run_sync(go(3)), run_sync(go(None))
    assert (first['judged'], first['skipped']) == (2, 0)       # none was judged before: nothing 'already judged'
    assert (second['judged'], second['skipped']) == (3, 2)
    assert (third['judged'], third['skipped']) == (1, 5) and len(srv.requests) == 6

def test_errored_and_timed_out_episodes_are_not_judged(run, tmp_path):
    "A broken episode is never asked about, counted as errored, has no judgment on file (so no label can come from it) and is n/a for the judge's precision"
    import shutil
    from coda.judge import checker_judgments
    r = tmp_path/'run'
    shutil.copytree(run, r)
    store = RunStore(r)
    broken = {ANS_TASKS[0].id: dict(status='error', stop='ERROR', score=0.0), ANS_TASKS[2].id: dict(status='timeout', stop='TIMEOUT', score=0.0)}
    for tid, res in broken.items():
        p = store.episode_dir('Algebra', tid, 0)/'result.json'
        p.write_text(json.dumps({**json.loads(p.read_text()), **res}))
    with ScriptedServer(lambda body: T) as srv:
        async def go():
            m = OpenAIChat(srv.url, 'judge', retries=0)
            try: return await judge_run(r, Judge(m, 'single', name='yes'), workers=2, progress=False)
            finally: await m.aclose()
        assert run_sync(go()) == dict(judged=4, skipped=0, failed=0, accepted=4, errored=2)
        assert not any(t.instruction in json.dumps(q) for q in srv.requests for t in ANS_TASKS if t.id in broken)
        assert run_sync(go()) == dict(judged=0, skipped=4, failed=0, accepted=0, errored=2)      # resumed: still not judged
    got = {x['key'][1]: x for x in read_judgments(r, 'yes')}
    assert set(got) == {t.id for t in ANS_TASKS} - set(broken)
    assert all(not judgment_path(r, 'yes', ('Algebra', tid, 0)).exists() for tid in broken)
    assert sum(x['labels']['clean_success'] for x in got.values()) == 4
    pred = dict(zip([x['task'] for x in store.records()], judge_labels(r, 'yes')[1]))            # records: all scored, in order
    assert [pred[tid] for tid in broken] == [-1, -1] and sorted(pred.values()).count(1) == 4    # n/a for the judge
    assert checker_judgments(r) == 6
    chk = {x['key'][1]: x for x in read_judgments(r, 'checker')}
    assert all(not chk[tid]['accepted'] and chk[tid]['labels']['positives'] == [] for tid in broken)

def test_judgment_with_lone_surrogates_is_filed(run, tmp_path):
    "A judge reply holding JSON-style surrogate escapes (a pair and a lone one) is filed, sanitised, instead of crashing the run"
    import shutil
    r = tmp_path/'run'
    shutil.copytree(run, r)
    reply = T.replace('"Error_Type": ""', '"Error_Type": "\\ud83d\\ude00 \\udc80"')
    with ScriptedServer(lambda body: reply) as srv:
        async def go():
            m = OpenAIChat(srv.url, 'judge', retries=0)
            try: return await judge_run(r, Judge(m, 'single', name='s'), workers=2, progress=False)
            finally: await m.aclose()
        c = run_sync(go())
    assert c['judged'] == 6 and c['failed'] == 0, c
    recs = read_judgments(r, 's')
    assert len(recs) == 6 and all(x['verdict']['error_type'] == '\U0001F600 \ufffd' for x in recs)

def test_generated_task_without_checks_is_unscored_left_out_not_a_checker_judgment_but_judged(tmp_path):
    "An episode of a generated task without checks, through the real stack: unscored, out of the table, judged only by a judge"
    from coda.judge import checker_judgments
    from coda.rollout import evaluate
    from coda.taskgen import to_task
    gen = to_task({'instruction': 'Plot the function sin(x) in Algebra.', 'steps': 3}, 'Algebra')
    assert gen.evaluate == []
    checked = ANS_TASKS[0]
    def policy(body):
        text = ' '.join(p.get('text', '') for m in body['messages'] for p in (m['content'] if isinstance(m['content'], list) else []))
        if checked.instruction in text: return f"Thought: The answer is {checked.evaluate[0]['args'][0]}.\nAction: ```ANS {checked.evaluate[0]['args'][0]}```"
        return "Thought: The plot is drawn.\nAction: ```ANS done```"
    with ScriptedServer(policy) as srv:
        out = evaluate([checked, gen], SciDesk, OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor'), tmp_path/'run',
                       n=2, workers=2, progress=False)
    recs = {(r['task'], r['sample']): r for r in out['records']}
    assert [(recs[(gen.id, s)]['status'], recs[(gen.id, s)]['score']) for s in range(2)] == [('unscored', None)] * 2
    row = out['table'].loc['Algebra']
    assert (row['tasks'], row['episodes'], row['missing'], row['unscored'], row['Average@2']) == (1, 2, 0, 1, 1.0)
    assert '| unscored |' in (tmp_path/'run'/'metrics.md').read_text()
    assert checker_judgments(tmp_path/'run') == 2 and {x['key'][1] for x in read_judgments(tmp_path/'run', 'checker')} == {checked.id}
    with ScriptedServer(lambda body: T) as srv:
        async def go():
            m = OpenAIChat(srv.url, 'judge', retries=0)
            try: return await judge_run(tmp_path/'run', Judge(m, 'single', name='j'), workers=2, progress=False)
            finally: await m.aclose()
        assert run_sync(go())['judged'] == 4
    js = {(x['key'][1], x['key'][2]): x for x in read_judgments(tmp_path/'run', 'j')}
    assert js[(gen.id, 0)]['accepted'] and js[(gen.id, 0)]['status'] == 'unscored' and js[(gen.id, 0)]['labels']['clean_success']
    assert judge_labels(tmp_path/'run', 'j') == ([1, 1], [1, 1])             # no truth for the unscored ones: out of P and R

def test_unjudged_episodes_count_as_na(run, tmp_path):
    import shutil
    r = tmp_path/'run'
    shutil.copytree(run, r)
    y_true, y_pred = judge_labels(r, 'nobody')
    assert y_pred == [-1] * 6 and judge_prf(y_true, y_pred)['na'] == 6

# ------------------------------------------------------------------ `coda judge`: killed and resumed
def judge_cmd(url, model, r, *extra):
    exe = Path(sys.executable).parent/'coda'
    cmd = [str(exe)] if exe.exists() else [sys.executable, '-c', 'from coda.cli import main; main()']
    return cmd + ['judge', str(r), '--judge-url', url, '--judge-model', model, *extra]

def test_judge_command_killed_and_resumed(run, tmp_path):
    import shutil
    r = tmp_path/'run'
    shutil.copytree(run, r)
    with ScriptedServer(scripted_judge_policy, latency=0.4) as srv:
        proc = subprocess.Popen(judge_cmd(srv.url, 'judge', r, '--preset', 'single', '--workers', '1'),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        end = time.time() + 60
        while not list((r/'judgments').rglob('*.json')) and time.time() < end: time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        done = len(list((r/'judgments').rglob('*.json')))
        assert 1 <= done < 6, done
        p = subprocess.run(judge_cmd(srv.url, 'judge', r, '--preset', 'single'), capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert f'{done} already judged' in p.stdout and 'Precision' in p.stdout, p.stdout
    assert len(list((r/'judgments'/'single').rglob('*.json'))) == 6
    assert sorted(tuple(x['key']) for x in read_judgments(r, 'single')) == sorted(('Algebra', t.id, 0) for t in ANS_TASKS)

def test_tiny_served_judge_killed_and_resumed(served, tiny, run, tmp_path):
    "A tiny random Qwen2.5-VL behind `transformers serve` judges the stored run, is killed once and resumed: its "
    "replies are noise, so every decision is a rejection (parsed or not), stored and scored, never a crash"
    import shutil
    r = tmp_path/'run'
    shutil.copytree(run, r)
    args = ('--preset', 'single', '--frames', '2', '--resolution', '224x140', '--max-tokens', '48')
    t0 = time.perf_counter()
    proc = subprocess.Popen(judge_cmd(served, str(tiny), r, *args, '--workers', '1'), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    end = time.time() + 300
    while not list((r/'judgments').rglob('*.json')) and time.time() < end and proc.poll() is None: time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(list((r/'judgments').rglob('*.json')))
    assert 1 <= done < 6, done
    p = subprocess.run(judge_cmd(served, str(tiny), r, *args, '--workers', '2'), capture_output=True, text=True, timeout=600)
    secs = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    assert f'{done} already judged' in p.stdout, p.stdout
    recs = read_judgments(r, 'single')
    assert len(recs) == 6 and all(x['votes'][0]['reply'] is not None for x in recs)
    assert sorted(tuple(x['key']) for x in recs) == sorted(('Algebra', t.id, 0) for t in ANS_TASKS)
    print(f"tiny judge: 6 episodes judged in {secs:.1f} s (killed after {done}, resumed); accepted {sum(x['accepted'] for x in recs)}")

# ------------------------------------------------------------------ AgentRewardBench: the labels, and a trajectory made here
def test_arb_labels_and_a_trajectory_in_its_format(tmp_path):
    from coda.judge import arb_annotations, arb_judge, arb_trajectory_path, load_arb_trajectory
    try: ann = arb_annotations()
    except FileNotFoundError:
        if os.environ.get('CI') == 'true': pytest.fail('make setup installs agent-reward-bench (--no-deps)')
        pytest.skip('agent-reward-bench is not installed')
    assert len(ann) == 1106 and int(ann.label.sum()) == 295                          # ARB's test split
    dev = arb_annotations('dev')
    assert len(dev) == 196 and dev.label.isna().sum() == 1
    root = tmp_path/'arb'
    rows = [ann[ann.label == 1].iloc[0], ann[ann.label == 0].iloc[0]]
    for k, r in enumerate(rows):
        shots = root/'screenshots'/r['benchmark']/r['model_name']/r['task_id']
        shots.mkdir(parents=True)
        steps = []
        for i in range(3):
            Image.new('RGB', (320, 200), (40 * i, 80, 120)).save(shots/f'screenshot_step_{i}.png')
            steps.append({'num': i, 'reasoning': f'step {i} of {r["task_id"]}', 'action': f"click('a{i}')",
                          'screenshot_path': str((shots/f'screenshot_step_{i}.png').relative_to(root))})
        p = arb_trajectory_path(root, r)
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps({'benchmark': r['benchmark'], 'agent': r['model_name'], 'goal': f'goal {k}', 'valid': True, 'steps': steps}))
    t = load_arb_trajectory(arb_trajectory_path(root, rows[0]), root)
    assert t.instruction == 'goal 0' and len(t.frames) == 3 and t.steps[1] == "step 1 of %s -> click('a1')" % rows[0]['task_id']
    with ScriptedServer(lambda b: T if "'goal 0'" in b['messages'][0]['content'][0]['text'] else F) as srv:
        async def go():
            m = OpenAIChat(srv.url, 'judge')
            try: return await arb_judge(root, Judge(m, 'single'), limit=None, workers=4)
            finally: await m.aclose()
        y_true, y_pred = run_sync(go())
    assert len(y_true) == 1106 and y_pred.count(-1) == 1104 and len(srv.requests) == 2    # the rest are not downloaded: n/a
    m = judge_prf(y_true, y_pred)
    assert (m['tp'], m['fp'], m['fn'], m['tn'], m['na']) == (1, 0, 0, 1, 1104) and m['precision'] == 1.0 and m['recall'] == 1.0
