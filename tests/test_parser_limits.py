"""The action parser is linear in the reply's length and bounded, and the text it returns can always be stored.

Replies are model output, so any text may arrive: 32 KB of letters once took 30 s to parse, `type(content='a')` and
8,000 spaces 3.6 s, and `type(content='\\ud83d\\ude00')` gave two lone surrogates that no step record could hold;
`pyautogui.click(1e999, 200)` gave `x=inf` (a NameError in a VM, `Infinity` in steps.jsonl) and `pyautogui.click(5000, 200)`
a point off a 1280x800 screen. The timing check runs in a subprocess that is killed at a deadline, so a quadratic parser
fails here in seconds instead of hanging the suite. Times are CPU times (`time.process_time`), so a busy machine does
not fail them."""
import json, math, subprocess, sys, time
from pathlib import Path
import pytest
from coda import actions as A
from coda.actions import Action, parse_action, split_reply, to_pyautogui

# shapes of hostile replies: (head, unit repeated to the size)
SHAPES = {
    'letters': ('', 'a'), 'spaces': ('', ' '), 'newlines': ('', '\n'), 'open parens': ('', '('), 'close parens': ('', ')'),
    'quotes': ('', "'"), 'double quotes': ('', '"'), 'backslashes': ('', '\\'), 'brackets': ('', '['),
    'nested brackets': ('click(start_box=[', '(['), 'bracket pairs': ('click(start_box=[', '()'),
    'labels': ('', 'Action: '), 'labels no space': ('', 'Action:'), 'calls': ('', "click(start_box='(1,2)')\n"),
    'open calls': ('', 'click('), 'type then spaces': ("type(content='a')", ' '), 'unclosed type': ("type(content='a", ' '),
    'sloppy closes': ("type(content='", "')x"), 'junk calls': ('', "f('x') x "), 'labels in typed text': ("Action: type(content='", 'Action: '),
    'escaped quotes': ("type(content='", "\\'"), 'unicode escapes': ("type(content='", '\\ud83d\\ude00'), 'keyword quotes': ('f(', "k='"),
    'many arguments': ('f(', 'k=1,'), 'fences': ('', '```'), 'fenced answer': ('```ANS', ' '), 'bare answer': ('ANS', ' `'),
    'words then paren': ('', 'a1'), 'pyautogui prefixes': ('', 'pyautogui.'), 'numbers': ("click(start_box='(", '1,'),
    'labels then calls': ('Action: ' * 4, 'x('), 'mixed': ('', "a'(\"[\\ )")}

def shape(name:str, n:int)->str:
    "The hostile reply `name`, `n` characters long (plus its head)"
    head, unit = SHAPES[name]
    return head + (unit * (n // len(unit) + 1))[:n]

_CHILD = """
import json, sys, time
sys.path.insert(0, {tests!r})
from test_parser_limits import SHAPES, shape
from coda.actions import parse_action
for name in SHAPES:
    s = shape(name, {n})
    t = time.process_time(); parse_action(s); dt = time.process_time() - t
    print(json.dumps([name, dt]), flush=True)
"""

def parse_times(n:int, deadline:float)->dict:
    "{shape: seconds} for parsing every shape at n characters in a fresh process; shapes not done by the deadline are missing"
    code = _CHILD.format(tests=str(Path(__file__).parent), n=n)
    p = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True)
    try: out, _ = p.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return dict(json.loads(l) for l in out.splitlines() if l.startswith('['))

def test_a_megabyte_of_any_shape_parses_in_well_under_a_second():
    times = parse_times(1_000_000, deadline=60)
    missing = [k for k in SHAPES if k not in times]
    assert not missing, f"not parsed within 60 s: {missing}; done: {times}"
    slow = {k: round(v, 3) for k, v in times.items() if v > 0.5}   # ~0.2 s at most on one core; 0.5 leaves room for a busy machine
    assert not slow, slow

def test_time_grows_linearly():
    "Four times the text costs about four times the time, not sixteen (CPU time in process, best of three)"
    def once(s):
        t = time.process_time()
        parse_action(s)
        return time.process_time() - t
    def best(s): return min(once(s) for _ in range(3))
    for name in ('letters', 'labels', 'type then spaces', 'junk calls', 'sloppy closes'):
        assert once(shape(name, 16_000)) < 0.25, name        # a quadratic parser is already slow here: stop before the big ones
        small, big = best(shape(name, 16_000)), best(shape(name, 64_000))
        assert big < 0.25 and big < 12 * small + 0.01, (name, small, big)

def test_a_reply_over_max_reply_is_one_invalid_action_saying_so():
    assert 256_000 <= A.MAX_REPLY <= 4_000_000          # far above a real reply (32k tokens is ~150 KB), far below a flood
    reply = 'click(start_box=\'(1,2)\') ' + 'x' * A.MAX_REPLY
    t = time.process_time()
    acts = parse_action(reply)
    assert time.process_time() - t < 0.5
    assert len(acts) == 1 and acts[0].kind == 'invalid'
    assert acts[0].text.startswith(f'[not parsed: the reply has {len(reply)} characters, more than MAX_REPLY={A.MAX_REPLY}] click(')
    assert len(acts[0].text) < 400
    assert parse_action('click(start_box=\'(1,2)\') ' + 'x' * (A.MAX_REPLY - 100))[0].kind == 'click'   # at the cap: parsed

def test_a_reply_holds_at_most_max_actions():
    acts = parse_action("click(start_box='(1,2)')\n" * 1000)
    assert len(acts) == A.MAX_ACTIONS + 1 and {a.kind for a in acts[:-1]} == {'click'}
    assert acts[-1].kind == 'invalid' and acts[-1].text.startswith(f'[not parsed: more than MAX_ACTIONS={A.MAX_ACTIONS} actions]')
    assert [a.kind for a in parse_action("click(start_box='(1,2)')\n" * 3)] == ['click'] * 3

def test_only_the_last_label_tries_are_tried():
    "A label in typed text still falls back to the one before it; thousands of labels cost one pass each for the last few"
    assert A.LABEL_TRIES >= 2
    assert parse_action("Thought: t\nAction: type(content='Action: x')") == [Action('type', text='Action: x')]
    s = "Action: type(content='" + 'Action: ' * 5_000 + "')"
    t = time.process_time()
    acts = parse_action(s)
    assert time.process_time() - t < 0.5 and acts[0].kind == 'type' and acts[0].text.startswith('Action: Action: ')

# ------------------------------------------------------------------ surrogates
def storable(acts)->bool:
    "The actions survive what the store does with them: JSON in UTF-8"
    json.dumps([a.to_dict() for a in acts], ensure_ascii=False).encode('utf-8')
    return True

def test_json_style_surrogate_escapes_become_one_character():
    acts = parse_action("Thought: smile\nAction: type(content='\\ud83d\\ude00 ok')")
    assert acts == [Action('type', text='\U0001F600 ok')] and storable(acts)
    assert parse_action("type(content='\\ud83d x \\ude00')") == [Action('type', text='\ufffd x \ufffd')]   # lone halves
    assert parse_action('finished(content="\\ud83d\\ude00\\ud83d")') == [Action('finished', text='\U0001F600\ufffd')]

def test_raw_lone_surrogates_in_the_reply_are_replaced_everywhere():
    for s in ["type(content='a\ud83db')", "Action: \ud83d junk", 'hotkey(key=\'\udc00\')', "```ANS \ud83d```", '\ud83d' * 10]:
        acts = parse_action(s)
        assert storable(acts), s
        compile(to_pyautogui(acts), '<x>', 'exec')   # compiled only, never run
    assert parse_action("type(content='a\ud83db')") == [Action('type', text='a\ufffdb')]
    th, act = split_reply("Thought: \ud83d\ude00 \udc00\nAction: wait()")
    assert (th, act) == ('\U0001F600 \ufffd', 'wait()')

def test_clean_text():
    assert A.clean_text('\ud83d\ude00') == '\U0001F600' and A.clean_text('x\ud83d') == 'x\ufffd'
    assert A.clean_text({'a\udc00': ['\ud83d\ude00', ('\ud83d',)], 'n': 1.5, 'none': None}) == \
        {'a\ufffd': ['\U0001F600', ('\ufffd',)], 'n': 1.5, 'none': None}
    s, u = 'plain ascii', 'été 温度 \U0001F600'
    assert A.clean_text(s) is s and A.clean_text(u) is u
    t = time.process_time()
    out = A.clean_text('\ud83d\ude00\ud83d' * 300_000)
    assert time.process_time() - t < 0.5 and out == '\U0001F600\ufffd' * 300_000

# ------------------------------------------------------------------ coordinates: finite, on the screen
def test_a_coordinate_that_is_not_finite_is_an_invalid_action_saying_why():
    "Was `Action('click', x=inf, y=200.0)`: a NameError in a VM's pyautogui, `Infinity` in steps.jsonl (JSON.parse rejects it)."
    acts = parse_action('pyautogui.click(1e999, 200)')
    assert acts == [Action('invalid', text='[not parsed: the point (inf, 200) is not finite] pyautogui.click(1e999, 200)')]
    for s in ["click(start_box='(1e999,20)')", "Action: drag(start_box='(1,2)', end_box='(3,-1e999)')", 'pyautogui.moveTo(1, 1e400)',
              'pyautogui.scroll(3, x=1e999, y=5)', "scroll(start_box='(1e999,1)', direction='up')"]:
        for coords in ('absolute', 'relative1000'):
            a, = parse_action(s, coords=coords, screen=(1920, 1080))
            assert a.kind == 'invalid' and a.text.startswith('[not parsed: the point ('), (s, coords, a)
            json.dumps(a.to_dict(), allow_nan=False)    # what JSON.parse can read
    assert parse_action("Action: click(start_box='(9e307,1)')", frame=(640, 400))[0].kind == 'invalid'   # finite, until scaled by 2

def test_a_finite_point_off_the_screen_is_clamped_into_it_in_every_dialect():
    "Was `pyautogui.click(5000, 200)` -> x=5000 on a 1280x800 screen; now every dialect gives a point in 0..W-1, 0..H-1."
    assert parse_action('pyautogui.click(5000, 200)') == [Action('click', 1279.0, 200.0)]
    assert parse_action('pyautogui.click(-50, 20)') == [Action('click', 0.0, 20.0)]
    assert parse_action("click(start_box='<|box_start|>(1e300,-1e300)<|box_end|>')") == [Action('click', 1279.0, 0.0)]
    assert parse_action("click(start_box='(1000,1000)')", coords='relative1000') == [Action('click', 1279.0, 799.0)]
    assert parse_action("drag(start_box='(-5,-5)', end_box='(2000,2000)')", screen=(1920, 1080), coords='relative1000') == \
        [Action('drag', 0.0, 0.0, 1919.0, 1079.0)]
    assert parse_action("scroll(point='<point>5000 5000</point>', direction='down')", frame=(1280, 800)) == [Action('scroll', 1279.0, 799.0, direction='down')]
    assert parse_action("pyautogui.scroll(-3, 9000, -9000)") == [Action('scroll', 1279.0, 0.0, direction='down')]
    assert parse_action("click(start_box='(644,406)')") == [Action('click', 640.0, 400.0)]     # on the screen: unchanged

def test_no_action_holds_a_coordinate_that_is_not_finite():
    for v in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match='must be a finite number or None'): Action('move', v, 1.0)
        with pytest.raises(ValueError, match='must be a finite number or None'): Action('drag', 1.0, 1.0, 2.0, v)
    old = Action.from_dict(json.loads('{"kind": "click", "x": Infinity, "y": 200.0}'))   # a step record written before the check
    assert old.kind == 'invalid' and old.text.startswith('[not read: x=inf is not a finite number]')
    assert Action.from_dict({'kind': 'click', 'x': 3, 'y': 4.5}) == Action('click', 3, 4.5)

def test_the_reward_reads_refused_and_clamped_points():
    "coda.reward on what the parser now gives: a refused point earns nothing, a clamped one is scored where it landed"
    from coda.reward import action_reward
    gold = [Action('click', 1279.0, 200.0)]
    assert action_reward(parse_action('pyautogui.click(1e999, 200)'), gold) == 0.0
    assert action_reward(parse_action('pyautogui.click(5000, 200)'), gold) == 2.0
    old = Action.from_dict({'kind': 'click', 'x': math.inf, 'y': 200.0})     # a gold label from a record written before the check
    assert action_reward(gold, [old]) == 0.0 and action_reward([old], [old]) == 0.0
