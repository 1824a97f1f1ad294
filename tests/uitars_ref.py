"""Helpers shared by the differential tests and `bench/actions.py`: the corpus, the official UI-TARS parsers
(0.1.4 in-process, 0.5.1 in a subprocess because both are the package `ui_tars`), and a reader that turns the
pyautogui code they generate back into plain action dicts so it can be compared with `coda.actions`.
Nothing here executes model text or generated code: generated code is only parsed with `ast`."""
import ast, contextlib, io, json, math, os, re, subprocess, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS_PATH = HERE / 'data' / 'uitars_replies.jsonl'
KINDS = {'click', 'left_double', 'right_single', 'drag', 'hotkey', 'type', 'scroll', 'move', 'wait',
         'finished', 'call_user', 'answer', 'fail', 'invalid'}
DEFAULTS = dict(x=None, y=None, x2=None, y2=None, text='', enter=False, keys=(), direction='')
COORDS = ('x', 'y', 'x2', 'y2')

def load_corpus(path=CORPUS_PATH):
    "The corpus entries, in file order."
    return [json.loads(l) for l in Path(path).read_text(encoding='utf-8').splitlines() if l.strip()]

# ---------------------------------------------------------------- the official parsers
def official_args(entry):
    "The correct configuration of the official parser for `entry`: (factor, H, W, model_type)."
    W, H = entry['screen']
    return 1000, H, W, ('qwen25vl' if entry['coords'] == 'absolute' else 'doubao')

def run_014(entry):
    """Run ui-tars 0.1.4 (parse, then one pyautogui chunk per action, `input_swap=False`) on `entry`.
    Returns {'error': str|None, 'responses': [...], 'codes': [...]}; its prints are swallowed."""
    from ui_tars.action_parser import parse_action_to_structure_output, parsing_response_to_pyautogui_code
    factor, H, W, mt = official_args(entry)
    out = {'error': None, 'responses': [], 'codes': []}
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            rs = parse_action_to_structure_output(entry['text'], factor, H, W, model_type=mt)
            out['responses'] = rs
            out['codes'] = [parsing_response_to_pyautogui_code([r], H, W, input_swap=False) for r in rs]
        except Exception as e:  # the official parser raises on many inputs: that is what we record
            out['error'] = f'{type(e).__name__}: {e}'
    return out

SCRIPT_051 = r'''
import contextlib, io, json, sys
import ui_tars, ui_tars.action_parser as ap
entries = json.load(sys.stdin)
res = {'file': ui_tars.__file__, 'results': {}}
for e in entries:
    W, H = e['screen']; mt = 'qwen25vl' if e['coords'] == 'absolute' else 'doubao'
    o = {'error': None, 'responses': [], 'codes': [], 'codes_default_scale': []}
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            rs = ap.parse_action_to_structure_output(e['text'], 1000, H, W, model_type=mt)
            o['responses'] = rs
            o['codes'] = [ap.parsing_response_to_pyautogui_code([r], H, W, input_swap=False, scale_factor=1) for r in rs]
            o['codes_default_scale'] = [ap.parsing_response_to_pyautogui_code([r], H, W, input_swap=False) for r in rs]
        except Exception as ex:
            o['error'] = type(ex).__name__ + ': ' + str(ex)
    res['results'][e['id']] = o
print(json.dumps(res))
'''

def uitars051_dir():
    "Where ui-tars 0.5.1 is unpacked: $CODA_UITARS051, else <repo>/.venv/opt/ui-tars-0.5.1; None when absent."
    for d in (os.environ.get('CODA_UITARS051'), REPO / '.venv' / 'opt' / 'ui-tars-0.5.1'):
        if d and (Path(d) / 'ui_tars' / 'action_parser.py').is_file(): return Path(d)
    return None

def run_051(entries, d051):
    """Run ui-tars 0.5.1 from directory `d051` in a subprocess on `entries` (`scale_factor=1`, the correct setting,
    and also its default 1000). Returns {id: {'error', 'responses', 'codes', 'codes_default_scale'}}."""
    env = {**os.environ, 'PYTHONPATH': str(d051)}
    p = subprocess.run([sys.executable, '-c', SCRIPT_051], input=json.dumps(entries), capture_output=True,
                       text=True, env=env, timeout=300)
    if p.returncode: raise RuntimeError(f'ui-tars 0.5.1 subprocess failed:\n{p.stderr[-3000:]}')
    res = json.loads(p.stdout)
    assert Path(res['file']).resolve().is_relative_to(Path(d051).resolve()), f"loaded the wrong ui_tars: {res['file']}"
    return res['results']

# ---------------------------------------------------------------- reading generated code back
def _calls(code):
    "(name, args, kwargs) of each top-level `pyautogui.X(...)` / `pyperclip.X(...)` call; SyntaxError if it does not compile."
    compile(code, '<official>', 'exec')
    out = []
    for st in ast.parse(code).body:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute):
            f = st.value.func
            if isinstance(f.value, ast.Name) and f.value.id in ('pyautogui', 'pyperclip'):
                out.append((f.attr, [ast.literal_eval(a) for a in st.value.args],
                            {k.arg: ast.literal_eval(k.value) for k in st.value.keywords}))
    return out

def code_to_actions(code, response):
    """What the official code for ONE response would do, as a list of action dicts (usually one; empty when it does nothing).
    Raises SyntaxError when the code does not compile."""
    if code == 'DONE': return [{'kind': 'finished', 'text': response['action_inputs'].get('content', '')}]
    calls = _calls(code)
    if not calls:
        m = re.search(r'# Unrecognized action type: (\w+)', code)
        return [{'kind': m.group(1)}] if m else []
    acts, i = [], 0
    while i < len(calls):
        name, a, k = calls[i]; nxt = calls[i + 1] if i + 1 < len(calls) else (None, [], {})
        if name == 'click':
            acts.append({'kind': 'right_single' if k.get('button') == 'right' else 'click', 'x': a[0], 'y': a[1]})
        elif name == 'doubleClick': acts.append({'kind': 'left_double', 'x': a[0], 'y': a[1]})
        elif name == 'moveTo' and nxt[0] == 'dragTo':
            acts.append({'kind': 'drag', 'x': a[0], 'y': a[1], 'x2': nxt[1][0], 'y2': nxt[1][1]}); i += 1
        elif name == 'moveTo': acts.append({'kind': 'move', 'x': a[0], 'y': a[1]})
        elif name == 'scroll':
            acts.append({'kind': 'scroll', 'direction': 'up' if a[0] > 0 else 'down', 'x': k.get('x'), 'y': k.get('y')})
        elif name == 'hotkey': acts.append({'kind': 'hotkey', 'keys': tuple('space' if x == ' ' else x for x in a)})
        elif name == 'write':
            enter = nxt[0] == 'press' and nxt[1] == ['enter']
            acts.append({'kind': 'type', 'text': a[0], 'enter': enter}); i += enter
        else: acts.append({'kind': f'pyautogui.{name}', 'args': a})
        i += 1
    return acts

def official_actions(result):
    "All actions of an official run (from `run_014` / `run_051`); raises SyntaxError if any chunk does not compile."
    return [a for r, c in zip(result['responses'], result['codes']) for a in code_to_actions(c, r)]

# ---------------------------------------------------------------- comparing
def action_dict(a):
    "A `coda.actions.Action` as a plain dict."
    return {'kind': a.kind, **{f: getattr(a, f) for f in DEFAULTS}}

def mismatches(actual, expect, tol=0.01):
    """Differences between two lists of action dicts; a field missing from a dict means its default.
    The text of an `invalid` action is not compared (it is whatever raw text was rejected)."""
    if len(actual) != len(expect): return [f'{len(actual)} actions, expected {len(expect)}: {actual}']
    out = []
    for i, (a, e) in enumerate(zip(actual, expect)):
        if a.get('kind') != e.get('kind'): out.append(f'#{i}: kind {a.get("kind")!r} != {e.get("kind")!r}'); continue
        for f, d in DEFAULTS.items():
            av, ev = a.get(f, d), e.get(f, d)
            if f == 'text' and e['kind'] == 'invalid': continue
            if f in COORDS:
                ok = (av is None and ev is None) or (av is not None and ev is not None and math.isfinite(av) and abs(av - ev) <= tol)
            elif f == 'keys': ok = tuple(av) == tuple(ev)
            else: ok = av == ev
            if not ok: out.append(f'#{i} {e["kind"]}: {f} = {av!r}, expected {ev!r}')
    return out
