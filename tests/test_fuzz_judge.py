"""Fuzz: the judge's verdict parser under random and hostile replies, and the run-folder readers (records, episodes,
coda.export.steps_dataset, to_html, the judgments) under random damage to a small run folder. Seeded, bounded (about 10 s in
all); the counts are printed at the end of the pytest run."""
import io, json, random, shutil, warnings
from dataclasses import asdict
from pathlib import Path
import pytest
from PIL import Image
from fuzz import fuzz, nasty_text, rng
import coda.judge
from coda.judge import parse_verdict, Verdict, judge_labels, load_trajectory
from coda.store import read_judgments
from coda.store import RunStore
from coda.export import steps_dataset
from coda.viewer import to_html

MAX_REPLY = getattr(coda.judge, 'MAX_REPLY', 200_000)

T = ('The final frame shows 4.\n<res_dict>{"Correctness": True, "Redundant": [], "Optimized": True, "First_Error_Step": None, '
     '"Error_Type": "", "Correct_Action": ""}</res_dict>')
F = ('<res_dict>{"Correctness": False, "Redundant": [5, 6], "Optimized": False, "First_Error_Step": 4, '
     '"Error_Type": "wrong cell", "Correct_Action": "click B2"}</res_dict>')
REAL = [T, F, '```json\n{"Correctness": true, "Redundant": [], "First_Error_Step": null}\n```',
        'I think it worked: {"Correctness": True, "Redundant": []}', "<res_dict>{'Correctness': False, 'First_Error_Step': '3'}"]
PIECES = ['<res_dict>', '</res_dict>', '```', '```python\n', '{', '}', '[', ']', '"Correctness"', "'correctness'", 'Correctness is False',
          'Correctness: True', ': True', ': False', ', ', 'None', 'null', 'true', '0x' + 'f' * 5000, '9' * 5000, '1e999', '-1', '**x',
          '__import__("os")', '\ud83d', '\ude00', '\x00', '\n']

def mutate(r:random.Random, s:str)->str:
    "A real verdict with a few random edits: pieces inserted, spans deleted or duplicated, characters swapped"
    for _ in range(r.randint(1, 6)):
        i = r.randint(0, len(s))
        k = r.random()
        if k < 0.35: s = s[:i] + r.choice(PIECES + [nasty_text(r, 20)]) + s[i:]
        elif k < 0.6: s = s[:i] + s[i + r.randint(1, 20):]
        elif k < 0.8:
            j = r.randint(i, len(s))
            s = s[:i] + s[i:j] * 2 + s[j:]
        elif s: s = s[:i] + chr(r.randint(0, 0x2FFF)) + s[i + 1:]
    return s

def hostile_replies(seed:int=0, n:int=6000):
    "Random, mutated, huge and deeply nested judge replies"
    r = rng(seed)
    big = ['<res_dict>' * 20000, '```' * 30000, '{"Correctness": True' * 5000, 'correctness is ' * 10000 + 'true',
           '<res_dict>{"Correctness": True, "Redundant": ' + '[' * 50000 + '}</res_dict>', '{' * 100000 + '"Correctness"' + '}' * 100000,
           T + ' ' * MAX_REPLY, 'a' * 1_000_000, '<res_dict>{"Correctness": True, "Error_Type": "' + 'x' * 19000 + '"}</res_dict>',
           '<res_dict>{"Correctness": True, "Redundant": [' + ', '.join(['9' * 300] * 60) + ']}</res_dict>',
           '<res_dict>{"Correctness": True, "First_Error_Step": 0x' + 'f' * 5000 + '}</res_dict>',
           '<res_dict>{"Correctness": 0x' + 'f' * 5000 + '}</res_dict>']
    yield from big
    for i in range(n):
        k = i % 4
        if k == 0: yield nasty_text(r, 400)
        elif k == 1: yield mutate(r, r.choice(REAL))
        elif k == 2: yield ''.join(r.choice(PIECES) for _ in range(r.randint(1, 30)))
        else: yield nasty_text(r, 100) + r.choice(REAL) + nasty_text(r, 100)

def check_verdict(text):
    "parse_verdict never raises, answers a Verdict that can be filed, and accepts only a parsed, error-free True"
    v = parse_verdict(text)
    assert isinstance(v, Verdict) and isinstance(v.correct, bool) and isinstance(v.parsed, bool)
    json.dumps(asdict(v))                                                # can be filed
    if v.correct: assert v.parsed and not v.error and 'correctness' in text.lower()
    if not v.parsed: assert not v.correct and v.error
    assert all(isinstance(s, int) and 1 <= s for s in v.redundant) and (v.first_error is None or v.first_error >= 1)

def test_fuzz_parse_verdict():
    c = fuzz('judge.parse_verdict', hostile_replies(), check_verdict, limit_s=0.5)
    assert c.inputs > 6000
    c.assert_clean()

def test_fuzz_parse_verdict_never_accepts_a_malformed_last_verdict():
    "A reply whose last <res_dict> is a mutated (broken) copy of a True verdict after a good True one is never accepted"
    r = rng(1)
    def inputs():
        for _ in range(400):
            last = mutate(r, T.split('<res_dict>')[1].split('</res_dict>')[0])
            if 'res_dict>' in last: continue                                     # a tag inside would make another verdict last
            yield T + '\nWait, correcting myself:\n<res_dict>' + last + '</res_dict>'
    def fn(text):
        v = parse_verdict(text)
        last = text.rsplit('<res_dict>', 1)[1].split('</res_dict>')[0]
        if v.correct: assert parse_verdict('<res_dict>' + last + '</res_dict>').correct, last   # only the last one decided it
    c = fuzz('judge.parse_verdict (malformed last verdicts)', inputs(), fn, limit_s=0.5)
    assert c.inputs > 300
    c.assert_clean()

# ------------------------------------------------------------------ the run-folder readers under damage
def png(c:int)->bytes:
    b = io.BytesIO()
    Image.new('RGB', (32, 20), (c, c, c)).save(b, 'PNG')
    return b.getvalue()

@pytest.fixture(scope='module')
def small_run(tmp_path_factory):
    "A run of four episodes (a success, an error, an unscored one, an unfinished one) with screenshots and two judges' files"
    root = tmp_path_factory.mktemp('fuzzrun')/'run'
    st = RunStore(root, {'n': 1, 'screen': [1280, 800], 'agent': {'temperature': 0.0}})
    outcomes = [('A-01', dict(status='done', stop='ANS', score=1.0, answer='4')), ('A 02', dict(status='error', stop='ERROR', score=0.0)),
                ('G-01', dict(status='unscored', stop='DONE', score=None)), ('A-03', None)]
    for task, res in outcomes:
        w = st.start('Algebra', task, 0, {'instruction': f'Compute {task}.'})
        for i in range(3):
            w.add_step({'step': i, 'thought': f'Thought: {i} \ud83d\ude00', 'planner': 'p', 'executor': 'click(start_box="(1,2)")',
                        'actions': [{'kind': 'click', 'x': 10.0 * i, 'y': 5.0}, {'kind': 'drag', 'x': 1, 'y': 2, 'x2': 3, 'y2': 4}],
                        'kind': 'act', 'planner_s': 0.1}, png(40 * i))
        if res is None:
            w.abandon()
            continue
        w.add_final(png(200))
        w.finish(dict(res, steps=3, seconds=1.5))
    for name in ('checker', 'j'):
        for task, res in outcomes[:3]:
            p = root/'judgments'/name/'Algebra'/task.replace(' ', '%20')/'0.json'
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(dict(key=['Algebra', task, 0], judge=name, accepted=True, label=1, votes=[],
                                         labels=dict(positives=[0, 1, 2], negative=None, clean_success=True), n_steps=3)))
    return root

JUNK = [b'', b'[]', b'5', b'null', b'"x"', b'{"app": 5}', b'{"app": "Algebra", "task": [], "sample": "x"}',
        b'{"sample": true, "app": "a", "task": "b"}', b'[' * 5000 + b']' * 5000, b'{"a": ' * 3000 + b'1' + b'}' * 3000,
        b'\xff\xfe\x00garbage', b'{"step": 1e999, "actions": "click", "screenshot": "../../../etc/passwd"}\n',
        b'{"step": 99999999999999, "actions": [5, {"x": "a"}, {"kind": []}], "error": {"a": 1}, "planner": [1]}\n',
        b'{"status": "done", "score": "NaN", "steps": {}, "answer": [1]}', b'{"screen": [0, -1]}', b'9' * 5000,
        b'{"key": ["a", "b"], "labels": 5}', b'{"key": 5}']

def damage(r:random.Random, root:Path):
    "Apply 1-4 random kinds of damage to the files and folders of a run"
    for _ in range(r.randint(1, 4)):
        files = sorted(p for p in root.rglob('*') if p.is_file())
        dirs = sorted(p for p in root.rglob('*') if p.is_dir())
        k = r.random()
        if k < 0.25 and files:                                          # truncate
            p = r.choice(files)
            b = p.read_bytes()
            p.write_bytes(b[:r.randint(0, len(b))])
        elif k < 0.45 and files:                                        # garble some bytes
            p = r.choice(files)
            b = bytearray(p.read_bytes())
            for _ in range(r.randint(1, 8)):
                if b: b[r.randrange(len(b))] = r.choice(b'\n{}[]":,\\\xff\x00 0aZ')
            p.write_bytes(bytes(b))
        elif k < 0.6 and files: r.choice(files).write_bytes(r.choice(JUNK))   # valid JSON of the wrong shape, or junk
        elif k < 0.7 and files: r.choice(files).unlink()                      # a deleted file
        elif k < 0.78 and dirs: shutil.rmtree(r.choice(dirs))                 # a deleted folder
        elif k < 0.86 and dirs:                                                # a file where a folder belongs, an empty folder
            d = r.choice(dirs)
            (d/'stray').write_bytes(b'x')
            (d/'empty').mkdir(exist_ok=True)
        elif k < 0.93 and files:                                               # text with lone surrogates, as a model writes
            p = r.choice(files)
            p.write_bytes(p.read_bytes() + nasty_text(r, 60).encode('utf-8', 'surrogatepass'))
        elif files:                                                            # a line torn in the middle of a steps file
            steps = [p for p in files if p.name == 'steps.jsonl'] or files
            p = r.choice(steps)
            lines = p.read_bytes().split(b'\n')
            i = r.randrange(len(lines))
            lines[i] = lines[i][:r.randint(0, len(lines[i]))]
            p.write_bytes(b'\n'.join(lines))

def read_everything(root:Path):
    "Every reader of a run folder"
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        st = RunStore(root)
        recs = st.records()
        eps = list(st.episodes())
        st.errored()
        st.config
        for e in eps:
            st.is_done(e.meta['app'], e.meta['task'], e.meta['sample'])
            if e.result is not None: load_trajectory(e.dir)
        assert all(e.result is None or isinstance(e.result, dict) for e in eps)
        assert len(recs) == sum(e.result is not None for e in eps)
        steps_dataset(st, finished_only=False)
        to_html(st)
        read_judgments(root, 'j')
        read_judgments(root, 'checker')
        judge_labels(root, 'j')

def test_fuzz_store_readers_under_damage(small_run, tmp_path):
    read_everything(small_run)                                    # warm up (datasets import) on the intact run
    r = rng(2)
    def inputs():
        for i in range(200):
            d = tmp_path/f'r{i}'
            shutil.copytree(small_run, d)
            damage(r, d)
            yield d
    c = fuzz('store readers (damaged run folders)', inputs(), read_everything, limit_s=2.0)
    assert c.inputs == 200
    c.assert_clean()
