"""The library's layers, read from its source with `ast` (imports inside functions count): the miniature stays out of the
library, the low rooms never reach up to the agent, the trainers never reach into launching or serving, no import circle,
and no private name crosses a module's door. Each failure names the module, the line and the import."""
import ast, graphlib
from pathlib import Path
import pytest

PKG = Path(__file__).resolve().parent.parent/'coda'

def module_of(path:Path)->str:
    "The dotted module name of a file under coda/"
    parts = path.relative_to(PKG.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)

def is_module(name:str)->bool:
    "Whether a dotted name under coda is a module (a file or a package), not a name in one"
    f = PKG.parent/Path(*name.split('.'))
    return f.with_suffix('.py').exists() or (f/'__init__.py').exists()

def base_of(mod:str, is_pkg:bool, n:ast.ImportFrom)->str:
    "The absolute module a `from ... import` reads from, its dots resolved against `mod`"
    if not n.level: return n.module or ''
    parts = mod.split('.') if is_pkg else mod.split('.')[:-1]
    return '.'.join(parts[:len(parts) - n.level + 1] + ([n.module] if n.module else []))

def imports(path:Path)->list:
    "(line, imported coda module, names imported from it) of every import in a file, at any depth, relative ones resolved"
    mod, out = module_of(path), []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Import): out += [(n.lineno, a.name, ()) for a in n.names if a.name.split('.')[0] == 'coda']
        elif isinstance(n, ast.ImportFrom) and (base := base_of(mod, path.name == '__init__.py', n)).split('.')[0] == 'coda':
            names = [a.name for a in n.names]
            subs = [a for a in names if is_module(f'{base}.{a}')]   # `from coda.envs import vm`: the module coda.envs.vm
            out += [(n.lineno, f'{base}.{a}', ()) for a in subs]
            if rest := tuple(a for a in names if a not in subs): out.append((n.lineno, base, rest))
    return out

EDGES = {module_of(p): imports(p) for p in sorted(PKG.rglob('*.py'))}

def under(m:str, pkgs)->bool: return any(m == p or m.startswith(p + '.') for p in pkgs)

def offending(froms, banned)->list:
    "'module:line imports target' for each import by a module in `froms` of a module in (or below) `banned`"
    return [f"{m}:{line} imports {t}" for m in froms for line, t, _ in EDGES[m] if under(t, banned)]

def test_the_walk_sees_imports_at_every_depth():
    assert len(EDGES) > 40 and 'coda.envs.core' in EDGES and 'coda.mini.slots' in EDGES
    assert any(t == 'coda.models' for _, t, _ in EDGES['coda.serve'])              # `from .models import ...` at the top
    assert ('coda.envs.core' in {t for _, t, _ in EDGES['coda.agent']})            # `from .envs.core import ...`
    assert any(t == 'coda.paths' for _, t, _ in EDGES['coda.envs.vmclient'])      # `from ..paths import ...` in a subpackage
    assert any(t == 'coda.serve' for _, t, _ in EDGES['coda.cli'])                 # `from coda.serve import ...` inside a function

def test_nothing_in_the_library_imports_the_miniature():
    bad = offending([m for m in EDGES if not under(m, ['coda.mini'])], ['coda.mini'])
    assert not bad, "the library imports coda.mini:\n" + '\n'.join(bad)

def test_the_low_rooms_never_import_the_agent():
    bad = offending([m for m in EDGES if under(m, ['coda.models', 'coda.judge', 'coda.taskgen', 'coda.envs'])], ['coda.agent'])
    assert not bad, "a low layer imports coda.agent:\n" + '\n'.join(bad)

def test_the_trainers_never_import_launching_or_serving():
    bad = offending(['coda.grpo', 'coda.sft', 'coda.judge_train'], ['coda.launch', 'coda.serve'])
    assert not bad, "a trainer imports launch or serve plumbing:\n" + '\n'.join(bad)

def test_no_import_circle():
    graph = {m: {t for _, t, _ in es if t != m} for m, es in EDGES.items()}
    try: graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        cyc = e.args[1][::-1]   # graphlib lists each module before the one that imports it
        where = [f"{a}:{min(l for l, t, _ in EDGES[a] if t == b)} imports {b}" for a, b in zip(cyc, cyc[1:])]
        pytest.fail("import circle " + ' -> '.join(cyc) + ":\n" + '\n'.join(where))

def test_no_private_name_crosses_a_module():
    bad = [f"{m}:{line} imports {n} from {t}" for m, es in EDGES.items() for line, t, names in es if t != m
           for n in names if n.startswith('_') and not n.startswith('__')]
    assert not bad, "private names imported from another module:\n" + '\n'.join(bad)
