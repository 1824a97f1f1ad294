"""Fuzz the real desktops' task-file checks (no desktop is started): random initialize lists of hostile text, wrong
types and path tricks go through `validate_initialize` for KAlgebra and GRASS; the only allowed outcome besides
acceptance is an InitializeError, and an accepted `touch` path always lies inside HOME. Seeded, a few seconds."""
import math
import pytest
from fuzz import fuzz, rng, nasty_text
from coda.tasks import Task

def random_value(r):
    k = r.random()
    if k < 0.45: return nasty_text(r, 120)
    if k < 0.6: return r.choice([0, 1, -1, 3, 7, 2**70, 1e308, float('nan'), float('inf'), True, None])
    if k < 0.75: return r.choice(['/home/user/' + nasty_text(r, 20), '~/' + nasty_text(r, 20), '../' * r.randint(1, 5) + 'x',
                                 'a/../../b', '/etc/passwd', 'ok.kal', 'sub/ok.kal'])
    if k < 0.85: return {nasty_text(r, 10): nasty_text(r, 10)} if r.random() < 0.5 else {'name': r.choice(['sites', 'elevation', '..'])}
    return [nasty_text(r, 10)] * r.randint(0, 3)

def random_items(r, funcs, fields):
    items = []
    for _ in range(r.randint(0, 4)):
        if r.random() < 0.1: items.append(r.choice([None, 'x', 3, []])); continue
        it = {'func': r.choice(funcs + [nasty_text(r, 10)])}
        for _ in range(r.randint(0, 4)):
            it[r.choice(fields + [nasty_text(r, 12)])] = random_value(r)
        items.append(it)
    return items

def check(app, funcs, fields, seed, n):
    from coda.envs.desktop import validate_initialize, InitializeError
    from coda.envs.kalgebra import home_relpath
    r = rng(seed)
    def one(items):
        for func, kw in validate_initialize(Task('F-1', app.name, 'x', initialize=items, source='fuzz.json'), app):
            if func == 'touch': assert '..' not in home_relpath(kw['path']).split('/')
    return fuzz(f'desktop initialize ({app.name})', (random_items(r, funcs, fields) for _ in range(n)), one, 0.5, (InitializeError,))

def test_fuzz_kalgebra_initialize():
    from coda.envs.kalgebra import KAlgebraApp
    check(KAlgebraApp, ['touch', 'tab', 'func_2d', 'launch'], ['text', 'path', 'index', 'expr', 'wait', 'command', 'shell'], 1, 3000).assert_clean()

def test_fuzz_grass_initialize():
    from needs import need_programs
    need_programs('grass')
    from coda.envs.grass import GrassApp
    check(GrassApp, ['run', 'layer'], ['module', 'flags', 'overwrite', 'query', 'wait', 'map', 'columns', 'executable', 'env'], 2, 3000).assert_clean()

def test_fuzz_grass_modules_names():
    "Every name in the installed GRASS is either a module a task may run or refused with a reason; random names are refused"
    from needs import need_programs
    need_programs('grass')
    from coda.envs.grass import grass_module, grass_modules
    r = rng(3)
    names = sorted(grass_modules()) + [r.choice(['script', 'sh', 'bash -c', 'g.region;id', 'r.' + nasty_text(r, 10)]) for _ in range(500)]
    fuzz('grass module names', names, grass_module, 0.5, (ValueError,)).assert_clean()
