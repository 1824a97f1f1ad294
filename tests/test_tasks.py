"""coda.checks and coda.tasks: the checker language (each operator on a realistic dump, errors, bounds), run_checks' ScienceBoard
semantics for stop items, load-time validation, the translation of ScienceBoard's lambdas (per-app counts over its own
task files; translated checks agree with the lambdas' truth values, worked out by hand, on hand-written dumps),
injection attempts rejected with nothing run, and what runs natively. A few seconds in all."""
import builtins, json, math, os
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
import coda.checks as K, coda.tasks as T
from coda.checks import ARITY, CheckError, check, validate
from coda.tasks import (CODA_APPS, Task, TaskError, Untranslatable, gcmd_key, load_task, load_tasks, native_support, point_key, run_checks,
                        scienceboard_report, scienceboard_tasks, translate_item, translate_lambda, translate_task)
from coda.paths import SHARED

SB = SHARED/'data'/'scienceboard'/'tasks'
needs_sb = pytest.mark.skipif(not SB.exists(), reason='ScienceBoard task files not beside the checkout')
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)

# ------------------------------------------------------------------ realistic dumps, one per app layout
KAL = {"vars": {"p": "1+-i", "area": "37.6991118431"},
       "plots": [{"expr": "x->x^2", "color": "#0000ff", "res": 1, "points": {"(1, 1)": True, "(0, -11)": False}}],
       "plots3d": [{"expr": "(x, y)->x+y", "style": 2, "points": {"(1, 1, 2)": True}}]}
CEL = {"time": {"value": 2400000.04, "scale": 0.05, "pause": True},
       "config": {"render": {"orbits": True, "ecliptic": False}, "autoMagnitude": 9.0},
       "entity": {"Callisto": {"distance": 12000.5, "visible": True}, "Jupiter": {"distance": 1.88e6, "visible": True},
                  "Sol": {"position": [0.0, 0.0, 0.0]}, "Earth": {"position": [1.496e8, 0.0, 0.0]},
                  "Moon": {"position": [1.4924e8, 10.0, 0.0]}}}
GIS = {"layers": [{"name": "countries@PERMANENT", "opacity": 0.5}, {"name": "roadsmajor@PERMANENT", "opacity": 1.0}],
       "windows": [{"name": "boundary_region@PERMANENT", "_text": "boundary_region",
                    "_data": [None, {"params": [{"name": "display", "value": "shape,cat,topo"}, {"name": "font", "value": "Ubuntu:Bold"}]}]}],
       "region": {"center_easting": 385.0, "n": 44.0}, "output": "v.info map=boundary_region@PERMANENT\nn: 263975\n"}
CHX = {"states": {"m.(1,)._name": "2olx", "m.(2,)._name": "Color key", "m.(2,)._border": False,
                  "log.page_source": "<p>termini: <br>61 hydrogens added</p>"},
       "info": {"sel": ["atom id /A:9@N1 idatm_type N3+", "atom id /A:9@C2 idatm_type C3"]}}

# ------------------------------------------------------------------ every operator on a realistic input
OPS = [
    (["quote", ["cat", "topo"]], {}, ["cat", "topo"]),
    (["list", ["$", "vars", "p"], 2], KAL, ["1+-i", 2]),
    (["$", "entity", "Callisto", "distance"], CEL, 12000.5),
    (["$", "plots", -1, "points", "(1, 1)"], KAL, True),
    (["count", ["$", "layers"], ["<", ["@", "opacity"], 1]], GIS, 1),                    # @ inside a loop
    (["has", ["$", "vars", "euler"]], KAL, False),
    (["has", ["$", "vars"], "p"], KAL, True),
    (["get", ["$", "vars"], "euler", "#UNDEF"], KAL, "#UNDEF"),
    (["==", ["$", "vars", "p"], "1+-i"], KAL, True),
    (["!=", ["$", "plots", 0, "color"], "#000000"], KAL, True),
    (["<", ["$", "time", "scale"], 0.06], CEL, True),
    (["<=", ["$", "statusbar", "scale"], 400], {"statusbar": {"scale": 400}}, True),
    ([">", ["$", "region", "n"], 43.5], GIS, True),
    ([">=", ["$", "region", "n"], 44.5], GIS, False),
    (["close", ["float", ["$", "vars", "area"]], 37.6991118431, 1e-6], KAL, True),
    (["near32", math.exp(16.64) - 1, 16852337.69353376], {}, True),                      # KAlgebra B-04's far point
    (["and", ["$", "time", "pause"], ["$", "config", "render", "orbits"]], CEL, True),
    (["or", ["$", "config", "render", "ecliptic"], ["$", "time", "pause"]], CEL, True),
    (["not", ["$", "config", "render", "ecliptic"]], CEL, True),
    (["if", ["$", "time", "pause"], "paused", "running"], CEL, "paused"),
    (["let", {"d": ["$", "entity", "Callisto", "distance"]}, ["<", ["var", "d"], 15000]], CEL, True),
    (["var", "d"], None, CheckError),
    (["+", ["$", "time", "value"], 1], CEL, 2400001.04),
    (["-", ["$", "entity", "Callisto", "distance"]], CEL, -12000.5),
    (["-", ["$", "time", "value"], 2400000], CEL, pytest.approx(0.04)),
    (["*", ["$", "time", "scale"], 20], CEL, 1.0),
    (["/", ["$", "entity", "Jupiter", "distance"], 1000], CEL, 1880.0),
    (["%", ["$", "region", "center_easting"], 360], GIS, 25.0),
    (["abs", ["-", ["$", "entity", "Callisto", "distance"], 0]], CEL, 12000.5),
    (["round", ["$", "entity", "Callisto", "distance"]], CEL, 12000),
    (["round", ["$", "time", "value"], 1], CEL, 2400000.0),
    (["min", ["map", ["$", "layers"], ["@", "opacity"]]], GIS, 0.5),
    (["max", 3, ["$", "region", "n"]], GIS, 44.0),
    (["sum", ["map", ["$", "layers"], ["@", "opacity"]]], GIS, 1.5),
    (["len", ["$", "layers"]], GIS, 2),
    (["float", ["$", "vars", "area"]], KAL, 37.6991118431),
    (["int", "263975"], {}, 263975),
    (["str", ["$", "statusbar", "mode"]], {"statusbar": {"mode": 3}}, "3"),
    (["lower", ["$", "windows", 0, "_data", 1, "params", 1, "value"]], GIS, "ubuntu:bold"),
    (["upper", "asn"], {}, "ASN"),
    (["strip", "cat|x|y|z\n257|-79.1|8.3|0\n"], {}, "cat|x|y|z\n257|-79.1|8.3|0"),
    (["startswith", ["$", "layers", 0, "name"], "countries"], GIS, True),
    (["endswith", ["$", "layers", 1, "name"], "@PERMANENT"], GIS, True),
    (["split", ["$", "windows", 0, "_data", 1, "params", 0, "value"], ","], GIS, ["shape", "cat", "topo"]),
    (["join", ".", ["slice", ["split", "m.(2,)._name", "."], None, -1]], {}, "m.(2,)"),
    (["matches", ["$", "states", "log.page_source"], "termini: <br>61 hydrogens added"], CHX, True),
    (["matches", ["$", "output"], r"^n: \d+$"], GIS, False),
    (["in", "n: 263975", ["$", "output"]], GIS, True),
    (["in", "cat", ["split", ["$", "windows", 0, "_data", 1, "params", 0, "value"], ","]], GIS, True),
    (["subset", ["quote", ["cat", "topo"]], ["split", "shape,cat,topo", ","]], {}, True),
    (["==", ["set", ["$", "info", "sel"]], ["set", ["quote", ["atom id /A:9@C2 idatm_type C3", "atom id /A:9@N1 idatm_type N3+"]]]], CHX, True),
    (["sorted", ["keys", ["$", "vars"]]], KAL, ["area", "p"]),
    (["keys", ["$", "config", "render"]], CEL, ["orbits", "ecliptic"]),
    (["values", ["$", "config", "render"]], CEL, [True, False]),
    (["items", ["$", "vars"]], KAL, [["p", "1+-i"], ["area", "37.6991118431"]]),
    (["index", ["$", "layers"], 1], GIS, {"name": "roadsmajor@PERMANENT", "opacity": 1.0}),
    (["slice", "m.(2,)._name", 0, 6], {}, "m.(2,)"),
    (["any", ["$", "layers"], ["==", ["@", "name"], "countries@PERMANENT"]], GIS, True),
    (["all", ["$", "layers"], ["!=", ["@", "name"], "natural_earth@PERMANENT"]], GIS, True),
    (["filter", ["items", ["$", "states"]], ["endswith", ["@", 0], "._name"]], CHX, [["m.(1,)._name", "2olx"], ["m.(2,)._name", "Color key"]]),
    (["map", ["$", "layers"], ["@", "name"]], GIS, ["countries@PERMANENT", "roadsmajor@PERMANENT"]),
    (["dot", ["$", "entity", "Earth", "position"], ["$", "entity", "Earth", "position"]], CEL, 1.496e8 ** 2),
    (["norm", ["$", "entity", "Earth", "position"]], CEL, 1.496e8),
    (["cos", ["quote", [1, 0, 0]], ["quote", [0, 2, 0]]], {}, 0.0)]

@pytest.mark.parametrize('expr,dump,want', OPS, ids=[f"{i}:{e[0]}" for i, (e, _, _) in enumerate(OPS)])
def test_operator(expr, dump, want):
    if want is CheckError:
        with pytest.raises(CheckError): check(expr, dump)
    else: assert check(expr, dump) == want

def test_every_operator_has_an_example():
    def ops(x): return set() if not K.is_op(x) else {x[0]} if x[0] == 'quote' else {x[0]} | set().union(*map(ops, x[1:]))
    assert set().union(*(ops(e) for e, _, _ in OPS)) == set(ARITY)

def test_near32_is_float32_equality_for_big_values():
    y = math.exp(16.64) - 1     # float32 values are 2 apart here: 0.6 off is still "on the curve"
    assert check(["near32", y + 0.6, 16852337.69353376], {}) and not check(["close", y + 0.6, 16852337.69353376, 1e-4], {})
    assert check(["near32", 0.5, 0.50009], {}) and not check(["near32", 0.5, 0.50011], {})

CURVES = {'A-02': lambda x: math.log(x) ** 2 if x > 0 else None, 'B-01': lambda x: x * x, 'B-04': lambda x: math.exp(x) - 1,
          'C-07': lambda x: 2 * x / (x * x + 1) + 2 * x - 1, 'C-09': lambda x: 2 * x}

def membership(f, points):
    "Each sample point on y = f(x)? Analitza's way: is_near in float32"
    return {point_key(p): f(p[0]) is not None and check(["near32", f(p[0]), p[1]], {}) for p in points}

@needs_sb
@pytest.mark.parametrize('tid', sorted(CURVES))
def test_near32_reproduces_scienceboards_sample_points(tid):
    it = load_task(SB/'KAlgebra'/f'{tid}.json').evaluate[0]
    assert membership(CURVES[tid], it['key']) == {k: v for k, v in it['value'].items() if k.startswith('(')}

def test_the_solar_eclipse_cosine_in_the_language():
    "Celestia B-12's walrus lambda (untranslatable) as a checker: the Moon lies in the Sun's direction seen from Earth"
    dirs = lambda body: ["map", ["quote", [0, 1, 2]], ["-", ["index", ["$", "entity", body, "position"], ["@"]], ["index", ["var", "e"], ["@"]]]]
    expr = ["let", {"e": ["$", "entity", "Earth", "position"]}, [">", ["cos", dirs("Moon"), dirs("Sol")], 0.99]]
    assert check(expr, CEL) is True
    assert check(expr, {**CEL, "entity": {**CEL["entity"], "Moon": {"position": [1.496e8, 3.8e5, 0.0]}}}) is False

# ------------------------------------------------------------------ errors and bounds
@pytest.mark.parametrize('expr,msg', [
    (["lenn", ["$", "plots"]], "unknown operator 'lenn'"),
    (["in", "cat", ["cat", "topo"]], "unknown operator 'cat'"),                   # literal lists must be quoted
    (["$", "windows", 0, "_data", 1, "params", 9], "no index 9 in $['windows'][0]['_data'][1]['params'] (length 2)"),
    (["$", "region", "s"], "no key 's' in $['region']"),
    (["$", "layers", 5], "no index 5 in $['layers'] (length 2)"),
    (["@", "name"], "'@' used outside"),
    (["<", "a", 1], "'<': TypeError"),
    (["/", 1, 0], "check[2]: '/' takes a number other than 0 here"),                  # literals: refused before evaluating
    (["*", "ab", 100], "check[1]: '*' takes a number here, not 'ab'"),
    (["/", 1, ["-", ["$", "region", "n"], 44.0]], "ZeroDivisionError"),                # from the dump: when it runs
    (["*", ["$", "output"], 100], "'*' needs numbers"),
    (["not"], "'not' takes 1 argument, got 0"),
    ([1, ["$", "x"]], "inside a literal list"),
    (["matches", "x", "(a+)+" * 41], "pattern longer than 200"),
])
def test_errors_name_the_problem(expr, msg):
    with pytest.raises(CheckError, match=None) as e: check(expr, GIS)
    assert msg in str(e.value)

def test_bounds(monkeypatch):
    deep = 1
    for _ in range(80): deep = ["not", deep]
    with pytest.raises(CheckError, match='nested deeper than 64'): check(deep, {})
    with pytest.raises(CheckError, match='integer larger'): check(["let", {"a": 2 ** 4000}, ["*", ["var", "a"], ["var", "a"]]], {})
    with pytest.raises(CheckError, match='longer than'): check(["+", ["$", "s"], ["$", "s"]], {"s": "x" * 600_000})
    with pytest.raises(CheckError, match='text longer'): check(["matches", ["$", "s"], "x"], {"s": "x" * 100_001})
    monkeypatch.setattr(K, 'MAX_STEPS', 10_000)
    with pytest.raises(CheckError, match='evaluation steps'):
        check(["count", ["$", "xs"], ["any", ["$", "xs"], ["==", ["@"], -1]]], {"xs": list(range(300))})

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False, width=32), st.text(max_size=5))
ops = st.sampled_from(sorted(ARITY))
exprs = st.recursive(json_leaf, lambda kids: st.one_of(st.lists(kids, max_size=4), st.tuples(ops, st.lists(kids, max_size=3)).map(lambda t: [t[0], *t[1]]),
                                                       st.dictionaries(st.text(max_size=3), kids, max_size=2)), max_leaves=12)

@FAST
@given(exprs, st.sampled_from([KAL, CEL, GIS, CHX, {}]))
def test_random_expressions_never_raise_anything_but_checkerror(expr, dump):
    try: check(expr, dump)
    except CheckError: pass

# ------------------------------------------------------------------ run_checks: ScienceBoard's stop semantics
def test_ans_is_exact_list_equality_of_the_space_split_answer():
    items = [{"type": "stop", "value": "ANS", "args": ["Vigili", "del", "Fuoco"]}]     # GrassGIS C-03
    assert run_checks(items, None, 'ANS', 'Vigili del Fuoco') == (True, [])
    for bad in ('Vigili del fuoco', 'Vigili  del Fuoco', 'Vigili del Fuoco ', 'VigilidelFuoco'):
        ok, why = run_checks(items, None, 'ANS', bad)
        assert not ok and why[0].startswith('item 0 (stop): answer')
    assert not run_checks([{"type": "stop", "value": "ANS", "args": ["10.31"]}], None, 'ANS', '10.3100')[0]
    assert not run_checks(items, None, 'DONE', None)[0]

def test_fail_items_and_tasks_without_a_stop_item():
    fail = [{"type": "stop", "value": "FAIL"}]
    assert [run_checks(fail, None, s, None)[0] for s in T.STOPS] == [s == 'FAIL' for s in T.STOPS]
    state = [{"type": "info", "check": ["<", ["abs", ["$", "entity", "Callisto", "distance"]], 15000]}]
    assert all(run_checks(state, CEL, s, None)[0] for s in (*T.STOPS, None))          # the stop type is ignored
    assert not run_checks(state, {"entity": {"Callisto": {"distance": 2e4}}}, 'DONE', None)[0]

def test_failing_items_each_give_a_reason():
    items = [{"type": "stop", "value": "DONE"},
             {"type": "info", "check": ["==", ["$", "time", "pause"], True]},
             {"type": "info", "check": ["$", "entity", "Io", "distance"]},
             {"type": "info", "check": ["frobnicate", 1]},
             {"type": "info", "key": "lambda dump: dump['time']", "value": 1},
             {"type": "info", "check": ["==", ["$", "time", "scale"], 1]}]
    ok, why = run_checks(items, CEL, 'DONE', None)
    assert not ok and [w.split(':')[0] for w in why] == ['item 2 (info)', 'item 3 (info)', 'item 4 (info)', 'item 5 (info)']
    assert "no key 'Io'" in why[0] and "unknown operator 'frobnicate'" in why[1] and "no 'check'" in why[2] and "is False" in why[3]
    assert run_checks(items[1:2], None, 'DONE', None)[1] == ["item 0 (info): no state dump could be read"]

# ------------------------------------------------------------------ load-time validation names the file and the field
@pytest.mark.parametrize('items,msg', [
    ([{"key": "p", "value": "1+-i"}], "evaluate[0]: no 'type' field"),
    ([{"type": "stop", "value": "DONE"}, {"type": "var", "check": ["==", ["$", "vars", "p"], ["lenn", 1]]}], "evaluate[1].check[2]: unknown operator 'lenn'"),
    ([{"type": "info", "check": ["not", 1, 2]}], "evaluate[0].check: 'not' takes 1 argument, got 2"),
    ([{"type": "stop", "value": "DONE!"}], "evaluate[0]: 'value' of a stop item"),
    ([{"type": "stop", "value": "ANS", "args": "4"}], "evaluate[0]: an ANS stop item needs 'args'"),
    (["oops"], "evaluate[0]: an evaluate item is an object"),
])
def test_malformed_items_fail_at_load(tmp_path, items, msg):
    f = tmp_path/'B-07.json'
    f.write_text(json.dumps({"type": "KAlgebra", "instruction": "Plot it.", "evaluate": items}))
    with pytest.raises(TaskError) as e: load_task(f)
    assert str(e.value).startswith(str(f)) and msg in str(e.value)

def test_a_task_in_the_language_loads_and_scores(tmp_path):
    f = tmp_path/'A-01.json'
    f.write_text(json.dumps({"type": "KAlgebra", "instruction": "Store conj(1+i) in p.", "steps": 5,
                             "evaluate": [{"type": "var", "check": ["==", ["$", "vars", "p"], "1+-i"]}]}))
    t = load_task(f)
    assert t.score(KAL, 'DONE') == (True, []) and not t.score({"vars": {}}, 'DONE')[0]

# ------------------------------------------------------------------ hostile task files: a TaskError naming the file and the field
HEAD = b'{"type": "KAlgebra", "instruction": "Plot it.", '
HOSTILE = {   # the file's bytes -> what the message says after the file name (each was a bare exception, or loaded, before)
    'steps inf': (HEAD + b'"steps": 1e999}', 'steps: 1e999 is not a whole number between 1 and 1000'),          # was OverflowError
    'steps 5000 digits': (HEAD + b'"steps": ' + b'7' * 5000 + b'}', 'steps: 77777777777777777777… (5,000 characters) is not a whole number'),  # ValueError
    'steps NaN': (HEAD + b'"steps": NaN}', 'steps: NaN is not a whole number between 1 and 1000'),
    'steps string': (HEAD + b'"steps": "15"}', "steps: '15' is not a whole number between 1 and 1000"),
    'steps true': (HEAD + b'"steps": true}', 'steps: True is not a whole number'),
    'steps fraction': (HEAD + b'"steps": 2.5}', 'steps: 2.5 is not a whole number'),
    'infinity in extra': (HEAD + b'"version": -Infinity}', 'version: -Infinity is not a finite number of at most 1,000 digits'),
    'huge int in a check': (HEAD + b'"evaluate": [{"type": "info", "check": ["==", ["$", "n"], ' + b'1' * 2000 + b']}]}',
                            'evaluate[0].check[2]: 11111111111111111111… (2,000 characters) is not a finite number'),
    'deep nesting': (HEAD + b'"x": ' + b'[' * 5000 + b']' * 5000 + b'}', 'not valid JSON (nested deeper than 100)'),   # RecursionError in json
    'deep but parsable': (HEAD + b'"x": {"y": ' + b'[' * 500 + b']' * 500 + b'}}', 'x.y' + '[0]' * 98 + ': nested deeper than 100'),
    'latin-1 bytes': (b'{"type": "KAlgebra", "instruction": "Gr\xf6\xdfe"}', 'not UTF-8 text (byte 0xf6 at offset 39)'),
    'surrogate bytes': (HEAD + b'"ans": "\xed\xa0\x80"}', 'not UTF-8 text (byte 0xed at offset'),
    'empty file': (b'', 'not valid JSON (Expecting value: line 1 column 1 (char 0))'),
    'top-level list': (b'[{"type": "KAlgebra"}]', 'a task is a JSON object, not a list'),
    'top-level number': (b'1e999', 'a task is a JSON object, not a number'),
    'top-level null': (b'null', 'a task is a JSON object, not null'),
    'id a number': (HEAD + b'"id": 12}', 'id: must be a string of at most 200 characters, not 12'),
    'id too long': (HEAD + b'"id": "' + b'A' * 5000 + b'"}', "id: must be a string of at most 200 characters, not 'AAAA"),
    'type a list': (b'{"type": ["KAlgebra"], "instruction": "x"}', "type: the app must be a string of at most 200 characters, not ['KAlgebra']"),
    'app an object': (b'{"app": {"n": 1}, "instruction": "x"}', "app: the app must be a string of at most 200 characters, not {'n': 1}"),
    'instruction a number': (b'{"type": "KAlgebra", "instruction": 5}', 'instruction: must be a non-empty string, not 5'),
    'instruction blank': (b'{"type": "KAlgebra", "instruction": "  "}', "instruction: must be a non-empty string, not '  '"),
    'sort a list': (HEAD + b'"sort": []}', 'sort: must be a string, not []'),
    'split a number': (HEAD + b'"split": 1}', 'split: must be a string, not 1'),
    'ans a list': (HEAD + b'"ans": ["4"]}', "ans: must be a string, not ['4']"),
    'initialize an object': (HEAD + b'"initialize": {}}', 'initialize: must be a list, not an object'),
    'initialize item a string': (HEAD + b'"initialize": ["open"]}', 'initialize[0]: a set-up item is an object, not a string'),
    'evaluate null': (HEAD + b'"evaluate": null}', 'evaluate: must be a list, not null'),
    'evaluate item a number': (HEAD + b'"evaluate": [3]}', 'evaluate[0]: an evaluate item is an object, not a number'),
    'bad regex': (HEAD + b'"evaluate": [{"type": "var", "check": ["matches", "a", "("]}]}',                 # loaded, failed only at scoring
                  "evaluate[0].check[2]: 'matches' cannot use pattern '(': missing ): ( (RE2 syntax"),
    'backreference': (HEAD + b'"evaluate": [{"type": "var", "check": ["matches", ["$", "log"], "(a)\\\\1"]}]}', 'evaluate[0].check[2]: '),
    'regex too long': (HEAD + b'"evaluate": [{"type": "var", "check": ["matches", ["$", "log"], "' + b'a' * 201 + b'"]}]}',
                       "evaluate[0].check[2]: 'matches' pattern longer than 200 characters"),
    'literal of the wrong kind': (HEAD + b'"evaluate": [{"type": "var", "check": ["len", 5]}]}', "evaluate[0].check[1]: 'len' takes a list"),
    'division by a literal 0': (HEAD + b'"evaluate": [{"type": "var", "check": ["<", ["/", ["$", "n"], 0], 1]}]}',
                                "evaluate[0].check[1][2]: '/' takes a number other than 0 here")}

@pytest.mark.parametrize('name', HOSTILE)
def test_a_hostile_task_file_is_a_task_error_naming_the_file_and_field(tmp_path, name):
    raw, want = HOSTILE[name]
    f = tmp_path/'x.json'
    f.write_bytes(raw)
    with pytest.raises(TaskError) as e: load_task(f)
    msg = str(e.value)
    assert msg.startswith(f'{f}: ') and want in msg and '\n' not in msg, msg
    with pytest.raises(TaskError) as e: load_tasks(tmp_path)          # through a folder: the same error
    assert str(e.value) == msg

def test_lone_surrogates_and_a_bom_load():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, 'A-01.json')
        with open(f, 'wb') as w: w.write(b'\xef\xbb\xbf' + HEAD + b'"ans": "\\ud800 \\ud83d\\ude00", "x": {"\\udc00": 1}}')
        t = load_task(f)
        assert (t.ans, t.extra) == ('\ufffd \U0001F600', {'x': {'\ufffd': 1}}) and t.id == 'A-01'
        json.dumps(t.to_dict(), ensure_ascii=False).encode('utf-8')   # storable

def test_special_files_are_refused_without_blocking(tmp_path):
    import threading
    fifo = tmp_path/'fifo.json'
    os.mkfifo(fifo)              # opening a FIFO to read blocks until a writer comes: for ever
    got = []
    def load():
        try: load_tasks(tmp_path)
        except Exception as e: got.append(e)
    th = threading.Thread(target=load, daemon=True)
    th.start()
    th.join(30)                  # a loader that blocks fails here instead of hanging the suite
    if th.is_alive(): os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))   # let it go
    th.join(5)
    assert len(got) == 1 and isinstance(got[0], TaskError) and str(got[0]) == f'{fifo}: not a regular file', got
    fifo.unlink()
    (tmp_path/'dir.json').mkdir()
    with pytest.raises(TaskError, match='dir.json: not a regular file'): load_tasks(tmp_path)
    with pytest.raises(TaskError, match='/dev/zero: not a regular file'): load_task('/dev/zero')
    with pytest.raises(TaskError, match='no such task file'): load_task(tmp_path/'missing.json')
    with pytest.raises(TaskError, match='cannot be read'): load_task('x\0.json')

def test_an_oversized_task_file_is_refused_after_reading_its_limit(tmp_path):
    f = tmp_path/'big.json'
    f.write_bytes(HEAD + b'"pad": "' + b'x' * T.MAX_FILE + b'"}')
    with pytest.raises(TaskError, match=f'big.json: more than {T.MAX_FILE:,} bytes'): load_task(f)

def test_jsonl_errors_name_the_line(tmp_path):
    good = json.dumps({'type': 'KAlgebra', 'id': 'A-01', 'instruction': 'x'})
    f = tmp_path/'set.jsonl'
    for line, want in [('{"type": "KAlgebra", "id": "A-02", "instruction": "y", "steps": 1e999}', 'set.jsonl:3: steps: 1e999 is not a whole'),
                       ('{"type": "KAlgebra", "id": "A-02", "instruction": "y"', 'set.jsonl:3: not valid JSON'),
                       ('[1]', 'set.jsonl:3: a task is a JSON object, not a list'),
                       ('{"type": "KAlgebra", "instruction": "y"}', 'set.jsonl:3: no task id')]:
        f.write_text(f'{good}\n\n{line}\n')
        with pytest.raises(TaskError) as e: load_tasks(f)
        assert str(e.value).startswith(f'{tmp_path}/{want}'), str(e.value)
    f.write_bytes(good.encode() + b'\n{"type": "KAlgebra", "id": "A-02", "instruction": "\xff"}\n')
    with pytest.raises(TaskError, match=r'set.jsonl:2: not UTF-8 text \(byte 0xff at offset 51\)'): load_tasks(f)
    f.write_text(good + '\n' + good.replace('"x"', '"x\u2028y"') .replace('A-01', 'A-02') + '\r\n')  # U+2028 inside a string: one line
    assert [t.instruction for t in load_tasks(f)] == ['x', 'x\u2028y']

@pytest.mark.parametrize('name', ['steps inf', 'steps 5000 digits', 'deep nesting', 'latin-1 bytes', 'top-level list', 'bad regex'])
def test_coda_eval_says_which_file_in_one_line_and_exits_2(tmp_path, name, capsys):
    "Was rc 1 (OverflowError) or 2 with a bare ValueError naming no file; now a TaskError: one line, the file, exit status 2"
    from coda.cli import main
    f = tmp_path/'bad.json'
    f.write_bytes(HOSTILE[name][0])
    with pytest.raises(SystemExit) as e: main(['eval', '--tasks', str(f), '--env', 'scidesk'])
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(f'coda eval: error: TaskError: {f}: ') and HOSTILE[name][1] in err[0], err

# ------------------------------------------------------------------ ScienceBoard's own items
@needs_sb
def test_per_app_translation_table():
    rep = scienceboard_report(SB)
    assert rep.to_dict('index') == {
        'KAlgebra': {'tasks': 27, 'loaded': 27, 'evaluate items': 28, 'items translated': 28, 'tasks fully translated': 27, 'tasks natively runnable': 7},
        'ChimeraX': {'tasks': 29, 'loaded': 29, 'evaluate items': 46, 'items translated': 45, 'tasks fully translated': 28, 'tasks natively runnable': 0},
        'GrassGIS': {'tasks': 34, 'loaded': 34, 'evaluate items': 43, 'items translated': 43, 'tasks fully translated': 34, 'tasks natively runnable': 0},
        'Celestia': {'tasks': 33, 'loaded': 33, 'evaluate items': 62, 'items translated': 61, 'tasks fully translated': 32, 'tasks natively runnable': 0},
        'total': {'tasks': 123, 'loaded': 123, 'evaluate items': 179, 'items translated': 177, 'tasks fully translated': 121, 'tasks natively runnable': 7}}
    per = scienceboard_tasks(SB)
    assert sorted(per[~per.full].id + '@' + per[~per.full].app) == ['B-12@Celestia', 'D-03@ChimeraX']
    assert sorted(per[per.native].id) == ['A-01', 'A-04', 'C-01', 'C-02', 'C-05', 'D-02', 'D-03']

@needs_sb
def test_every_translated_item_is_valid_and_keeps_its_source():
    n = 0
    for t in load_tasks(SB, apps=CODA_APPS):
        for it in t.evaluate:
            new, why = translate_item(it, t.app)
            if new is None: continue
            n += 1
            if it['type'] != 'stop':
                validate(new['check'])
                assert new['sb'] == it and new['type'] == it['type']
    assert n == 177

@needs_sb
def test_kalgebra_point_keys_are_nlohmanns_format():
    for t in load_tasks(SB, apps=['KAlgebra']):
        for it in t.evaluate:
            if it['type'] == 'eqn' and it['key'] != '#SIZE':
                assert {point_key(p) for p in it['key']} == {k for k in it['value'] if k.startswith('(')}

def sbtask(app, tid):
    t, why = translate_task(load_task(SB/app/f'{tid}.json'))
    assert why == []
    return t

def test_a_task_without_checks_is_never_a_pass():
    "An empty evaluate list used to pass vacuously (generated tasks scored 1.0); now it fails with a reason, and envs report it unscored"
    assert run_checks([], {}, 'DONE', None) == (False, [T.NO_CHECKS])
    assert run_checks([], None, 'ANS', '42')[0] is False
    assert Task('G-1', 'Algebra', 'Plot sin(x).', evaluate=[]).score({'vars': {}}, 'DONE') == (False, [T.NO_CHECKS])

def score(t, dump, stop='DONE', answer=None): return run_checks(t.evaluate, dump, stop, answer)[0]

# Each case: a dump, and the truth value of ScienceBoard's lambda on it, worked out by hand in the comment.
@needs_sb
def test_grassgis_checks_agree_with_the_lambdas():
    # B-01: key = layers named countries@PERMANENT; pred: 0.48 < key[0]['opacity'] < 0.52
    b01 = sbtask('GrassGIS', 'B-01')
    layers = lambda op: {"layers": [{"name": "roadsmajor@PERMANENT", "opacity": 1.0}, {"name": "countries@PERMANENT", "opacity": op}]}
    assert [score(b01, layers(op)) for op in (0.5, 0.52, 0.479, 0.51)] == [True, False, False, True]
    assert not score(b01, {"layers": [{"name": "roadsmajor@PERMANENT", "opacity": 0.5}]})   # key[0] -> IndexError -> False
    # abs(easting % 360 - 25) < 0.1 (Python's %: -335 % 360 == 25) and abs(northing - 20) < 0.1
    a07 = sbtask('GrassGIS', 'A-07')
    region = lambda e, n: {"region": {"center_easting": e, "center_northing": n}}
    assert [score(a07, region(*r)) for r in ((385, 20), (-335, 20.05), (25.2, 20), (25, 19.8))] == [True, True, False, False]
    # B-03: 'cat' and 'topo' both substrings of the display param of boundary_region
    b03 = sbtask('GrassGIS', 'B-03')
    disp = lambda v: {"windows": [{"name": "boundary_region@PERMANENT", "_data": [None, {"params": [{"name": "display", "value": v}]}]}]}
    assert [score(b03, disp(v)) for v in ("shape,cat,topo", "shape,cat", "topo,category")] == [True, False, True]
    # 'vdigit' in toolbars keys, and the edited layer is countries@PERMANENT
    a04 = sbtask('GrassGIS', 'A-04')
    tb = lambda keys, name: {"toolbars": {"keys": keys, "layer": {"name": name}}}
    cases = ((["map", "vdigit"], "countries@PERMANENT"), (["map"], "countries@PERMANENT"), (["vdigit"], "roads@PERMANENT"))
    assert [score(a04, tb(*c)) for c in cases] == [True, False, False]
    # D-01 (db): any column with name COLOR and sql_type CHARACTER in `v.db.select ... format=json`
    d01 = sbtask('GrassGIS', 'D-01')
    k = gcmd_key("v.db.select", {"map": "boundary_region@PERMANENT", "format": "json"})
    cols = lambda *c: {"gcmd": {k: {"info": {"columns": [{"name": n, "sql_type": s} for n, s in c]}, "records": []}}}
    assert [score(d01, cols(("cat", "INTEGER"), ("COLOR", "CHARACTER"))), score(d01, cols(("COLOR", "INTEGER"))), score(d01, cols())] == [True, False, False]
    # D-04 (db, plain text stdout): out.strip() == 'cat|x|y|z\n257|-79.1050308691105|8.348947891274|0'
    d04 = sbtask('GrassGIS', 'D-04')
    k = gcmd_key("v.to.db", {"flags": "p", "map": "countries@PERMANENT", "type": "point", "option": "coor"})
    assert score(d04, {"gcmd": {k: "cat|x|y|z\n257|-79.1050308691105|8.348947891274|0\n"}})
    assert not score(d04, {"gcmd": {k: "cat|x|y|z\n"}})

@needs_sb
def test_celestia_checks_agree_with_the_lambdas():
    # B-08: Jupiter visible == True and abs(Callisto distance - 0) < 15000
    b08 = sbtask('Celestia', 'B-08')
    ent = lambda vis, d: {"entity": {"Jupiter": {"visible": vis}, "Callisto": {"distance": d}}}
    assert [score(b08, ent(*c)) for c in ((True, 14999.9), (True, 15000), (False, 10), (True, -14000))] == [True, False, False, True]
    # abs(julian date - 2400000) < 0.1
    a01 = sbtask('Celestia', 'A-01')
    assert [score(a01, {"time": {"value": v}}) for v in (2400000.09, 2399999.95, 2400000.2)] == [True, True, False]
    # C-06 (ANS): args ['TYC', '2082-2143-1']
    c06 = sbtask('Celestia', 'C-06')
    assert score(c06, None, 'ANS', 'TYC 2082-2143-1') and not score(c06, None, 'ANS', 'TYC2082-2143-1') and not score(c06, None, 'DONE')

@needs_sb
def test_chimerax_checks_agree_with_the_lambdas():
    # B-06: find the first key ending 'drawing._name' whose value is 'scalebar'; its key minus two parts + scalebar_width == 10.0
    b06 = sbtask('ChimeraX', 'B-06')
    st_ = lambda w, h: {"states": {"x.(3,).label_drawing._name": "label", "x.(3,).bar.drawing._name": "scalebar",
                                   "x.(3,).bar.scalebar_width": w, "x.(3,).bar.scalebar_height": h}}
    assert [score(b06, st_(10.0, 4.0)), score(b06, st_(10.0, 5.0)), score(b06, {"states": {}})] == [True, False, False]
    # no state key starts with ...(1,)._nucleotide_info / _nucleotide_changes / _ring_drawing.name
    a10 = sbtask('ChimeraX', 'A-10')
    assert score(a10, {"states": {"_state_containers.models._models.(1,)._name": "x"}})
    assert not score(a10, {"states": {"_state_containers.models._models.(1,)._nucleotide_info.x": 1}})
    # B-07: the first key ending 'page_source' has a value matching 'termini: <br>61 hydrogens added'
    b07 = sbtask('ChimeraX', 'B-07')
    assert score(b07, CHX) and not score(b07, {"states": {"log.page_source": "termini: <br>60 hydrogens added"}})
    # exact xyz_min string, and the set of `info rescolor /A` lines (order and duplicates ignored)
    a04 = sbtask('ChimeraX', 'A-04')
    lines = [f"#1/A:{i} color #7b68ee" for i in range(1, 10)]
    dump = {"states": {"_state_containers.models._models.(1,)._redraw_needed.cached_drawing_bounds.xyz_min": "[ -1.37   -6.882 -12.582]"},
            "info": {"rescolor /A": lines[::-1] + lines[:2]}}
    assert score(a04, dump) and not score(a04, {**dump, "info": {"rescolor /A": lines[:-1]}})

@needs_sb
def test_kalgebra_checks_agree_with_scienceboards_evaluator():
    a01, b02, c01, b03 = (sbtask('KAlgebra', i) for i in ('A-01', 'B-02', 'C-01', 'B-03'))
    assert score(a01, {"vars": {"p": "1+-i"}}) and not score(a01, {"vars": {"p": "1-i"}}) and not score(a01, {"vars": {}})
    assert score(b02, {"vars": {"p": "3"}}) and not score(b02, {"vars": {"euler": "2.718"}})          # #UNDEF: absent
    assert [score(c01, {"vars": {"p": v}}) for v in ("1.584962500721", "1.58496", "log(3)")] == [True, False, False]
    assert score(b03, {"plots": []}) and not score(b03, {"plots": [{}]})                               # #SIZE == 0
    # C-08 has two eqn items: x->x^2-ln(x)-1 and its tangent x->x-1 must both be plotted. Each plot lists the
    # membership of every sample point of both items (computed like Analitza), as the fork's /func/2d answers.
    c08 = load_task(SB/'KAlgebra'/'C-08.json')
    t, _ = translate_task(c08)
    pts = [p for it in c08.evaluate for p in it['key']]
    curve = lambda f, e: {"expr": e, "color": "#000000", "res": 1, "points": membership(f, pts)}
    f, tangent = curve(lambda x: x * x - math.log(x) - 1 if x > 0 else None, "x->x^2-ln(x)-1"), curve(lambda x: x - 1, "x->x-1")
    assert score(t, {"plots": [f, tangent]}) and score(t, {"plots": [tangent, f]})
    assert not score(t, {"plots": [f]}) and not score(t, {"plots": [tangent]}) and not score(t, {"plots": []})
    # B-06 (3D, with the style): the one 3D plot must match all points and style 2
    b06 = load_task(SB/'KAlgebra'/'B-06.json')
    t, _ = translate_task(b06)
    good = {"expr": "(x, y)->x*y", "points": {k: v for k, v in b06.evaluate[0]['value'].items() if k.startswith('(')}, "style": 2}
    assert score(t, {"plots3d": [good]}) and not score(t, {"plots3d": [{**good, "style": 1}]})

# ------------------------------------------------------------------ lambdas vs their meaning, on random inputs
@FAST
@given(st.floats(-1e9, 1e9), st.floats(-1e9, 1e9), st.sampled_from([0.1, 0.001, 15000.0]))
def test_tolerance_pred_matches_python_semantics(k, v, tol):
    e = translate_lambda(f"lambda key, value: abs(key - value) < {tol!r}", (["$", "k"], v))
    assert check(e, {"k": k}) == (abs(k - v) < tol)

@FAST
@given(st.floats(-1e4, 1e4, allow_nan=False), st.floats(0, 360))
def test_modulo_pred_matches_python_semantics(k, v):
    e = translate_lambda("lambda key, value: abs((key % 360) - value) < 0.1", (["$", "k"], v))
    assert check(e, {"k": k}) == (abs((k % 360) - v) < 0.1)

@FAST
@given(st.lists(st.fixed_dictionaries({"name": st.sampled_from(["a", "b", "c"]), "v": st.integers(0, 3)}), max_size=5))
def test_comprehension_preds_match_python_semantics(items):
    e = translate_lambda("lambda key, value: any([item['name'] == value for item in key])", (["$", "l"], "b"))
    assert check(e, {"l": items}) == any(i['name'] == 'b' for i in items)
    e = translate_lambda("lambda dump: [i['v'] for i in dump['l'] if i['name'] != 'a' and i['v'] > 1]", (["$"],))
    assert check(e, {"l": items}) == [i['v'] for i in items if i['name'] != 'a' and i['v'] > 1]
    e = translate_lambda("lambda d: len([x for x in d['l'] if any(y['v'] == x['v'] for y in d['l'] if y['name'] != x['name'])])", (["$"],))
    assert check(e, {"l": items}) == len([x for x in items if any(y['v'] == x['v'] for y in items if y['name'] != x['name'])])

# ------------------------------------------------------------------ injection attempts: rejected, nothing runs
def payloads(canary):
    return [
        f"lambda dump: __import__('os').system('touch {canary}')",
        f"lambda dump: open('{canary}', 'w').write('pwned')",
        "lambda dump: open('/etc/passwd').read()",
        "lambda dump: ().__class__.__bases__[0].__subclasses__()",
        "lambda dump: dump.__class__.__init__.__globals__",
        "lambda dump: [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]('id')",
        f"lambda dump: [__import__('os').system('touch {canary}') for _ in dump]",
        f"lambda dump: [print(open('{canary}', 'w')) for x in dump]",
        "lambda dump: [dump.pop(k) for k in list(dump)]",
        "lambda dump: [dump.setdefault('x', 1) for _ in [0]]",
        f"lambda dump: (f := open('{canary}', 'w'))",
        "lambda dump: (x := 1)",
        "lambda dump: eval(dump['code'])",
        "lambda dump: exec('import os')",
        "lambda dump: getattr(dump, 'clear')()",
        "lambda dump: vars()",
        "lambda dump: globals()['__builtins__']",
        "lambda dump: breakpoint()",
        "lambda dump: (lambda: 1)()",
        "lambda dump: f'{dump!r}'",
        "lambda dump: 'x' * 10 ** 10",
        "lambda dump: [x for x in iter(int, 1)]",
        "lambda dump: dump['a'].format(**dump)",
        "lambda dump: {k: v for k, v in dump.items()}",
        f"__import__('os').system('touch {canary}')",
        f"import os; os.system('touch {canary}')",
        "lambda dump: (yield)",
        "lambda dump, *a: a",
        "lambda dump: " + "[" * 300 + "]" * 300]

class Trap(Exception): pass

def test_injection_is_rejected_and_nothing_runs(tmp_path, monkeypatch):
    canary = tmp_path/'pwned'
    def trap(*a, **k): raise Trap(f"evaluator called with {a[:1]!r}")
    for mod, name in ((builtins, 'eval'), (builtins, 'exec'), (os, 'system'), (os, 'popen')): monkeypatch.setattr(mod, name, trap)
    for src in payloads(canary):
        with pytest.raises(Untranslatable): translate_lambda(src, (["$"],))
        for app in ('GrassGIS', 'Celestia'):
            new, why = translate_item({"type": "info", "key": src, "value": 1}, app)
            assert new is None and why.startswith('key:')
            item = {"type": "info", "key": "lambda dump: dump['a']", "value": 1, "pred": src.replace('lambda dump', 'lambda key, value')}
            new, why = translate_item(item, app)
            assert new is None
        new, why = translate_item({"type": "states", "find": src, "key": "lambda key: key", "value": 1}, 'ChimeraX')
        assert new is None
    assert not canary.exists()

def test_the_library_source_runs_no_text():
    "The translator parses with ast.parse (mode='eval' tree only); the module calls no eval/exec/compile"
    import ast, inspect
    tree = ast.parse(inspect.getsource(T))
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not called & {'eval', 'exec', 'compile', '__import__', 'getattr', 'setattr'}

def test_untranslatable_reasons():
    with pytest.raises(Untranslatable, match="walrus"): translate_lambda("lambda dump: (s := dump['a'], s)[-1]", (["$"],))
    with pytest.raises(Untranslatable, match="lambda takes 2 arguments"): translate_lambda("lambda key, value: key", (["$"],))
    with pytest.raises(Untranslatable, match="several 'for'"): translate_lambda("lambda d: [a for a in d for b in d]", (["$"],))
    assert translate_item({"type": "info", "key": "x", "value": 1}, 'Lean') == (None, "no translation for Lean items")
    assert translate_item({"type": "eqn", "value": 1}, 'KAlgebra')[1].startswith("malformed 'eqn' item (KeyError")

# ------------------------------------------------------------------ what runs natively
def test_native_support_reasons():
    kal = lambda *types: Task('X', 'KAlgebra', 'i', evaluate=[{"type": t, "value": "FAIL" if t == 'stop' else 0, "key": "p"} for t in types])
    assert native_support(kal("var", "val")) == (True, "Debian's kalgebra 22.12 under Xvfb, variables read through Export Log (coda.envs.kalgebra)")
    assert native_support(kal('stop'))[0] and not native_support(kal('val', 'eqn'))[0]
    assert "Analitza" in native_support(kal('eqn'))[1]
    assert "not packaged in Debian" in native_support(Task('X', 'Celestia', 'i'))[1]
    assert "not in Debian" in native_support(Task('X', 'ChimeraX', 'i'))[1]
    g = Task('X', 'GrassGIS', 'i', initialize=[{"func": "map", "location": "grassdata_piemonte_utm32n_wgs84_grass7"}])
    assert native_support(g) == (False, "needs ScienceBoard's GRASS locations (grassdata_piemonte_utm32n_wgs84_grass7): the Natural Earth / "
                                        "Piemonte data are not reachable from here (only PyPI, Debian and npm are)")
