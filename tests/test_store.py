"""Run folders that nothing damaged can break: ids mapped injectively to folder names and nothing written or
deleted outside the run, a damaged file costing only its own episode (skipped with a warning naming it, run again
on resume), records that can always be written (lone surrogates), and a resume with other settings refused."""
import asyncio, dataclasses, json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from agent_fixtures import CounterEnv, ScriptedServer, Task, counting_policy
from needs import caught
from coda.agent import Agent, AgentConfig
from coda.aio import run_sync
from coda.envs.scidesk import SciDesk, scidesk_tasks
from coda.models import OpenAIChat
from coda.rollout import run_episodes
from coda.store import RunStore, read_jsonl
from coda.export import steps_dataset

DONE = dict(status='done', stop='ANS', score=1.0, steps=1)

def files_under(p:Path)->set: return {q for q in Path(p).rglob('*')}

def finished(store, app, task, sample=0, result=DONE, step=None):
    w = store.start(app, task, sample, {'instruction': f'do {task}'})
    w.add_step(step or {'step': 0, 'thought': 'Thought: done', 'actions': [{'kind': 'answer', 'text': '4'}]}, b'\x89PNG')
    w.finish(result)
    return store.episode_dir(app, task, sample)

# ------------------------------------------------------------------ folder names
def test_ids_that_differ_get_different_folders(tmp_path):
    "`A 01` and `A_01` (and `a/b`, `a_b`) used to share a folder, so one of them never ran"
    st = RunStore(tmp_path/'run', {})
    ids = ['A 01', 'A_01', 'a/b', 'a_b', 'A%2001', '温度', 'x' * 300, 'x' * 299 + 'y']
    for i in ids: finished(st, 'Algebra', i)
    assert sorted(r['task'] for r in st.records()) == sorted(ids)
    assert all(st.is_done('Algebra', i, 0) for i in ids)
    assert len({st.episode_dir('Algebra', i, 0) for i in ids}) == len(ids)
    assert all(len(st.episode_dir('Algebra', i, 0).parent.name) <= 128 for i in ids)

def test_safe_ids_keep_their_folders(tmp_path):
    "Run folders from earlier versions (plain ids) resume with the same paths"
    st = RunStore(tmp_path/'run', {})
    assert st.episode_dir('KAlgebra', 'A-01', 2) == tmp_path/'run'/'episodes'/'KAlgebra'/'A-01'/'2'
    assert st.episode_dir('Algebra', 'gen.3_x', 0).parent.name == 'gen.3_x'

def test_dot_dot_ids_stay_inside_the_run(tmp_path):
    "A task with type '..' and id '..' wrote outside the run and deleted a folder there"
    outside = tmp_path/'0'
    outside.mkdir()
    (outside/'keep.txt').write_text('precious')
    outside_run = lambda: {q for q in files_under(tmp_path) if q != tmp_path/'run' and tmp_path/'run' not in q.parents}
    before = outside_run()
    st = RunStore(tmp_path/'run', {})
    keys = [('..', '..'), ('.', '.'), ('../..', '../../x'), ('', '')]
    for app, task in keys:
        w = st.start(app, task, 0)
        w.add_step({'step': 0})
        w.abandon()
        st.start(app, task, 0).finish(DONE)                                     # the restart wipes its own folder only
    assert (outside/'keep.txt').read_text() == 'precious' and outside_run() == before
    assert sorted((r['app'], r['task']) for r in st.records()) == sorted(keys)
    for app, task in keys: assert st.discard(app, task, 0)
    assert (outside/'keep.txt').read_text() == 'precious' and outside_run() == before and st.records() == []

def test_a_symlink_out_of_the_run_is_refused(tmp_path):
    outside = tmp_path/'elsewhere'
    outside.mkdir()
    st = RunStore(tmp_path/'run', {})
    os.symlink(outside, tmp_path/'run'/'episodes'/'Algebra')
    with pytest.raises(ValueError, match='outside the run folder'): st.start('Algebra', 'A-01', 0)
    with pytest.raises(ValueError, match='outside the run folder'): st.discard('Algebra', 'A-01', 0)
    assert list(outside.iterdir()) == []

def test_a_reader_creates_nothing(tmp_path):
    "Opening a folder to read it (coda view, coda judge) leaves it as it was"
    (tmp_path/'notes').mkdir()
    st = RunStore(tmp_path/'notes')
    assert st.records() == [] and list(st.episodes()) == [] and st.config == {}
    assert list((tmp_path/'notes').iterdir()) == []

# ------------------------------------------------------------------ damaged files
def test_torn_line_in_the_middle_costs_only_its_episode(tmp_path):
    "A corrupt line in the middle of one steps.jsonl used to abort records and the datasets export for the whole run (the viewer: tests/test_viewer.py)"
    st = RunStore(tmp_path/'run', {'screen': [1280, 800]})
    good = finished(st, 'Algebra', 'A-01')
    bad = st.episode_dir('Algebra', 'A-02', 0)
    w = st.start('Algebra', 'A-02', 0, {'instruction': 'x'})
    for i in range(3): w.add_step({'step': i, 'thought': f't{i}'})
    w.finish(DONE)
    lines = (bad/'steps.jsonl').read_text().splitlines()
    (bad/'steps.jsonl').write_text('\n'.join([lines[0], lines[1][:9], lines[2]]) + '\n')
    steps, msgs = caught(lambda: read_jsonl(bad/'steps.jsonl'))
    assert [s['step'] for s in steps] == [0, 2] and any('steps.jsonl:2' in m for m in msgs)
    recs, msgs = caught(st.records)
    assert [r['task'] for r in recs] == ['A-01'] and any(str(bad/'steps.jsonl') in m for m in msgs)
    eps, _ = caught(lambda: list(st.episodes()))
    assert [(e.meta['task'], e.result is None, len(e.steps)) for e in eps] == [('A-01', False, 1), ('A-02', True, 2)]
    assert caught(lambda: st.is_done('Algebra', 'A-02', 0))[0] is False and st.is_done('Algebra', 'A-01', 0)
    ds, _ = caught(lambda: steps_dataset(st, finished_only=False))
    assert sorted(ds['task']) == ['A-01', 'A-02', 'A-02']
    assert good.exists()

def test_truncated_meta_is_named_skipped_and_run_again(tmp_path):
    "A truncated meta.json crashed every resume without naming the file"
    st = RunStore(tmp_path/'run', {})
    finished(st, 'Algebra', 'A-01')
    d = finished(st, 'Algebra', 'A-02')
    (d/'meta.json').write_text('{"app": "Alg')
    recs, msgs = caught(RunStore(tmp_path/'run').records)
    assert [r['task'] for r in recs] == ['A-01'] and any(str(d/'meta.json') in m for m in msgs)
    assert not caught(lambda: st.is_done('Algebra', 'A-02', 0))[0]
    caught(lambda: st.start('Algebra', 'A-02', 0).finish(DONE))                 # the resume wipes it and runs it again
    assert sorted(r['task'] for r in st.records()) == ['A-01', 'A-02']

def test_deleted_meta_or_corrupt_result_is_run_again(tmp_path):
    "A deleted meta.json left the episode missing for good (its result made it 'done'); a result that is not an object too"
    st = RunStore(tmp_path/'run', {})
    a, b, c = (finished(st, 'Algebra', t) for t in ('A-01', 'A-02', 'A-03'))
    (a/'meta.json').unlink()
    (b/'result.json').write_text('[1, 2]')
    (c/'result.json').write_text('{"status": "do')
    for t in ('A-01', 'A-02', 'A-03'): assert not caught(lambda: st.is_done('Algebra', t, 0))[0], t
    recs, msgs = caught(st.records)
    assert recs == [] and any('meta.json is missing' in m for m in msgs) and any('result.json' in m for m in msgs)

def test_finished_episode_with_missing_steps_counts_as_unfinished(tmp_path):
    st = RunStore(tmp_path/'run', {})
    d = finished(st, 'Algebra', 'A-01')
    (d/'steps.jsonl').unlink()
    assert not caught(lambda: st.is_done('Algebra', 'A-01', 0))[0] and caught(st.records)[0] == []

def test_unfinished_episode_with_a_torn_last_line_is_quiet(tmp_path):
    "A kill in the middle of a write tears the last line: normal, ignored without a warning"
    st = RunStore(tmp_path/'run', {})
    w = st.start('Algebra', 'A-01', 0)
    w.add_step({'step': 0})
    w.abandon()
    with open(st.episode_dir('Algebra', 'A-01', 0)/'steps.jsonl', 'a') as f: f.write('{"step": 1, "th')
    eps, msgs = caught(lambda: list(st.episodes()))
    assert len(eps) == 1 and len(eps[0].steps) == 1 and msgs == []

def test_hostile_screenshot_names_are_not_followed(tmp_path):
    "A step record naming a screenshot outside its episode folder gives no image"
    secret = tmp_path/'secret.png'
    secret.write_bytes(b'\x89PNG secret')
    st = RunStore(tmp_path/'run', {})
    finished(st, 'Algebra', 'A-01', step={'step': 0, 'screenshot': str(secret)})
    d = st.episode_dir('Algebra', 'A-01', 0)
    lines = [json.loads(l) for l in (d/'steps.jsonl').read_text().splitlines()]
    lines[0]['screenshot'] = '../../../../secret.png'
    (d/'steps.jsonl').write_text(json.dumps(lines[0]) + '\n')
    assert steps_dataset(st)['image'] == [None]

# ------------------------------------------------------------------ text that can always be written
def test_lone_surrogates_are_written(tmp_path):
    "type(content='\\ud83d\\ude00') gives Python two lone surrogates: the step record could not be written"
    st = RunStore(tmp_path/'run', {})
    w = st.start('Algebra', 'A-01', 0, {'instruction': 'say \ud83d'})
    w.add_step({'step': 0, 'planner': "type(content='\ud83d\ude00')", 'actions': [{'kind': 'type', 'text': '\ud83d\ude00\udc80'}]})
    w.finish(dict(DONE, answer='\udc80'))
    e = next(st.episodes())
    assert e.steps[0].actions[0]['text'] == '\U0001F600\ufffd' and e.meta['instruction'] == 'say \ufffd'
    assert e.result['answer'] == '\ufffd' and st.is_done('Algebra', 'A-01', 0)

# ------------------------------------------------------------------ resuming
def test_resume_with_other_settings_is_refused(tmp_path):
    from coda.store import RunMismatch
    cfg = {'n': 1, 'tasks': 4, 'screen': (1280, 800), 'agent': {'temperature': 0.0, 'max_steps': 15}, 'planner': 'a'}
    RunStore(tmp_path/'run', cfg)
    RunStore(tmp_path/'run', dict(cfg))                                          # the same settings (a tuple as in run.json): resumed
    with pytest.raises(RunMismatch) as e:
        RunStore(tmp_path/'run', {**cfg, 'n': 2, 'agent': {'temperature': 1.0, 'max_steps': 15}, 'workers': 4})
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and 'n: 1 then, 2 now' in msg and 'agent.temperature: 0.0 then, 1.0 now' in msg
    assert 'workers' in msg and 'max_steps' not in msg and 'planner' not in msg and '--out' in msg and '--fresh' in msg
    RunStore(tmp_path/'run', {**cfg, 'workers': 4}, volatile=('workers',))
    assert json.loads((tmp_path/'run'/'run.json').read_text())['n'] == 1

def test_unreadable_run_json_is_rewritten_with_a_warning(tmp_path):
    RunStore(tmp_path/'run', {'n': 1})
    (tmp_path/'run'/'run.json').write_text('{"n": ')
    _, msgs = caught(lambda: RunStore(tmp_path/'run', {'n': 2}))
    assert any('run.json' in m for m in msgs) and RunStore(tmp_path/'run').config['n'] == 2

def test_discard_and_errored(tmp_path):
    st = RunStore(tmp_path/'run', {})
    finished(st, 'Algebra', 'A-01')
    finished(st, 'Algebra', 'A-02', result=dict(status='error', stop='ERROR', score=0.0))
    finished(st, 'Algebra', 'A 03', result=dict(status='timeout', stop='TIMEOUT', score=0.0))
    w = st.start('Algebra', 'A-04', 0)
    w.abandon()                                       # unfinished: not an errored episode
    assert sorted(st.errored()) == [('Algebra', 'A 03', 0), ('Algebra', 'A-02', 0)]
    assert st.discard('Algebra', 'A-02', 0) and not st.discard('Algebra', 'A-02', 0)
    assert not st.is_done('Algebra', 'A-02', 0) and st.errored() == [('Algebra', 'A 03', 0)]
    assert st.is_done('Algebra', 'A-01', 0)

# ------------------------------------------------------------------ through the real rollout
def test_colliding_ids_both_run_through_run_episodes(tmp_path):
    "Two tasks whose ids used to share a folder: both run, both are recorded, a resume runs neither again"
    base = [t for t in scidesk_tasks(['Algebra']) if len(t.evaluate) == 1 and t.evaluate[0].get('value') == 'ANS'][:2]
    tasks = [dataclasses.replace(base[0], id='A 01'), dataclasses.replace(base[1], id='A_01')]
    want = {t.instruction: t.evaluate[0]['args'][0] for t in tasks}
    def policy(body):
        text = ' '.join(p.get('text', '') for m in body['messages'] for p in (m['content'] if isinstance(m['content'], list) else []))
        a = next(v for k, v in want.items() if k in text)
        return f"Thought: The answer is {a}.\nAction: ```ANS {a}```"
    with ScriptedServer(policy) as srv:
        async def go():
            m = OpenAIChat(srv.url, 'planner')
            try: return await run_episodes(tasks, SciDesk, Agent(m, m, AgentConfig()), RunStore(tmp_path/'run', {}), n=1, workers=2, progress=False)
            finally: await m.aclose()
        res = run_sync(go())
        assert len(res) == 2 and run_sync(go()) == []
    recs = RunStore(tmp_path/'run').records()
    assert sorted((r['task'], r['score']) for r in recs) == [('A 01', 1.0), ('A_01', 1.0)]

# ------------------------------------------------------------------ writes off the event loop
SLOW = 0.25   # seconds an fsync takes on the busy disk of these tests

def slow_fsync(monkeypatch, seconds=SLOW, fail=lambda path: False):
    "os.fsync taking `seconds`, raising EIO for the files `fail(path)` picks"
    real = os.fsync
    def fsync(fd):
        if fail(os.readlink(f'/proc/self/fd/{fd}')): raise OSError(5, 'Input/output error')
        time.sleep(seconds)
        real(fd)
    monkeypatch.setattr(os, 'fsync', fsync)

def rollout(root, tasks, target=3, during=None):
    "run_episodes of the counter app against the scripted server, 2 at a time: (results, what `during(the run)` gave, run alongside)"
    with ScriptedServer(counting_policy(target)) as srv:
        async def go():
            p, e = OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor')
            try:
                run = asyncio.ensure_future(run_episodes(tasks, lambda: CounterEnv(target=target), Agent(p, e, AgentConfig()), RunStore(root, {}),
                                                         workers=2, progress=False))
                side = await during(run) if during else None
                return await run, side
            finally:
                await p.aclose()
                await e.aclose()
        return run_sync(go())

async def longest_stall(run)->float:
    "The longest time the event loop took to wake this coroutine (asleep 10 ms at a time) until `run` is over"
    gap, t = 0.0, time.perf_counter()
    while not run.done():
        await asyncio.sleep(0.01)
        now = time.perf_counter()
        gap, t = max(gap, now - t), now
    return gap

def test_a_slow_disk_does_not_stall_the_event_loop(tmp_path, monkeypatch):
    "every fsync ran on the event loop: with a disk taking 0.25 s per fsync, every other episode stood still for each one"
    slow_fsync(monkeypatch)
    res, stall = rollout(tmp_path/'run', [Task('C-01'), Task('C-02')], during=longest_stall)
    assert sorted((r['task'], r['score']) for r in res) == [('C-01', 1.0), ('C-02', 1.0)]
    assert stall < 0.8 * SLOW, f'the event loop stood still for {stall:.2f} s while the disk worked'
    st = RunStore(tmp_path/'run')
    for t in ('C-01', 'C-02'):
        d = st.episode_dir('Counter', t, 0)
        assert [s['step'] for s in read_jsonl(d/'steps.jsonl')] == [0, 1, 2, 3] and (d/'final.png').exists()
        assert all((d/f'step_{i:03d}.png').read_bytes().startswith(b'\x89PNG') for i in range(4))

def test_a_result_handed_over_during_slow_step_writes_lands_after_them(tmp_path, monkeypatch):
    "the writes of one episode run in the order they were handed over, whichever writer thread takes them"
    slow_fsync(monkeypatch, 0.05)
    st = RunStore(tmp_path/'run', {})
    w = st.start('Algebra', 'A-01', 0)
    async def go():
        writes = [w.add_step_soon({'step': i}, b'\x89PNG') for i in range(4)] + [w.add_final_soon(b'\x89PNG final')]
        writes.append(w.soon(w.finish, DONE))                                   # none of them awaited yet
        await asyncio.gather(*writes)
    run_sync(go())
    d = st.episode_dir('Algebra', 'A-01', 0)
    assert st.is_done('Algebra', 'A-01', 0) and [s['step'] for s in read_jsonl(d/'steps.jsonl')] == [0, 1, 2, 3]
    assert (d/'final.png').read_bytes() == b'\x89PNG final'

def test_a_disk_error_in_the_writer_threads_ends_its_episode_as_an_error(tmp_path, monkeypatch):
    "a write that fails off the event loop is still reported: its episode ends as an error naming the step, the other one is untouched"
    slow_fsync(monkeypatch, 0.0, fail=lambda path: '/C-02/' in path and 'step_001' in path)
    res, _ = rollout(tmp_path/'run', [Task('C-01'), Task('C-02')])
    by = {r['task']: r for r in res}
    assert by['C-01']['score'] == 1.0
    assert by['C-02']['status'] == 'error' and by['C-02']['reason'].startswith('step 1 could not be recorded: OSError'), by['C-02']
    st = RunStore(tmp_path/'run')
    assert sorted((r['task'], r['status']) for r in st.records()) == [('C-01', 'done'), ('C-02', 'error')]
    assert [s['step'] for s in read_jsonl(st.episode_dir('Counter', 'C-02', 0)/'steps.jsonl')] == [0]

KILLED = """
import asyncio, os, sys, time
from agent_fixtures import CounterEnv, ScriptedServer, Task, counting_policy
from coda.agent import Agent, AgentConfig
from coda.models import OpenAIChat
from coda.rollout import run_episodes
from coda.store import RunStore
real = os.fsync
def fsync(fd): time.sleep(0.2); real(fd)              # a slow disk: the agent is faster than its writes
os.fsync = fsync
class Telling(RunStore):
    "A store that says on stdout when the agent hands it a step"
    def start(self, *a, **k):
        w = super().start(*a, **k)
        hand = w.add_step_soon
        def told(rec, png=None):
            f = hand(rec, png); print('handed', rec['step'], flush=True); return f
        w.add_step_soon = told
        return w
async def go(url):
    p, e = OpenAIChat(url, 'planner'), OpenAIChat(url, 'executor')
    await run_episodes([Task('C-01', steps=12)], lambda: CounterEnv(target=9), Agent(p, e, AgentConfig()), Telling(sys.argv[1], {}), workers=1, progress=False)
with ScriptedServer(counting_policy(9)) as srv: asyncio.run(go(srv.url))
"""

def test_a_killed_run_loses_at_most_the_steps_in_flight(tmp_path):
    from PIL import Image
    "SIGKILL right after the agent hands over step 4 (the disk slower than the agent): steps 0-3 are on disk, whole"
    import coda
    (tmp_path/'killed.py').write_text(KILLED)
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path(__file__).parent), str(Path(coda.__file__).parents[1])])}
    proc = subprocess.Popen([sys.executable, str(tmp_path/'killed.py'), str(tmp_path/'run')], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        for line in proc.stdout:
            if line.strip() == 'handed 4':
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        if proc.poll() is None: proc.kill()
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, 'the run ended before the agent handed step 4 to the store'
    d = RunStore(tmp_path/'run').episode_dir('Counter', 'C-01', 0)
    steps = [s['step'] for s in read_jsonl(d/'steps.jsonl')]
    assert steps[:4] == [0, 1, 2, 3] and len(steps) <= 5, steps
    for i in range(4): Image.open(d/f'step_{i:03d}.png').verify()               # whole pictures
    assert not (d/'result.json').exists()

# ------------------------------------------------------------------ judgments: the bytes on file
VERDICT = dict(correct=False, redundant=[], optimized=False, first_error=2, error_type='typed into the wrong field', correct_action='', parsed=True, error='')
# what coda filed before step labels were a record (made by its code at aa8eeed): a checker's judgment and a judge's
FILED_CHECKER = dict(key=['Algebra', 'A-01', 0], judge='checker', accepted=True, label=1, votes=[],
                     labels=dict(positives=[0, 1], negative=None, clean_success=True), n_steps=2, score=1.0, status='done')
FILED_JUDGE = dict(key=['Algebra', 'A-01', 1], judge='single', accepted=False, label=0,
                   votes=[dict(temperature=0.0, top_p=None, resolution=None, crop=None, reply='r', verdict=VERDICT, seconds=0.5)], verdict=VERDICT,
                   labels=dict(positives=[0], negative=1, clean_success=False), n_steps=3, score=0.0, status='done')

def filed_bytes(d:dict)->bytes: return json.dumps(d, indent=1).encode()

def test_judgments_are_filed_as_before_and_filed_again_byte_for_byte(tmp_path):
    "The checkers' and a judge's judgments are the same bytes as before Labels; an old run's files, read and filed again, are unchanged"
    from coda.judge import checker_judgments, parse_verdict, label_steps
    from coda.records import Judgment
    from coda.store import file_judgment, judgment_path
    from coda.pipeline import copy_judgments
    run = tmp_path/'run'
    store = RunStore(run, {}, fsync=False)
    w = store.start('Algebra', 'A-01', 0, {'instruction': 'do A-01'})
    for i in range(2): w.add_step({'step': i, 'thought': 'Thought: go on', 'actions': []}, b'\x89PNG')
    w.finish(dict(DONE, steps=2))
    assert checker_judgments(run) == 1
    assert judgment_path(run, 'checker', ('Algebra', 'A-01', 0)).read_bytes() == filed_bytes(FILED_CHECKER)
    reply = ('<res_dict>{"Correctness": False, "Redundant": [], "Optimized": False, "First_Error_Step": 2, "Error_Type": "typed into the wrong field", '
             '"Correct_Action": ""}</res_dict>')
    v = parse_verdict(reply)
    j = Judgment.from_verdict(('Algebra', 'A-01', 1), 'single', v, label_steps(v, 3), 3, {'status': 'done', 'score': 0.0},
                              accepted=False, label=0, votes=FILED_JUDGE['votes'])
    assert file_judgment(run, j, fsync=False).read_bytes() == filed_bytes(FILED_JUDGE)
    odd = dict(FILED_CHECKER, key=['Algebra', 'A-02', 0], labels=dict(FILED_CHECKER['labels'], by='hand'), note='another writer')
    for d in (FILED_CHECKER, FILED_JUDGE, odd):   # a run filed before: copied to another name, as the pipeline's judge selection does
        p = judgment_path(run, 'old', tuple(d['key']))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(filed_bytes(d))
    assert copy_judgments(run, 'old', 'new') == 3
    for d in (FILED_CHECKER, FILED_JUDGE, odd):
        assert judgment_path(run, 'new', tuple(d['key'])).read_bytes() == filed_bytes(dict(d, judge='new'))
