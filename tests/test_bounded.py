"""Every simulated app step and every checker is bounded in time and memory, whatever the text: the reproducers of
the adversarial review (calculator powers and factorials, deep WHERE conditions, LIKE with many %, long typed fields,
`round` and `matches` in the checker language), each now an app error message or a CheckError, in well under a
second; and task-file `initialize` items are a closed list of typed operations, refused with the file, item and field."""
import signal, time
from contextlib import contextmanager
import pytest
from coda.actions import Action
from coda.envs.core import make_env
from coda.envs.scidesk import scidesk_tasks, app_class, Canvas2D, text_width
from coda.checks import CheckError, check
from coda.tasks import Task, TaskError

@contextmanager
def within(seconds:float):
    "Fail if the block uses more than `seconds` of CPU time (a loaded machine stretches wall time, not CPU time); SIGALRM stops a hang"
    def boom(*_): raise TimeoutError(f'took longer than {seconds * 30} s of wall time')
    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, seconds * 30)   # a hard stop far past the limit, whatever the machine's load
    t0 = time.process_time()
    try: yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.process_time() - t0 < seconds, f'took {time.process_time() - t0:.2f} s of CPU time'

def _task(app): return scidesk_tasks([app])[0]

def _typed_into(app:str, field:str, text:str, render=False, enter=True):
    "Reset `app` on one of its tasks, click the text field `field` and type `text` (+ Enter); the env and its observation"
    env = make_env('scidesk', render=render)
    obs = env.reset(_task(app))
    e = next(e for e in obs.a11y if e.role == 'text field' and e.name == field)
    obs = env.step([Action('click', (e.bbox[0] + e.bbox[2]) / 2, (e.bbox[1] + e.bbox[3]) / 2)])
    return env, env.step([Action('type', text=text, enter=enter)])

# ---- Algebra's calculator
@pytest.mark.parametrize('expr, why', [
    ('((9^999)^999)^99', 'too large'),          # hung for ever: a C-level big-int power
    ('10^400', 'too large'),                    # OverflowError out of env.step
    ('factorial(200)', 'up to 170'),            # OverflowError out of env.step
    ('+'.join(['1'] * 3000), 'longer than'),    # RecursionError out of env.step
    ('*'.join(['9'] * 400), 'nested deeper'),   # RecursionError in the evaluator
    ('floor(root(-8, 3))', 'not a real number'),# TypeError on a complex intermediate
    ('2^1000*2^1000', 'too large'),
])
def test_algebra_console_reports_what_it_cannot_compute(expr, why):
    with within(1.0): env, obs = _typed_into('Algebra', 'Expression', expr)
    log = env.app.state['log']
    assert log[-1].startswith('  error:') and why in log[-1], log[-2:]
    assert obs.info['status'].startswith('Error:')

def test_algebra_calc_still_computes():
    from coda.envs.algebra import calc
    assert calc('2^10', {}) == 1024.0 and calc('factorial(170)', {}) > 1e306 and calc('+'.join(['1'] * 150), {}) == 150.0

def test_algebra_plots_are_capped():
    from coda.envs.algebra import MAX_PLOTS
    a = app_class('Algebra')(render=False)
    a.reset()
    for i in range(MAX_PLOTS + 5): a._add_plot(f'x + {i}')
    assert len(a.state['plots']) == MAX_PLOTS and 'at most' in a.ui['status']

# ---- GIS's WHERE conditions
def test_gis_not_chain_and_and_chain_do_not_recurse():
    from coda.envs.gis_data import parse_where, where_match
    with within(0.5):
        t = parse_where('NOT ' * 900 + "name = 'a'", ['name'])
        assert where_match(t, {'name': 'a'}) and not where_match(t, {'name': 'b'})
        t = parse_where(' AND '.join(["name = 'a'"] * 250), ['name'])
        assert where_match(t, {'name': 'a'})
    from coda.envs.gis_data import WhereError
    with pytest.raises(WhereError, match='nested deeper'): parse_where('(' * 60 + "name = 'a'" + ')' * 60, ['name'])

def test_gis_like_is_linear_and_right():
    from coda.envs.gis_data import parse_where, where_match
    t = parse_where("name LIKE '" + '%a' * 40 + "b'", ['name'])
    with within(0.2): assert not where_match(t, {'name': 'a' * 60})
    cases = [('c%', 'Cor', True), ('%o_', 'Cor', True), ('_', 'ab', False), ('a%b%c', 'aXbYc', True), ('a%a', 'a', False),
             ('%', '', True), ('100%%', '100', True), ('a_c', 'abc', True), ('a_c', 'abbc', False)]
    for pat, s, want in cases: assert where_match(parse_where(f"name LIKE '{pat}'", ['name']), {'name': s}) is want, (pat, s)

def test_gis_console_with_hostile_where_is_an_error_line():
    with within(1.0): env, obs = _typed_into('GIS', 'Console command', 'v.db.select map=countries where="' + 'NOT ' * 2000 + 'cat=1"')
    assert env.app.state['console'][-1][0] == 'err', env.app.state['console'][-1]

# ---- other parsers model-typed text reaches
def test_biochem_huge_numbers_in_specs_are_command_errors():
    with within(1.0): env, obs = _typed_into('Biochem', 'Command', 'select :1-' + '9' * 5000)
    assert env.app.state['log'][-1][0] == 'error'

def test_unicode_digits_do_not_reach_int():
    from coda.envs.gis_data import parse_color
    assert parse_color('²:1:1') is None and parse_color('9' * 5000 + ':1:1') is None and parse_color('1:2:3') == '1:2:3'

# ---- rendering: linear in the text's length
@pytest.mark.parametrize('n', [4_000, 30_000])
def test_long_text_is_clipped_fast(n):
    from PIL import Image
    cv = Canvas2D(Image.new('RGB', (1280, 800)))
    with within(0.5):
        cv.text((0, 0), 'x' * n, clip=300)
        cv.text((0, 20), 'y' * n)
        cv.text((0, 40), '\u200b' * n + 'z', clip=300)

def test_clipping_keeps_the_old_result():
    "The fast clip cuts where the character-by-character loop did"
    from coda.envs.scidesk import clip_text
    for s in ['Type an expression (x := 2*3 assigns) and press Enter', 'short', 'W' * 80, 'iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii' * 3]:
        for clip in (20, 57, 120, 300):
            t = s
            if text_width(t) > clip:
                while t and text_width(t + '…') > clip: t = t[:-1]
                t += '…'
            assert clip_text(s, 13, clip) == t, (s, clip)

@pytest.mark.parametrize('app, field', [('Algebra', 'Expression'), ('GIS', 'Console command'), ('Biochem', 'Command')])
def test_typing_a_long_text_into_a_field_is_fast(app, field):
    with within(1.5): env, obs = _typed_into(app, field, 'a' * 4_000, render=True, enter=False)
    with within(1.0): obs = env.step([Action('type', text='b' * 4_000)])
    assert obs.screenshot is not None

def test_fields_hold_at_most_max_field_characters():
    from coda.envs.scidesk import MAX_FIELD
    env, obs = _typed_into('Algebra', 'Expression', 'a' * (MAX_FIELD + 10), enter=False)
    assert len(env.app.ui['fields']['Expression']) == MAX_FIELD

def test_surrogates_are_joined_or_replaced_where_typed():
    from coda.actions import clean_text
    env, obs = _typed_into('Algebra', 'Expression', 'x := 1 + 1 \ud83d\ude00 \ud83d', render=True, enter=False)
    assert env.app.ui['fields']['Expression'] == 'x := 1 + 1 😀 \ufffd'
    env.step([Action('answer', text='\ud83d')])
    assert env.app.answer == '\ufffd' and clean_text('a\ude00') == 'a\ufffd'

# ---- the checker language
def test_round_with_a_huge_ndigits_is_refused_fast():
    with within(0.5), pytest.raises(CheckError, match='an integer from -1,300 to 1,300'): check(['round', 5, -1_000_000_000], {})
    assert check(['round', 12345, -2], {}) == 12300 and check(['round', 2.675, 2], {}) == 2.67

def test_matches_is_linear():
    with within(0.5): assert check(['matches', 'a' * 40 + '!', '^(a+)+$'], {}) is False
    with within(0.5): assert check(['matches', ['$', 's'], '(x+x+)+y'], {'s': 'x' * 50_000}) is False
    with pytest.raises(CheckError, match='RE2'): check(['matches', 'aa', r'(a)\1'], {})
    assert check(['matches', ['$', 's'], r'n: \d+'], {'s': 'n: 2639'}) is True
    assert check(['matches', ['$', 's'], '.'], {'s': '\ud83d'}) is True   # a lone surrogate does not crash RE2

def test_join_size_is_checked_before_building():
    with within(0.5), pytest.raises(CheckError, match="'join' result longer"):
        check(['join', ['quote', 'x' * 100_000], ['quote', ['a'] * 100_000]], {})

def test_work_inside_operators_is_bounded():
    xs = list(range(100_000))
    with within(1.0), pytest.raises(CheckError, match='element operations'): check(['subset', ['$', 'a'], ['$', 'b']], {'a': xs, 'b': xs})
    assert check(['subset', ['$', 'a'], ['set', ['$', 'b']]], {'a': xs, 'b': xs}) is True   # a set is cheap to search

# ---- initialize items: a closed list of typed operations
BAD_INITS = [
    ('Algebra', {'func': 'frobnicate'}, "field 'func'"),
    ('Algebra', {'func': '__class__'}, "field 'func'"),
    ('Algebra', {'func': 'vars', 'x': 'abc'}, "field 'x' must be a finite number"),
    ('Algebra', {'func': 'vars', 'x y': 1}, "'x y' is not a variable name"),
    ('Algebra', {'func': 'settings', 'angle': 'gradians'}, "field 'angle' must be one of 'radians', 'degrees'"),
    ('Algebra', {'func': 'settings', 'precision': 99}, "'precision' must be from 0 to 12"),
    ('Algebra', {'func': 'settings', 'colour': 'red'}, "unknown field 'colour'"),
    ('Algebra', {'func': 'tab', 'name': 'Nowhere'}, "field 'name' must be one of"),
    ('Algebra', {'func': 'plot', 'expr': 'sin(', 'color': 'blue'}, 'cannot read'),
    ('Algebra', {'func': 'plot'}, "missing field 'expr'"),
    ('Algebra', {'func': 'view', 'xmin': 5, 'xmax': 1}, 'empty view'),
    ('Algebra', {'func': 'log', 'lines': 'not a list'}, "field 'lines' must be a list"),
    ('GIS', {'func': 'layer', 'name': 'nosuchmap'}, 'not found'),
    ('GIS', {'func': 'layer', 'name': 'countries', 'color': 'notacolour'}, 'Invalid color'),
    ('GIS', {'func': 'location', 'name': '../../etc'}, "field 'name' must be one of"),
    ('GIS', {'func': 'statusbar', 'mode': 99}, "'mode' must be from 0"),
    ('GIS', {'func': 'select', 'name': 'ghost'}, 'no layer'),
    ('GIS', {'func': 'table', 'map': 'countries', 'where': 'NOT ' * 2000 + 'cat=1'}, 'Invalid WHERE'),
    ('Biochem', {'func': 'open', 'name': 'ZZZZ'}, 'no bundled structure'),
    ('Biochem', {'func': 'turn', 'axis': 'w'}, "field 'axis' must be one of"),
    ('Biochem', {'func': 'turn', 'angle': float('nan')}, "field 'angle' must be a finite number"),
    ('Astronomy', {'func': 'select', 'name': 'Vulcan'}, 'no object'),
    ('Astronomy', {'func': 'time', 'date': 'yesterday'}, "field 'date'"),
    ('Astronomy', {'func': 'time', 'jd': 1e300}, "field 'jd'"),
    ('Astronomy', {'func': 'render', 'stars': 'yes'}, "field 'stars' must be true or false"),
    ('Astronomy', {'func': 'render', 'warp': True}, "unknown field 'warp'"),
    ('Astronomy', {'func': 'settings', 'fov': 1e9}, "'fov' must be from")]

@pytest.mark.parametrize('app, item, why', BAD_INITS, ids=[f"{a}-{i['func']}-{n}" for n, (a, i, _) in enumerate(BAD_INITS)])
def test_bad_initialize_items_are_task_errors_naming_file_item_and_field(app, item, why):
    t = Task('X-01', app, 'Do it.', initialize=[item], source=f'/tasks/{app}/X-01.json')
    env = app_class(app)(render=False)
    with pytest.raises(TaskError) as e: env.reset(t)
    msg = str(e.value)
    assert msg.startswith(f'/tasks/{app}/X-01.json: initialize[') and why in msg, msg

def test_good_initialize_items_still_run():
    t = Task('X-02', 'Algebra', 'Do it.', source='X-02.json', initialize=[
        {'func': 'vars', 'k': 2, 'c': 1.5}, {'func': 'plot', 'expr': 'sqrt(x - 1)'}, {'func': 'settings', 'angle': 'degrees', 'precision': 3},
        {'func': 'view', 'xmin': -5, 'xmax': 5}, {'func': 'tab', 'name': '2D Graph'}, {'func': 'log', 'lines': ['a', 'b']}])
    a = app_class('Algebra')(render=False)
    a.reset(t)
    d = a.dump()
    assert d['vars'] == {'k': 2.0, 'c': 1.5} and d['plots'][0]['expr'] == 'sqrt(x - 1)' and d['settings']['angle'] == 'degrees'
    assert d['view']['xmin'] == -5.0 and d['tab'] == '2D Graph' and d['log'] == ['a', 'b']
