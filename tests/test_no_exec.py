"""No code path of the action layer executes model text.

Two checks: the library's source contains no eval/exec/compile/__import__/os.system/shell=True anywhere; and the
parser, both renderers and `execute` run with those builtins replaced by traps on replies that try to inject code,
while a canary file that injected code would create stays absent.
"""
import ast, builtins, os
from pathlib import Path
import pytest
import coda
from coda.actions import parse_action, to_pyautogui, to_uitars, execute, Action

LIB = Path(coda.__file__).parent
FORBIDDEN_NAMES = {'eval', 'exec', 'compile', '__import__', 'execfile', 'breakpoint'}   # builtins that run text
FORBIDDEN_ATTRS = {'system', 'popen', 'spawnl', 'spawnv', 'execv', 'execvp', 'run_path', 'run_module'}  # os/runpy

def test_library_source_calls_no_evaluator():
    for f in LIB.glob('*.py'):
        tree = ast.parse(f.read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.Call):
                if isinstance(n.func, ast.Name): assert n.func.id not in FORBIDDEN_NAMES, f"{f.name}:{n.lineno} calls {n.func.id}"
                if isinstance(n.func, ast.Attribute): assert n.func.attr not in FORBIDDEN_ATTRS, f"{f.name}:{n.lineno} calls .{n.func.attr}"
                for kw in n.keywords:
                    assert not (kw.arg == 'shell' and getattr(kw.value, 'value', False) is True), f"{f.name}:{n.lineno} uses shell=True"

def payloads(canary):
    code = f"open({str(canary)!r}, 'w').write('pwned')"
    return [
        f"Thought: x\nAction: type(content='{code}')",
        f"click(start_box=__import__('os').system('touch {canary}'))",
        f"click(start_box='({code}, 10)')",
        f"hotkey(key={code})",
        f"{code}",
        f"pyautogui.click({code}, 5)",
        f"Action: ```ANS {code}```",
        f"finished(content='\"\"\"'); {code}; x=('')",
        f"type(content='\\'); {code} #')",
        f"scroll(start_box='(1,2)', direction=__import__('os').system('touch {canary}'))",
    ]

class Trap(Exception): pass

def test_parse_render_execute_never_evaluate(tmp_path, monkeypatch):
    canary = tmp_path/'pwned'
    def trap(*a, **k): raise Trap(f"evaluator called with {a[:1]!r}")
    for name in ('eval', 'exec', 'compile', '__import__'):
        monkeypatch.setattr(builtins, name, trap, raising=True) if name != '__import__' else None
    monkeypatch.setattr(os, 'system', trap)
    class Recorder:
        def __init__(self): self.calls = []
        def __getattr__(self, n): return lambda *a, **k: self.calls.append((n, a))
    for text in payloads(canary):
        acts = parse_action(text)
        assert acts and all(isinstance(a, Action) for a in acts)
        to_pyautogui(acts); to_uitars(acts)
        rec = Recorder()
        execute(acts, rec)
        for name, args in rec.calls:  # only numbers and plain strings reach the device
            assert all(isinstance(v, (int, float, str, type(None))) for v in args)
    assert not canary.exists()

def test_injected_text_is_typed_not_run(tmp_path):
    "An injection attempt in typed content is typed as text, byte for byte"
    canary = tmp_path/'pwned'
    code = f"__import__('os').system('touch {canary}')"
    (a,) = parse_action(f"type(content={code!r})")
    assert a.kind == 'type' and a.text == code
    src = to_pyautogui([a])
    assert f"pyautogui.write({code!r}" in src or f"pyperclip.copy({code!r})" in src
    assert not canary.exists()
