"""Differential tests: `coda.actions` against the official UI-TARS parsers on `tests/data/uitars_replies.jsonl`.

Every corpus entry carries a written-down expectation (`expect`, screen pixels) and, per official version, a verdict:
`ok` (the official parser is right: it must agree with `expect`, and ours with it within 0.01 px), `n/a` (outside its
dialect), `rejects` (it raises on garbage, which is fine) or the names of the bugs it hits. Each bug name has a
`test_official_bug_<name>` here that asserts the official output is wrong in that specific way and ours is right,
so the test documents the bug and fails when upstream changes. ui-tars 0.1.4 runs in-process; 0.5.1 is the same
package name, so it runs in a subprocess (see `uitars_ref.run_051`)."""
import functools, math, os, random
import pytest
from uitars_ref import (KINDS, action_dict, code_to_actions, load_corpus, mismatches, official_actions, run_014,
                        run_051, uitars051_dir)
from coda.actions import Action, parse_action, smart_resize, split_reply, to_pyautogui, to_uitars

CORPUS = load_corpus()
BY_ID = {e['id']: e for e in CORPUS}
VERSIONS = {'0.1.4': 'uitars014', '0.5.1': 'uitars051'}
VERDICTS = {'ok', 'n/a', 'rejects'}

def ours(entry):
    "Our parse of a corpus entry, as action dicts."
    return [action_dict(a) for a in parse_action(entry['text'], screen=tuple(entry['screen']), coords=entry['coords'])]

def labels(entry, v):
    "The verdict labels of `entry` for official version `v`."
    return set(entry[VERSIONS[v]].split())

def cases(label, versions=VERSIONS):
    "pytest params (entry, version) for the entries labelled `label`."
    return [pytest.param(e, v, id=f"{e['id']}-{v}") for e in CORPUS for v in versions if label in labels(e, v)]

@functools.cache
def _r014(id_): return run_014(BY_ID[id_])

@pytest.fixture(scope='module')
def u051():
    "Results of ui-tars 0.5.1 on the whole corpus (one subprocess); skipped when 0.5.1 is absent, failed under CI."
    d = uitars051_dir()
    if d is None:
        msg = 'ui-tars 0.5.1 not found: set CODA_UITARS051 or run `make setup` (installs .venv/opt/ui-tars-0.5.1)'
        if os.environ.get('CI') == 'true': pytest.fail(msg)
        pytest.skip(msg)
    return run_051(CORPUS, d)

@pytest.fixture
def run(request):
    "run(entry, version) -> the official result dict for that version."
    return lambda e, v: _r014(e['id']) if v == '0.1.4' else request.getfixturevalue('u051')[e['id']]

def outcome(res, entry):
    "'raises', 'uncompilable', 'wrong' or 'right': how an official result compares with the expectation."
    if res['error']: return 'raises'
    try: acts = official_actions(res)
    except SyntaxError: return 'uncompilable'
    return 'wrong' if mismatches(acts, entry['expect']) else 'right'

def assert_ours_right(entry):
    assert not mismatches(ours(entry), entry['expect']), (entry['id'], ours(entry))

# ------------------------------------------------------------------ the corpus itself
def test_corpus_shape():
    "At least 70 entries, unique ids, the documented fields, known kinds and verdicts."
    assert len(CORPUS) >= 70 and len(BY_ID) == len(CORPUS)
    for e in CORPUS:
        assert {'id', 'text', 'coords', 'screen', 'note', 'expect', 'uitars014', 'uitars051'} <= set(e), e['id']
        assert e['coords'] in ('absolute', 'relative1000') and len(e['screen']) == 2
        assert e['expect'] and all(a['kind'] in KINDS for a in e['expect']), e['id']

def test_every_bug_label_has_a_named_test():
    "Each bug label in the corpus is documented by a test_official_bug_<label> in this module."
    bugs = {l for e in CORPUS for v in VERSIONS for l in labels(e, v)} - VERDICTS
    missing = sorted(b for b in bugs if f'test_official_bug_{b}' not in globals())
    assert not missing, missing

def test_corpus_covers_the_dialects():
    "The corpus holds the forms the brief lists (box tokens kept and stripped, <point>, v1, planner, multi-action...)."
    texts = [e['text'] for e in CORPUS]
    for needle in ('<|box_start|>', "start_box='(", '<point>', '<bbox>', "start_box='[", 'Action:c', 'Action:t',
                   'start_point=', 'end_point=', 'Reflection:', '```ANS', 'Action: ANS', 'FAIL', 'wait()',
                   'call_user()', 'finished(', "\\n')", ')\n\n', 'left_single', 'hover(', 'select(',
                   "direction='left'", "direction='right'"):
        assert any(needle in t for t in texts), needle
    assert {tuple(e['screen']) for e in CORPUS} >= {(1280, 800), (1920, 1080)}
    assert {e['coords'] for e in CORPUS} == {'absolute', 'relative1000'}
    for item in (1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12):  # the research note's §1.7 edge cases, each an entry named after it
        assert any(e['id'].startswith(f'bug_item{item}_') for e in CORPUS), item

# ------------------------------------------------------------------ ours against the written-down expectation
@pytest.mark.parametrize('entry', CORPUS, ids=lambda e: e['id'])
def test_ours_matches_expectation(entry):
    assert_ours_right(entry)

@pytest.mark.parametrize('entry', CORPUS, ids=lambda e: e['id'])
def test_ours_code_compiles(entry):
    "Our pyautogui code compiles for every corpus reply (the official one does not, see the bug tests)."
    compile(to_pyautogui(parse_action(entry['text'], screen=tuple(entry['screen']), coords=entry['coords'])), '<x>', 'exec')

# ------------------------------------------------------------------ official == expectation == ours, where official is right
@pytest.mark.parametrize('entry,v', cases('ok'))
def test_official_agrees(entry, v, run):
    res = run(entry, v)
    assert res['error'] is None, res['error']
    off = official_actions(res)
    assert not mismatches(off, entry['expect']), ('official differs from the expectation', off)
    assert not mismatches(ours(entry), off), ('ours differs from the official parser', ours(entry), off)

@pytest.mark.parametrize('entry', [e for e in CORPUS if e['uitars014'] == 'ok' and e['text'].startswith('Thought:')
                                   and e['text'].count('Action:') == 1], ids=lambda e: e['id'])
def test_split_reply_thought_matches_official(entry):
    "The thought ours splits off equals the official parser's `thought` (one 'Action:' in the reply)."
    thought, action = split_reply(entry['text'])
    assert thought == _r014(entry['id'])['responses'][0]['thought']
    assert action == entry['text'].split('Action:')[-1].strip()

@pytest.mark.parametrize('entry,v', cases('rejects'))
def test_official_rejects_garbage(entry, v, run):
    "Garbage: the official parser raises (acceptable) and ours returns one `invalid` action instead of raising."
    assert run(entry, v)['error']
    assert [a['kind'] for a in ours(entry)] == ['invalid']

@pytest.mark.parametrize('entry,v', cases('n/a'))
def test_official_cannot_read_planner_dialect(entry, v, run):
    "CODA planner answers (ANS / FAIL) are not UI-TARS actions: the official parser raises, ours reads them."
    assert run(entry, v)['error']
    assert_ours_right(entry)

# ------------------------------------------------------------------ the official bugs, one named test each
@pytest.mark.parametrize('entry,v', cases('box_tokens'))
def test_official_bug_box_tokens(entry, v, run):
    "Box tokens left in by the server: float('<|box_start|>644') raises (§1.7 item 12, UI-TARS#181)."
    err = run(entry, v)['error']
    assert err and 'could not convert string to float' in err and '<|box_start|>' in err
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('action_without_space'))
def test_official_bug_action_without_space(entry, v, run):
    "`Action:click(...)`: A/B split on 'Action: ' with a space, so the whole reply is parsed as the action (§1.7 item 7)."
    res = run(entry, v)
    o = outcome(res, entry)
    assert o != 'right'
    if o == 'wrong': assert any('Thought:' in a.get('text', '') for a in official_actions(res))
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('bare_action'))
def test_official_bug_bare_action(entry, v, run):
    "A bare action (no 'Action:' label) trips `assert 'Action:' in text`."
    assert run(entry, v)['error'].startswith('AssertionError')
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('type_newline_uncompilable'))
def test_official_bug_type_newline_uncompilable(entry, v, run):
    "0.1.4 writes type content with an embedded newline into '...' verbatim: unterminated string literal (§1.7 item 4)."
    with pytest.raises(SyntaxError, match='unterminated string'): official_actions(run(entry, v))
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('type_backslash_uncompilable'))
def test_official_bug_type_backslash_uncompilable(entry, v, run):
    "0.1.4 writes backslashes unescaped: 'C:\\Users' is a unicode-escape SyntaxError (§1.7 item 4)."
    with pytest.raises(SyntaxError, match='unicode'): official_actions(run(entry, v))
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('type_paren_quote'))
def test_official_bug_type_paren_quote(entry, v, run):
    "Content with `')` inside: the non-greedy regex stops there, the newline moves into the text, no Enter (§1.7 item 5)."
    acts = official_actions(run(entry, v))
    assert len(acts) == 1 and acts[0]['kind'] == 'type' and not acts[0]['enter']
    assert acts[0]['text'] != entry['expect'][0]['text'] and 'hi' in acts[0]['text']
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('single_newline_split'))
def test_official_bug_single_newline_split(entry, v, run):
    "Two calls separated by one newline are not split: the second swallows the first (§1.7 item 6)."
    res = run(entry, v)
    o = outcome(res, entry)
    assert o in ('raises', 'uncompilable', 'wrong')
    if o == 'wrong': assert len(official_actions(res)) == 1
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('blank_line_in_content'))
def test_official_bug_blank_line_in_content(entry, v, run):
    "Raw newlines in content with ')' then a blank line: the ')\\n\\n' split cuts the string (§1.7 item 6)."
    assert 'Pattern not found' in run(entry, v)['error']
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('action_label_in_content'))
def test_official_bug_action_label_in_content(entry, v, run):
    "'Action: ' inside the typed content: the split on the last 'Action: ' cuts the string, the rest cannot be parsed."
    assert "Action can't parse" in run(entry, v)['error']
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('thought_triple_quote'))
def test_official_bug_thought_triple_quote(entry, v, run):
    "The thought is pasted into a ''' docstring of the generated code; a thought containing ''' breaks it (§1.7 item 10)."
    with pytest.raises(SyntaxError): official_actions(run(entry, v))
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('double_quoted_content'))
def test_official_bug_double_quoted_content(entry, v, run):
    "type(content=\"...\"): the regex only knows single quotes."
    assert 'Pattern not found' in run(entry, v)['error']
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('arrowleft_in_combo'))
def test_official_bug_arrowleft_in_combo(entry, v, run):
    "arrowleft/arrowdown are only mapped when they are the whole hotkey; pyautogui ignores 'arrowleft' (§1.7 item 8)."
    acts = official_actions(run(entry, v))
    assert len(acts) == 1 and any(k.startswith('arrow') for k in acts[0]['keys'])
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('point_decimal'))
def test_official_bug_point_decimal(entry, v, run):
    "<point>x y</point> is matched with \\d+ only: decimals reach float() unconverted (§1.7 item 11)."
    err = run(entry, v)['error']
    assert err and '<point>' in err
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('bbox'))
def test_official_bug_bbox(entry, v, run):
    "<bbox>x1 y1 x2 y2</bbox> is only read by 0.5.1's _v2 parser, not by parse_action_to_structure_output (§1.7 item 12)."
    err = run(entry, v)['error']
    assert err and '<bbox>' in err
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('square_box'))
def test_official_bug_square_box(entry, v, run):
    "'[x1, y1, x2, y2]' boxes (UI-TARS-desktop PR#28): only parentheses are stripped, float('[600') raises (§1.7 item 12)."
    err = run(entry, v)['error']
    assert err and "'[" in err
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('no_hscroll'))
def test_official_bug_no_hscroll(entry, v, run):
    "scroll(direction='left'/'right') produces no code at all in any official copy."
    res = run(entry, v)
    assert res['error'] is None and res['responses'][0]['action_type'] == 'scroll'
    assert official_actions(res) == []
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('edge_off_screen'))
def test_official_bug_edge_off_screen(entry, v, run):
    "The frame's far edge scales to x = W or y = H, one pixel past the screen (its pixels are 0..W-1, 0..H-1); ours clamps into it."
    W, H = entry['screen']
    acts = official_actions(run(entry, v))
    assert any(abs(a['x'] - W) < 0.01 or abs(a['y'] - H) < 0.01 for a in acts if a.get('x') is not None), acts
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('enter_twice'))
def test_official_bug_enter_twice(entry, v, run):
    "0.5.1 no longer strips the trailing newline: it types '...\\n' and then presses Enter, so Enter fires twice (§1.7 item 3)."
    acts = [a for a in official_actions(run(entry, v)) if a['kind'] == 'type']
    assert acts and all(a['text'].endswith('\n') and a['enter'] for a in acts)
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('051_quote_backslash'))
def test_official_bug_051_quote_backslash(entry, v, run):
    "0.5.1 repr()s the already-escaped content: it's -> it\\'s with a literal backslash (§1.7 item 3)."
    acts = [a for a in official_actions(run(entry, v)) if a['kind'] == 'type']
    assert acts and "\\'" in acts[0]['text']
    assert_ours_right(entry)

@pytest.mark.parametrize('entry,v', cases('051_scroll_unscaled'))
def test_official_bug_051_scroll_unscaled(entry, v, run):
    "0.5.1 never scales the scroll position: x, y stay normalized in [0, 1] (§1.7 item 2)."
    acts = official_actions(run(entry, v))
    assert len(acts) == 1 and acts[0]['kind'] == 'scroll'
    assert 0 <= acts[0]['x'] <= 1 and 0 <= acts[0]['y'] <= 1
    assert entry['expect'][0]['x'] > 1 and entry['expect'][0]['y'] > 1
    assert_ours_right(entry)

def test_official_bug_051_default_scale_factor(u051):
    "0.5.1's default scale_factor=1000 divides parser output again: click(0.099, 0.198) for (100,200) on 1920x1080 (§1.7 item 1)."
    entry = BY_ID['bug_item1_051_default_scale_factor']
    res = u051[entry['id']]
    wrong = [a for r, c in zip(res['responses'], res['codes_default_scale']) for a in code_to_actions(c, r)]
    assert not mismatches(wrong, [{'kind': 'click', 'x': 0.099, 'y': 0.198}], tol=1e-9)
    assert not mismatches(official_actions(_r014(entry['id'])), [{'kind': 'click', 'x': 99.379, 'y': 197.802}], tol=1e-9)
    assert_ours_right(entry)

# ------------------------------------------------------------------ smart_resize and frames
SIZES = [(1080, 1920), (800, 1280), (1440, 2560), (2160, 3840), (768, 1366), (900, 1440), (720, 1280), (1050, 1680),
         (1200, 1920), (1600, 2560), (600, 800), (768, 1024), (1080, 2400), (2400, 1080), (28, 28), (1, 1), (10, 10),
         (50, 4000), (4000, 50), (100, 100), (280, 280), (13, 2600), (27, 29), (14, 14), (8192, 8192), (10000, 10000),
         (4321, 7777), (2000, 3000), (1, 200), (200, 1)]

def _random_sizes(n=300, seed=0):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        h, w = rng.randint(1, 9000), rng.randint(1, 9000)
        if max(h, w) / min(h, w) <= 200: out.append((h, w))
    return out

@pytest.mark.parametrize('hw', SIZES + _random_sizes(), ids=str)
def test_smart_resize_matches_official(hw):
    from ui_tars.action_parser import smart_resize as official
    assert tuple(smart_resize(*hw)) == tuple(official(*hw))

def test_smart_resize_known_values():
    "(height, width) order; the frames of the research notes."
    assert tuple(smart_resize(1080, 1920)) == (1092, 1932)
    assert tuple(smart_resize(800, 1280)) == (812, 1288)
    assert tuple(smart_resize(1440, 2560)) == (1428, 2548)
    assert tuple(smart_resize(768, 1366)) == (756, 1372)

@pytest.mark.parametrize('kw', [dict(min_pixels=3136), dict(max_pixels=1280 * 28 * 28), dict(max_pixels=2048 * 28 * 28),
                                dict(factor=14), dict(factor=32, min_pixels=4 * 32 * 32, max_pixels=1024 * 32 * 32)], ids=str)
def test_smart_resize_matches_official_with_limits(kw):
    from ui_tars.action_parser import smart_resize as official
    for hw in SIZES + _random_sizes(60, seed=1):
        assert tuple(smart_resize(*hw, **kw)) == tuple(official(*hw, **kw)), hw

def test_explicit_frame_equals_default():
    "frame=None means smart_resize of the screen: passing that frame explicitly changes nothing."
    for e in CORPUS:
        if e['coords'] != 'absolute': continue
        W, H = e['screen']; h, w = smart_resize(H, W)
        a = [action_dict(x) for x in parse_action(e['text'], frame=(w, h), screen=(W, H))]
        assert not mismatches(a, ours(e), tol=1e-9), e['id']

@pytest.mark.parametrize('img', [(1280, 720), (1000, 563), (3840, 2160)], ids=str)
def test_frame_differs_from_screen(img):
    "OSWorld-style: the model saw a resized image (img) of a 1920x1080 screen; official parses with the image size, maps to the screen."
    from ui_tars.action_parser import parse_action_to_structure_output, parsing_response_to_pyautogui_code
    iw, ih = img; h, w = smart_resize(ih, iw)
    text = "Thought: Click the icon.\nAction: click(start_box='(300,200)')\n\ndrag(start_box='(10,20)', end_box='(500,400)')"
    rs = parse_action_to_structure_output(text, 1000, ih, iw)
    off = [a for r in rs for a in code_to_actions(parsing_response_to_pyautogui_code([r], 1080, 1920, input_swap=False), r)]
    mine = [action_dict(a) for a in parse_action(text, frame=(w, h), screen=(1920, 1080))]
    assert not mismatches(mine, off)
    assert abs(mine[0]['x'] - 300 / w * 1920) < 1e-6 and abs(mine[0]['y'] - 200 / h * 1080) < 1e-6

# ------------------------------------------------------------------ to_uitars round trips
def _roundtrip_cases():
    return [pytest.param(e, bt, id=f"{e['id']}-{'tok' if bt else 'plain'}") for e in CORPUS for bt in (True, False)
            if e['expect'][0]['kind'] != 'invalid']

@pytest.mark.parametrize('entry,box_tokens', _roundtrip_cases())
def test_to_uitars_roundtrip(entry, box_tokens):
    "parse(to_uitars(actions)) == actions within 0.5 px, in the entry's own coordinate convention."
    kw = dict(screen=tuple(entry['screen']), coords=entry['coords'])
    acts = parse_action(entry['text'], **kw)
    text = to_uitars(acts, box_tokens=box_tokens, **kw)
    assert isinstance(text, str)
    back = [action_dict(a) for a in parse_action(text, **kw)]
    assert not mismatches(back, [action_dict(a) for a in acts], tol=0.5), text

OFFICIAL_KINDS = {'click', 'left_double', 'right_single', 'drag', 'move', 'hotkey', 'wait', 'finished', 'call_user'}

def _official_readable(e):
    "Entries whose actions the official 0.1.4 can read back when written by to_uitars (no hscroll, no tricky content)."
    ok = all(a['kind'] in OFFICIAL_KINDS or (a['kind'] == 'scroll' and a.get('direction') in ('up', 'down'))
             or (a['kind'] == 'type' and not any(c in a['text'] for c in ("\n", "\\", "')", 'Action:'))) for a in e['expect'])
    return ok and not any(k.startswith(('left', 'right', 'up', 'down')) for a in e['expect'] for k in a.get('keys', []))

@pytest.mark.parametrize('entry', [e for e in CORPUS if _official_readable(e)], ids=lambda e: e['id'])
def test_to_uitars_read_by_official(entry):
    "What to_uitars writes (box tokens off, the form vLLM returns) is read by the official 0.1.4 parser to the same actions."
    kw = dict(screen=tuple(entry['screen']), coords=entry['coords'])
    acts = parse_action(entry['text'], **kw)
    text = to_uitars(acts, box_tokens=False, **kw)
    if 'Action:' not in text: text = 'Action: ' + text
    res = run_014({**entry, 'text': text})
    assert res['error'] is None, (text, res['error'])
    assert not mismatches(official_actions(res), [action_dict(a) for a in acts], tol=0.5), text

def test_to_uitars_box_tokens_flag():
    "box_tokens=True writes the <|box_start|>...<|box_end|> form the model was trained on; False leaves it out."
    a = [Action('click', x=640.0, y=400.0)]
    assert '<|box_start|>' in to_uitars(a, box_tokens=True) and '<|box_end|>' in to_uitars(a, box_tokens=True)
    assert '<|box_start|>' not in to_uitars(a, box_tokens=False)
    assert '(644,406)' in to_uitars(a, box_tokens=False).replace(' ', '')
