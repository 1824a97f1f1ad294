"""Property-based tests of `coda.actions` (hypothesis): the parser never raises, always returns valid Actions with finite
coordinates clamped into the screen (a point that is not finite gives an `invalid` action saying why), the rendered
pyautogui code always compiles, and typed text survives escaping and to_uitars round trips.
Budgeted to a few seconds per test (the whole file well under 30 s)."""
import math, pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from uitars_ref import KINDS, load_corpus
from coda.actions import Action, parse_action, smart_resize, to_pyautogui, to_uitars

CORPUS = load_corpus()
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)

# ------------------------------------------------------------------ strategies
TOKENS = ['Thought: ', 'Action: ', 'Action:', 'Reflection: ', 'Action_Summary: ', 'click(', 'left_double(', 'right_single(',
          'drag(', 'hover(', 'select(', 'scroll(', 'hotkey(', 'type(', 'wait()', 'finished(', 'call_user()', 'pyautogui.click(',
          'pyautogui.write(', 'pyautogui.hscroll(', "start_box='", "end_box='", "point='", "start_point='", "content='",
          "key='", "direction='", 'up', 'down', 'left', 'right', "'", '"', '\\', "\\'", '\\n', '(', ')', '[', ']', ',', '=',
          '\n', '\n\n', ' ', '<|box_start|>', '<|box_end|>', '<point>', '</point>', '<bbox>', '</bbox>', '```', 'ANS ', 'FAIL',
          '0', '644', '406', '-5', '0.5', '1e308', '1e999', '-1e999', 'nan', 'inf', '99999999999999999999999', 'ctrl',
          'arrowleft', 'space', "')", "'),", '[EOS]', '温度', '\x00', '\t', '\r']
soup = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=4)), max_size=40).map(''.join)
screens = st.sampled_from([(1280, 800), (1920, 1080), (2560, 1440), (1366, 768), (800, 600)])
coord_modes = st.sampled_from(['absolute', 'relative1000'])

@st.composite
def mutated_reply(draw):
    "A corpus reply with a few random insertions, deletions, duplications or a truncation."
    s = draw(st.sampled_from(CORPUS))['text']
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(s)))
        j = draw(st.integers(i, len(s)))
        op = draw(st.sampled_from(['insert', 'delete', 'truncate', 'duplicate']))
        if op == 'insert': s = s[:i] + draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=6))) + s[i:]
        elif op == 'delete': s = s[:i] + s[j:]
        elif op == 'truncate': s = s[:i]
        else: s = s[:j] + s[i:j] + s[j:]
    return s

# contents the model may type: quotes, backslashes, newlines, `')`, parentheses, unicode (no lone surrogates)
content_chars = st.one_of(st.sampled_from(list("'\"\\\n()`,=;#<> \t") + ["')", "'),", "\\n", "\\'", ')\n\n']),
                          st.characters(blacklist_categories=('Cs',)))
contents = st.lists(content_chars, max_size=30).map(''.join)

def escape_single(s, escape_double=False):
    "The model's way of writing s inside '...': backslash, quote and newline escaped; other characters raw."
    e = s.replace('\\', '\\\\').replace("'", "\\'").replace('\n', '\\n')
    return e.replace('"', '\\"') if escape_double else e

# ------------------------------------------------------------------ checks
def check_actions(acts, screen=(1280, 800)):
    "A non-empty list of Actions with known kinds and finite coordinates inside the screen; its pyautogui code compiles."
    assert isinstance(acts, list) and acts
    W, H = screen
    for a in acts:
        assert isinstance(a, Action) and a.kind in KINDS
        for v, hi in ((a.x, W), (a.y, H), (a.x2, W), (a.y2, H)):
            assert v is None or (isinstance(v, float | int) and math.isfinite(v) and 0 <= v <= hi - 1), (a, screen)
        assert isinstance(a.text, str) and isinstance(a.keys, tuple) and isinstance(a.enter, bool)
    compile(to_pyautogui(acts), '<x>', 'exec')

def expected_type(s):
    "(text, enter) that `type(content=s)` must give: one trailing newline means press Enter."
    return (s[:-1], True) if s.endswith('\n') else (s, False)

# ------------------------------------------------------------------ never raises, always compiles
@FAST
@given(st.text(max_size=200), screens, coord_modes)
def test_arbitrary_text(text, screen, coords):
    check_actions(parse_action(text, screen=screen, coords=coords), screen)

@FAST
@given(soup, screens, coord_modes)
def test_syntax_soup(text, screen, coords):
    check_actions(parse_action(text, screen=screen, coords=coords), screen)

@FAST
@given(mutated_reply(), screens, coord_modes)
def test_mutated_corpus_replies(text, screen, coords):
    check_actions(parse_action(text, screen=screen, coords=coords), screen)

@settings(max_examples=100, deadline=None, database=None)
@given(st.one_of(st.none(), st.integers(), st.binary(), st.lists(st.text())))
def test_non_str_input_is_invalid(obj):
    "Not a str at all: still no exception, one invalid action."
    acts = parse_action(obj)
    assert [a.kind for a in acts] == ['invalid']

@FAST
@given(st.sampled_from(['1e308', '1e999', '-1e999', '9' * 400, '1e-400', '123456789012345678901234567890']),
       st.sampled_from(['click', 'drag', 'scroll', 'hover']), screens, coord_modes)
def test_huge_coordinates_stay_finite(num, fn, screen, coords):
    "Numbers that overflow after scaling must not give inf/nan coordinates (or generated code that uses them)."
    extra = {'drag': ", end_box='(10,10)'", 'scroll': ", direction='down'"}.get(fn, '')
    check_actions(parse_action(f"Action: {fn}(start_box='({num},{num})'{extra})", screen=screen, coords=coords), screen)

@FAST
@given(st.floats(-1e7, 1e7), st.floats(-1e7, 1e7), screens, coord_modes, st.sampled_from(['box', 'pyautogui', 'drag end']))
def test_finite_points_are_clamped_into_the_screen(x, y, screen, coords, form):
    "A finite point anywhere lands where clamping the scaled point into 0..W-1, 0..H-1 puts it, in every dialect."
    W, H = screen
    h, w = smart_resize(H, W)
    sx, sy = (W / 1000, H / 1000) if coords == 'relative1000' else (W / w, H / h)
    if form == 'pyautogui': text, sx, sy = f'pyautogui.moveTo({x!r}, {y!r})', 1, 1
    elif form == 'box': text = f"hover(start_box='({x!r},{y!r})')"
    else: text = f"drag(start_box='(0,0)', end_box='({x!r},{y!r})')"
    a, = parse_action(text, screen=screen, coords=coords)
    want = (min(max(x * sx, 0.0), W - 1.0), min(max(y * sy, 0.0), H - 1.0))
    got = (a.x2, a.y2) if form == 'drag end' else (a.x, a.y)
    assert a.kind == ('drag' if form == 'drag end' else 'move') and got == pytest.approx(want, rel=1e-12, abs=1e-9), (text, a, want)
    check_actions([a], screen)

@FAST
@given(st.sampled_from(['1e999', '-1e999', '1e309', '9' * 400]), st.sampled_from(['x', 'y', 'x2', 'y2']), screens, coord_modes)
def test_a_point_that_is_not_finite_is_invalid_saying_why(num, where, screen, coords):
    "Any coordinate that overflows a float gives one `invalid` action whose text says why, then holds the call."
    xy = {'x': '7', 'y': '8', 'x2': '9', 'y2': '10', where: num}
    for text in (f"drag(start_box='({xy['x']},{xy['y']})', end_box='({xy['x2']},{xy['y2']})')",
                 f"pyautogui.click({xy['x']}, {xy['y']})" if where in ('x', 'y') else f"pyautogui.scroll(-1, x={xy['x2']}, y={xy['y2']})"):
        acts = parse_action(text, screen=screen, coords=coords)
        assert len(acts) == 1 and acts[0].kind == 'invalid', (text, acts)
        assert acts[0].text.startswith('[not parsed: the point (') and 'is not finite] ' in acts[0].text and acts[0].text.endswith(text)

# ------------------------------------------------------------------ typed text round trips
@FAST
@given(contents, st.booleans(), st.booleans())
def test_type_content_roundtrip(s, escape_double, whole_reply):
    "type(content='<escaped s>') gives s back (a trailing newline becoming enter=True), bare or in a whole reply."
    assume(s)
    action = f"type(content='{escape_single(s, escape_double)}')"
    text = f"Thought: Type the text into the field.\nAction: {action}" if whole_reply else action
    acts = parse_action(text)
    assert len(acts) == 1 and acts[0].kind == 'type', (text, acts)
    assert (acts[0].text, acts[0].enter) == expected_type(s), text
    check_actions(acts)

@FAST
@given(contents, contents)
def test_type_in_multi_action_reply(s1, s2):
    "Several blank-line separated actions: each typed text survives, and the click between them too."
    assume(s1 and s2)
    text = (f"Thought: Fill in both fields.\nAction: type(content='{escape_single(s1)}')\n\n"
            f"click(start_box='(644,406)')\n\ntype(content='{escape_single(s2)}')")
    acts = parse_action(text)
    assert [a.kind for a in acts] == ['type', 'click', 'type'], (text, acts)
    assert (acts[0].text, acts[0].enter) == expected_type(s1)
    assert (acts[2].text, acts[2].enter) == expected_type(s2)
    assert (acts[1].x, acts[1].y) == (640.0, 400.0)

@FAST
@given(contents, st.booleans())
def test_type_to_uitars_roundtrip(s, enter):
    "Action('type') -> to_uitars -> parse_action gives the same text and enter flag."
    assume(s and not s.endswith('\n'))
    a = Action('type', text=s, enter=enter)
    back = parse_action(to_uitars([a]))
    assert back == [a], (to_uitars([a]), back)

# ------------------------------------------------------------------ to_uitars round trips of pointer actions
@st.composite
def pointer_actions(draw, screen):
    W, H = screen
    xs, ys = st.floats(0, W - 1), st.floats(0, H - 1)
    kind = draw(st.sampled_from(['click', 'left_double', 'right_single', 'move', 'drag', 'scroll']))
    if kind == 'drag': return Action('drag', draw(xs), draw(ys), draw(xs), draw(ys))
    if kind == 'scroll': return Action('scroll', draw(xs), draw(ys), direction=draw(st.sampled_from(['up', 'down', 'left', 'right'])))
    return Action(kind, draw(xs), draw(ys))

def half_unit(screen, coords):
    "Half a model coordinate unit in screen pixels, per axis: the most that writing integers can lose."
    W, H = screen
    if coords == 'relative1000': return 0.5 * W / 1000, 0.5 * H / 1000
    h, w = smart_resize(H, W)
    return 0.5 * W / w, 0.5 * H / h

@FAST
@given(st.data(), screens, coord_modes, st.booleans())
def test_to_uitars_roundtrip_pointer_actions(data, screen, coords, box_tokens):
    """Any screen point comes back within half a model unit (to_uitars writes the integers the model emits);
    that is within 0.5 px whenever the model frame is at least as large as the screen (1280x800, 1920x1080)."""
    acts = data.draw(st.lists(pointer_actions(screen), min_size=1, max_size=3))
    text = to_uitars(acts, screen=screen, coords=coords, box_tokens=box_tokens)
    back = parse_action(text, screen=screen, coords=coords)
    assert [a.kind for a in back] == [a.kind for a in acts], text
    tx, ty = half_unit(screen, coords)
    for a, b in zip(acts, back):
        for f, tol in (('x', tx), ('y', ty), ('x2', tx), ('y2', ty)):
            u, v = getattr(a, f), getattr(b, f)
            assert (u is None and v is None) or abs(u - v) <= tol + 1e-9, (f, a, b, text)
        assert a.direction == b.direction

# ------------------------------------------------------------------ to_pyautogui on hand-built actions
@st.composite
def any_action(draw):
    "A well-formed Action of any kind, with arbitrary strings where strings go."
    kind = draw(st.sampled_from(sorted(KINDS)))
    xy = st.floats(-1e6, 1e6)
    kw = {}
    if kind in ('click', 'left_double', 'right_single', 'move', 'drag'): kw.update(x=draw(xy), y=draw(xy))
    if kind == 'drag': kw.update(x2=draw(xy), y2=draw(xy))
    if kind == 'scroll':
        kw['direction'] = draw(st.sampled_from(['up', 'down', 'left', 'right']))
        if draw(st.booleans()): kw.update(x=draw(xy), y=draw(xy))
    if kind in ('type', 'finished', 'answer', 'invalid'): kw['text'] = draw(st.text(max_size=40))
    if kind == 'type': kw['enter'] = draw(st.booleans())
    if kind == 'hotkey': kw['keys'] = tuple(draw(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4)))
    return Action(kind, **kw)

@FAST
@given(st.lists(any_action(), min_size=1, max_size=5))
def test_to_pyautogui_compiles_for_any_actions(acts):
    compile(to_pyautogui(acts), '<x>', 'exec')
