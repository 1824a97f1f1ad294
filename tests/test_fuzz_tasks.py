"""Fuzz: the task loaders (`load_task`, `load_tasks` on a file, a folder or a .jsonl file) on random and hostile task
files, as bytes (mutated real task files, random bytes, numbers out of range, deep nesting, bytes that are not UTF-8)
and as JSON shapes (every field of every type, random evaluate items and check expressions, lone surrogates). Every
outcome must be a `Task` whose fields have their types and whose record is storable JSON, or a `TaskError` whose one
line starts with the file (and line) it is about: 0 other exceptions, 0 hangs (CPU time, see tests/fuzz.py). Both
outcomes must be common, so the fuzz reaches past the first check. Seeded, about 10 s; the counts (inputs, tasks, errors,
exceptions, hangs) are printed at the end of the run."""
import json, math, re
import pytest
from fuzz import NASTY, fuzz, nasty_text, rng
from coda.checks import ARITY
from coda.envs.scidesk import TASKS_DIR
from coda.tasks import MAX_BUDGET, MAX_FILE, Task, TaskError, load_task, load_tasks

REAL = [p.read_bytes() for p in sorted(TASKS_DIR.rglob('*.json'))][:60]   # the project's own task files, to mutate
FIELDS = ['type', 'app', 'id', 'sort', 'steps', 'instruction', 'initialize', 'evaluate', 'ans', 'split', 'version', 'oracle']
NUMBERS = [b'1e999', b'-1e999', b'1e309', b'NaN', b'Infinity', b'-Infinity', b'9' * 5000, b'-' + b'9' * 4400, b'1' * 1001,
           b'0', b'-0', b'15', b'15.0', b'1000', b'1001', b'2.5', b'1e-400', b'1E2', b'-1']
BAD_BYTES = [b'\xff', b'\xfe', b'\xc0\x80', b'\xed\xa0\x80', b'\xf4\x90\x80\x80', b'\x80', b'\xe2\x82', b'\x00', b'\xef\xbb\xbf']

def check_outcome(where:str, load):
    "Run `load`; a Task must be well-typed and storable, a TaskError one line matching the regex `where` (the file); anything else raises"
    try: out = load()
    except TaskError as e:
        msg = str(e)
        assert re.match(where, msg) or msg.startswith('duplicate task'), msg[:300]
        assert '\n' not in msg and len(msg) < 2000, msg[:300]
        return 'error'
    for t in out if isinstance(out, list) else [out]:
        assert isinstance(t, Task) and all(isinstance(v, str) for v in (t.id, t.app, t.instruction, t.sort, t.split, t.source)), t
        assert isinstance(t.steps, int) and not isinstance(t.steps, bool) and 1 <= t.steps <= MAX_BUDGET, t.steps
        assert t.ans is None or isinstance(t.ans, str)
        assert isinstance(t.initialize, list) and isinstance(t.evaluate, list) and isinstance(t.extra, dict)
        json.dumps(t.to_dict(), allow_nan=False, ensure_ascii=False).encode('utf-8')   # storable, and readable by JSON.parse
        t.score({}, 'DONE')                                                          # scoring never raises
    return 'task'

# ------------------------------------------------------------------ inputs
def random_json(r, depth=0):
    "A random JSON value as a Python value (nasty strings, out-of-range floats included)"
    k = r.random()
    if depth > 3 or k < 0.45:
        return r.choice([nasty_text(r, 40), r.randint(-10**6, 10**6), r.random() * 1e6, True, False, None, math.inf, math.nan,
                         r.choice(NASTY), 10 ** r.randint(1, 1200), '', ' ', 'KAlgebra', 'DONE', 'ANS'])
    if k < 0.6: return [random_json(r, depth + 1) for _ in range(r.randint(0, 4))]
    if k < 0.75: return {nasty_text(r, 8): random_json(r, depth + 1) for _ in range(r.randint(0, 3))}
    return random_check(r, depth + 1)

def random_check(r, depth=0):
    "A random checker expression: operators (some unknown) with random arities and literal or path arguments"
    if depth > 4 or r.random() < 0.3:
        return r.choice([['$', nasty_text(r, 6)], ['@'], ['quote', [1, 'a']], 0, 1.5, 'a', '(', '[a-', r'(a)\1', 'x' * 300, None, True])
    op = r.choice(list(ARITY) + ['lenn', 'eval', '__import__', ''])
    return [op, *(random_check(r, depth + 1) for _ in range(r.randint(0, 4)))]

def random_item(r):
    k = r.random()
    if k < 0.15: return random_json(r, 3)
    if k < 0.35: return {'type': 'stop', 'value': r.choice(['DONE', 'FAIL', 'ANS', 'ans', None, 3]),
                         **({'args': r.choice([['4'], '4', [4], [], ['a', 'b']])} if r.random() < 0.6 else {})}
    return {'type': r.choice(['info', 'var', '', None, 5]), 'check': random_check(r)}

def random_task(r)->dict:
    "A task-shaped dict: usually the right fields, any of them of a wrong type or value"
    d = {'type': 'KAlgebra', 'instruction': 'Plot y = x.', 'steps': 15, 'evaluate': [random_item(r) for _ in range(r.randint(0, 3))]}
    for _ in range(r.randint(0, 4)):
        f = r.choice(FIELDS + [nasty_text(r, 10)])
        d[f] = random_json(r) if r.random() < 0.7 else (
            [random_item(r) for _ in range(r.randint(0, 3))] if f == 'evaluate' else r.choice([15, 1, 1000, 'x', '', None]))
    if r.random() < 0.1: d.pop(r.choice(list(d)))
    return d

def dumps(r, d)->bytes:
    "JSON bytes of d; inf and nan written as Infinity / NaN, and sometimes a float token replaced by a number out of range"
    b = json.dumps(d, ensure_ascii=r.random() < 0.7).encode('utf-8', 'surrogatepass')   # lone surrogates as raw bytes: not UTF-8
    if r.random() < 0.2 and b'15' in b: b = b.replace(b'15', r.choice(NUMBERS), 1)
    return b

def mutate(r, b:bytes)->bytes:
    "A few byte-level edits: a flip, a cut, an insertion of a number, nesting or bad bytes, a duplication"
    for _ in range(r.randint(1, 4)):
        i = r.randint(0, len(b))
        k = r.random()
        if k < 0.2 and b: b = b[:i - 1] + bytes([r.randint(0, 255)]) + b[i:]
        elif k < 0.35: b = b[:i]
        elif k < 0.55: b = b[:i] + r.choice(NUMBERS) + b[i:]
        elif k < 0.65: b = b[:i] + b'[' * r.choice([10, 99, 101, 3000]) + b[i:]
        elif k < 0.8: b = b[:i] + r.choice(BAD_BYTES) + b[i:]
        else: b = b[:i] + b[i:i + r.randint(1, 40)] * r.randint(1, 3) + b[i:]
    return b

def file_bytes(r)->bytes:
    k = r.random()
    if k < 0.35: return mutate(r, r.choice(REAL))
    if k < 0.75: return dumps(r, random_task(r))
    if k < 0.85: return bytes(r.randint(0, 255) for _ in range(r.randint(0, 200)))
    if k < 0.9: return nasty_text(r, 300).encode('utf-8', 'surrogatepass')
    return r.choice([b'', b'null', b'[]', b'1e999', b'"x"', b'{}', b'{"type": "KAlgebra", "instruction": "x", "steps": ' + r.choice(NUMBERS) + b'}',
                     b'{"a": ' + b'[' * 50_000 + b']' * 50_000 + b'}', b'{"a": ' + b'{"b": ' * 120 + b'1' + b'}' * 121] + BIG * (r.random() < 0.005))

HEAD = b'{"type": "KAlgebra", "instruction": "x", "pad": ['
BIG = [HEAD + b','.join([b'1'] * ((MAX_FILE - len(HEAD)) // 2 - 1)) + b']}',     # the largest file a task may be: half a million numbers
       HEAD + b','.join([b'{}'] * ((MAX_FILE - len(HEAD)) // 3 - 1)) + b']}',    # ... or a third of a million objects
       HEAD + b'1' * MAX_FILE + b']}']                                           # over the limit

# ------------------------------------------------------------------ targets
N_FILES, N_JSONL, N_DIRS = 8000, 800, 200

def run(name, inputs, one):
    "fuzz() over `inputs`, counting the outcomes in the target's name; both must be common"
    seen = {'task': 0, 'error': 0}
    def counted(x): seen[one(x)] += 1
    c = fuzz(name, inputs, counted, limit_s=1.0)
    c.name += f" [{seen['task']} loaded, {seen['error']} TaskErrors]"
    c.assert_clean()
    assert min(seen.values()) >= c.inputs // 20, (c.name, seen)

def test_fuzz_load_task(tmp_path):
    r = rng(11)
    names = ['x.json', 'A-01.json', 'é 温度.json', '-.json', '.json', 'a.b.json']
    def one(raw):
        p = tmp_path/r.choice(names)
        p.write_bytes(raw)
        return check_outcome(re.escape(f'{p}: '), lambda: load_task(p))
    run('load_task (hostile files)', (file_bytes(r) for _ in range(N_FILES)), one)

def test_fuzz_load_tasks_jsonl(tmp_path):
    r = rng(12)
    f = tmp_path/'set.jsonl'
    def lines():
        for _ in range(N_JSONL):
            rows = [dumps(r, {**random_task(r), 'id': f'T-{i}'}) if r.random() < 0.8 else file_bytes(r).replace(b'\n', b' ')
                    for i in range(r.randint(0, 6))]
            yield b'\n'.join(rows) + r.choice([b'', b'\n', b'\r\n', b'\n\n'])
    def one(raw):
        f.write_bytes(raw)
        return check_outcome(re.escape(f'{f}:') + r'\d+: ', lambda: load_tasks(f))   # the file and the line
    run('load_tasks (hostile .jsonl)', lines(), one)

def test_fuzz_load_tasks_folder(tmp_path):
    r = rng(13)
    def folders():
        for i in range(N_DIRS):
            d = tmp_path/f'set{i}'
            (d/'sub').mkdir(parents=True)
            for j in range(r.randint(1, 4)):   # mostly good files (the project's own), so that a folder often loads
                (d/r.choice(['', 'sub/'])/f'T-{j}.json').write_bytes(r.choice(REAL) if r.random() < 0.75 else file_bytes(r))
            yield d
    def one(d): return check_outcome(re.escape(f'{d}/') + r'(sub/)?T-\d\.json: ', lambda: load_tasks(d))   # the file in the folder
    run('load_tasks (folders of hostile files)', folders(), one)

def test_the_outcome_check_can_fail():
    "check_outcome is not a stub: an exception other than TaskError, a message naming another file, and a bad Task all fail it"
    with pytest.raises(OverflowError): check_outcome('x.json: ', lambda: int(math.inf))
    with pytest.raises(AssertionError): check_outcome('x.json: ', lambda: (_ for _ in ()).throw(TaskError('y.json: steps: 1e999')))
    with pytest.raises(AssertionError): check_outcome('x.json: ', lambda: (_ for _ in ()).throw(TaskError('x.json: a\nb')))
    with pytest.raises(AssertionError): check_outcome('x.json: ', lambda: Task('A', 'KAlgebra', 'x', steps=10**9))
    with pytest.raises(ValueError): check_outcome('x.json: ', lambda: Task('A', 'KAlgebra', 'x', extra={'v': math.inf}))
    assert check_outcome('x.json: ', lambda: (_ for _ in ()).throw(TaskError('x.json: steps: 1e999'))) == 'error'

def test_the_harness_counts_cpu_time_so_a_busy_machine_does_not_fail_it():
    "tests/fuzz.py: a hang is CPU time over the limit (a loaded machine stretches only wall time), or wall time far over it"
    import time
    from fuzz import REPORT
    def busy(s):
        t = time.process_time()
        while time.process_time() - t < s: pass
    waiting = fuzz('harness: waiting', [0.3], time.sleep, limit_s=0.05, wall_factor=100)     # 0.3 s of wall time, no CPU time
    working = fuzz('harness: working', [0.01, 0.2], busy, limit_s=0.05)                       # 0.2 s of CPU time
    blocked = fuzz('harness: blocked', [0.3], time.sleep, limit_s=0.05, wall_factor=2)        # the wall-time backstop
    for c in (waiting, working, blocked): REPORT.remove(c)    # demonstrations, not targets: kept out of the printed counts
    assert (waiting.hangs, working.hangs, blocked.hangs) == (0, 1, 1) and waiting.max_wall_s >= 0.3 and working.max_s >= 0.2
