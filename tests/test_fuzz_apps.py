"""Fuzz: each scidesk app (Algebra, Biochem, GIS, Astronomy) stepped through `make_env('scidesk')` under random typed
text (tests/fuzz.nasty_text plus each app's hostile expressions) and random clicks, keys, scrolls and drags; and the
checker language on random expressions over random values. Seeded, bounded (about 30 s in all); the counts are
printed at the end of the run. A step must never raise or take over a second; `check` raises only CheckError."""
import itertools, pytest
from fuzz import fuzz, nasty_text, rng
from coda.actions import Action
from coda.envs.core import make_env
from coda.envs.scidesk import scidesk_tasks, W, H

STEPS_PER_APP, CHECKS = 3000, 20_000   # inputs per app, checker expressions

HOSTILE = {   # the adversarial review's reproducers and their relatives, per app
    'Algebra': ['((9^999)^999)^99', '10^400', 'factorial(200)', '+'.join(['1'] * 3000), '*'.join(['9'] * 2000), '(' * 300 + '1' + ')' * 300,
                '9^9^9^9', 'x := 10^300', 'root(-8, 3) + 1', 'floor(root(-8,3))', '1e309', 'floor(1e309)', '9' * 5000, 'y = x^x^x',
                'max(root(-1,2), 1)', 'gcd(1e300, 2)', 'factorial(-1)', 'factorial(0.5)', 'ln(0)', 'x := ' + 'x' * 3000, 'a' * 40_000],
    'GIS': ['NOT ' * 3000 + "name = 'a'", "name LIKE '" + '%a' * 40 + "b'", 'v.db.select map=countries where="' + 'NOT ' * 2000 + 'cat=1"',
            "v.db.select map=countries where=\"name LIKE '" + '%a' * 40 + "b'\"", 'd.vect map=countries where="' + '(' * 100 + 'cat=1' + ')' * 100 + '"',
            'd.vect map=countries color=' + '9' * 5000, 'd.vect map=countries width=²', 'cat = ' + '9' * 5000, 'g.region -p',
            'v.db.update map=countries column=pop value=' + '9' * 5000, 'r.univar map=' + 'x' * 5000, "name LIKE '" + '_' * 3000 + "'"],
    'Biochem': ['select #' + '9' * 5000, 'select :1-' + '9' * 5000, 'turn y 1e308', 'zoom 1e-308', 'zoom 1e308', 'open ' + 'x' * 5000,
                'color #1 ' + 'x' * 3000, 'select ' + '/A,' * 3000, 'label #1/' + 'A' * 2000, 'view ' + '#1 ' * 2000, 'lighting multishadow 1024',
                'select ' + ' & '.join(['protein'] * 500), 'distance #1@CA #1@CA', ';' * 5000],
    'Astronomy': ['1e308', '-1e308', '9' * 5000, 'nan', 'inf', '2000-01-01', '99999-99-99', '0000-00-00', '1e30 ly', ' ' * 1000, 'Earth' * 1000]}
KEYS = [('enter',), ('esc',), ('ctrl', 'a'), ('backspace',), ('delete',), ('ctrl', 's'), ('tab',), ('ctrl', 'z'), ('ctrl', 'l'), ('home',), ('end',),
        ('ctrl', '1'), ('ctrl', '2'), ('ctrl', '3'), ('ctrl', 'e'), ('ctrl', 'n'), ('up',), ('down',), ('pageup',)]

def random_step(obs, r, app)->list:
    "One hostile step: typing (usually into a clicked text field), or a click, key, scroll or drag anywhere"
    els = [x for x in (obs.a11y or []) if x.bbox[2] > x.bbox[0]]
    def pt():
        if els and r.random() < 0.8:
            e = r.choice(els)
            return (r.uniform(e.bbox[0], e.bbox[2] - 1), r.uniform(e.bbox[1], e.bbox[3] - 1))
        return (r.uniform(-50, W + 50), r.uniform(-50, H + 50))
    fields = [x for x in els if x.role == 'text field']
    k = r.random()
    if k < 0.4:
        txt = r.choice(HOSTILE[app]) if r.random() < 0.5 else nasty_text(r, r.choice([20, 200, 2000]))
        acts = []
        if fields and r.random() < 0.8:
            f = r.choice(fields)
            acts.append(Action('click', (f.bbox[0] + f.bbox[2]) / 2, (f.bbox[1] + f.bbox[3]) / 2))
            if r.random() < 0.5: acts.append(Action('hotkey', keys=('ctrl', 'a')))
        return acts + [Action('type', text=txt, enter=r.random() < 0.7)]
    if k < 0.7: return [Action(r.choice(['click', 'left_double', 'right_single']), *pt())]
    if k < 0.8: return [Action('hotkey', keys=r.choice(KEYS))]
    if k < 0.9: return [Action('scroll', *pt(), direction=r.choice(['up', 'down', 'left', 'right']))]
    if k < 0.98: return [Action('drag', *pt(), *pt())]
    return [Action('answer', text=nasty_text(r, 50))]

def episodes(app:str, seed:int, render_every:int=4):
    "Endless (env, actions) pairs: random tasks of `app`, each stepped twice its budget; every `render_every`-th episode rendered"
    r, tasks = rng(seed), sorted(scidesk_tasks([app]), key=lambda t: t.id)
    envs = {False: make_env('scidesk', render=False), True: make_env('scidesk', render=True)}
    for ep in itertools.count():
        env = envs[ep % render_every == 0]
        env.last = env.reset(r.choice(tasks))
        for _ in range(task_steps(env) * 2): yield env, random_step(env.last, r, app)

def task_steps(env): return env.app.task.steps

def step(x):
    env, acts = x
    try: env.last = env.step(acts)
    finally:
        if not hasattr(env, 'last') or env.last is None: env.last = env.app.observe()

@pytest.mark.parametrize('app', ['Algebra', 'Biochem', 'GIS', 'Astronomy'])
def test_fuzz_app_steps(app):
    c = fuzz(f'scidesk {app} steps', itertools.islice(episodes(app, seed=7), STEPS_PER_APP), step, limit_s=1.0)
    assert c.inputs == STEPS_PER_APP
    c.assert_clean()

# ---- the checker language
from coda.checks import ARITY, CheckError, check, validate

def random_value(r, d=0):
    k = r.random()
    if d > 2 or k < 0.45:
        return r.choice([0, 1, -1, 2 ** 62, -2 ** 4000, 10 ** 300, 1e308, -1e-308, float('inf'), float('nan'), True, None, 3.5, -7,
                         '', 'a', 'abc' * 50, 'x' * 5000, nasty_text(r, 30), '^(a+)+$', '%', '.*'])
    if k < 0.75: return [random_value(r, d + 1) for _ in range(r.randint(0, 6))]
    return {r.choice(['a', 'b', 'vars', 'plots', '0', nasty_text(r, 5)]): random_value(r, d + 1) for _ in range(r.randint(0, 4))}

OPS = sorted(ARITY)
def random_expr(r, d=0):
    "A random expression from the operators in ARITY (often wrong-typed or wrong-arity: that is the point)"
    if d > 4 or r.random() < 0.3:
        v = random_value(r)
        return ['quote', v] if isinstance(v, list) else v
    op = r.choice(OPS)
    lo, hi = ARITY[op]
    n = r.randint(max(0, lo - (r.random() < 0.05)), (hi if hi is not None else lo + 3) + (r.random() < 0.05))
    if op in ('$', '@'): return [op, *[r.choice(['a', 'b', 'vars', 0, -1, random_expr(r, d + 1)]) for _ in range(n)]]
    if op == 'var': return [op, r.choice(['x', 'y'])]
    if op == 'let': return [op, {'x': random_expr(r, d + 1)}, random_expr(r, d + 1)]
    if op == 'quote': return [op, random_value(r)]
    return [op, *[random_expr(r, d + 1) for _ in range(n)]]

def test_fuzz_checker_language():
    r = rng(11)
    hostile = [['round', 5, -1_000_000_000], ['matches', 'a' * 40 + '!', '^(a+)+$'], ['join', ['quote', 'x' * 100_000], ['quote', ['a'] * 100_000]],
               ['subset', ['$', 'big'], ['$', 'big']], ['sorted', ['$', 'big']], ['*', 10 ** 300, 10 ** 300, 10 ** 300, 10 ** 300, 10 ** 300],
               ['str', ['$', 'deep']], ['matches', ['$', 'deep'], 'x'], ['==', ['$', 'deep'], ['$', 'deep']], ['set', ['$', 'big']]]
    deep = []
    for _ in range(5000): deep = [deep]
    dumps = [{}, {'a': 1, 'b': [1, 2, 3], 'vars': {'x': 1.0}}, {'big': list(range(100_000)), 'deep': deep}]
    def one(x):
        expr, dump = x
        validate(expr)
        check(expr, dump)
    inputs = [(e, dumps[2]) for e in hostile] + [(random_expr(r), r.choice(dumps)) for _ in range(CHECKS)]
    c = fuzz('checker language', inputs, one, limit_s=1.0, expected=(CheckError,))
    c.assert_clean()
