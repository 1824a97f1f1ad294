"""Task-file `initialize` items on the real desktops are a closed, typed list: every item is checked before anything
runs, and a refusal names the task file, the item and the field. The GRASS `run` operation runs only real GRASS
modules, never a shell; KAlgebra's `touch` writes only inside the desktop's HOME. No desktop is started here."""
import os, json
from pathlib import Path
import pytest
from coda.tasks import Task, load_tasks
from coda.paths import ROOT

def task(app, *items, source='data/x.json'): return Task('X-1', app, 'Do it.', initialize=list(items), source=source)

def refusal(app_cls, *items):
    "The message validate_initialize refuses these items with"
    from coda.envs.desktop import validate_initialize, InitializeError
    with pytest.raises(InitializeError) as e: validate_initialize(task(app_cls.name, *items), app_cls)
    return str(e.value)

@pytest.fixture
def kalgebra():
    from coda.envs.kalgebra import KAlgebraApp
    return KAlgebraApp

@pytest.fixture
def grass():
    from needs import need_programs
    need_programs('grass')
    from coda.envs.grass import GrassApp
    return GrassApp

def test_the_vendored_tasks_pass(kalgebra):
    from coda.envs.desktop import validate_initialize
    for t in load_tasks(ROOT/'data'/'desktop'/'KAlgebra'): validate_initialize(t, kalgebra)

def test_vendored_grass_tasks_pass(grass):
    from coda.envs.desktop import validate_initialize
    for t in load_tasks(ROOT/'data'/'desktop'/'GrassGIS'): validate_initialize(t, grass)

def test_grass_reproducer_is_refused_naming_file_item_and_field(grass, tmp_path):
    msg = refusal(grass, {'func': 'layer', 'query': {'name': 'sites'}},
                  {'func': 'run', 'module': 'script', 'flags': 'c', 'x': f'1; id > {tmp_path}/pwned'})
    assert msg.startswith("data/x.json: initialize[1].module: 'script' is not a GRASS module a task may run"), msg
    assert not (tmp_path/'pwned').exists()

@pytest.mark.parametrize('item, where, why', [
    ({'module': 'g.extension', 'extension': 'r.x'}, 'module', 'is not a GRASS module a task may run'),
    ({'module': 'g.gui', 'ui': 'wxpython'}, 'module', 'is not a GRASS module a task may run'),
    ({'module': '/bin/sh'}, 'module', 'is not a GRASS module a task may run'),
    ({'module': 'db.execute', 'sql': "VACUUM INTO '/tmp/coda-pwned.db'"}, 'module', 'is not a GRASS module a task may run'),
    ({'module': 'r.external.out', 'directory': '/tmp', 'format': 'GTiff'}, 'module', 'is not a GRASS module a task may run'),
    ({'module': 'r.mapcalc', 'expression': 'x = 1'}, 'module', 'is not a GRASS module a task may run'),
    ({'module': 'v.db.select', 'map': 'sites', 'flags': 'p; id'}, 'flags', 'flag letters'),
    ({'module': 'v.db.select', 'map': 'sites', 'flags': 'p'}, 'flags', "takes the flags 'rcef' from a task, not 'p'"),
    ({'module': 'v.db.select', 'map': 'sites', 'executable': '/bin/sh'}, 'executable', 'not an option name'),
    ({'module': 'v.db.select', 'map': 'sites', 'env': {'PATH': '/tmp'}}, 'env', 'not an option name'),
    ({'module': 'v.db.select', 'map': 'sites', 'Res': '10'}, 'Res', 'not an option name'),
    ({'module': 'v.db.select', 'map': 'sites', 'file': '/tmp/x.txt'}, 'file', "not 'file'"),
    ({'module': 'v.db.select', 'map': ['sites']}, 'map', 'must be str or int or float'),
    ({'module': 'v.db.select', 'map': True}, 'map', 'must be str or int or float'),
    ({'module': 'v.db.select', 'map': 'sites', 'where': "cat = 1; ATTACH DATABASE '/root/x.db' AS x"}, 'where', "cannot be part of a WHERE"),
    ({'module': 'v.db.select', 'map': 'sites', 'where': "cat IN (SELECT 1)"}, 'where', "'SELECT' is not allowed"),
    ({'module': 'v.db.select', 'map': 'sites', 'where': "writefile('/tmp/x', 'y')"}, 'where', "'writefile' is not allowed"),
    ({'module': 'v.db.select', 'map': 'sites; id'}, 'map', 'is not a map name'),
    ({'module': 'v.db.addcolumn', 'map': 'sites', 'columns': 'x int); DROP TABLE sites; --'}, 'columns', "is not 'name type'"),
    ({'module': 'v.info', 'map': 'sites', 'layer': float('nan')}, 'layer', 'a finite number'),
])
def test_grass_run_items_are_typed_and_closed(grass, item, where, why):
    msg = refusal(grass, {'func': 'run', **item})
    assert f'initialize[0].{where}: ' in msg and why in msg, msg

def test_grass_layer_and_unknown_operations(grass):
    assert 'initialize[0].query: ' in refusal(grass, {'func': 'layer', 'query': {'name': '../x'}})
    assert 'initialize[0].wait: ' in refusal(grass, {'func': 'layer', 'query': {'name': 'sites'}, 'wait': 1e9})
    assert "initialize[0].func: 'shell' is not an initialize operation of GrassGIS" in refusal(grass, {'func': 'shell'})

def test_grass_modules_are_the_installed_ones(grass):
    from coda.envs.grass import grass_modules, gisbase
    mods = grass_modules()
    assert {'g.region', 'r.mapcalc', 'v.db.addcolumn', 'v.db.select'} <= mods and 'script' not in mods
    assert all((gisbase()/'bin'/m).exists() or (gisbase()/'scripts'/m).exists() for m in mods)

def test_run_module_refuses_files_outside_and_options_the_module_lacks(grass, tmp_path, monkeypatch):
    "The second wall, inside the GRASS session: were the allowlist widened to a module with an output file, that file must lie under files_under"
    import coda.envs.grass as g
    from coda.envs.desktop import InitializeError
    loc = g.copy_location(tmp_path/'db')
    home = tmp_path/'home'; home.mkdir(); (home/'out').symlink_to(tmp_path)
    with pytest.raises(InitializeError, match='not a GRASS module a task may run'):
        g.run_module(loc/'PERMANENT', 'r.out.ascii', files_under=home, input='elevation', output='elev.asc')
    monkeypatch.setitem(g.GRASS_MODULES, 'r.out.ascii', ('h', {'input': g._map_name, 'output': str}))
    for out in (str(tmp_path/'elev.asc'), '../elev.asc', 'out/elev.asc', 'PG:dbname=x', 'a.asc,/tmp/b.asc'):
        with pytest.raises(InitializeError, match='not a file inside'):
            g.run_module(loc/'PERMANENT', 'r.out.ascii', files_under=home, input='elevation', output=out)
    assert not (tmp_path/'elev.asc').exists()
    monkeypatch.setitem(g.GRASS_MODULES, 'v.info', ('', {'map': g._map_name, 'nosuch': str}))
    with pytest.raises(InitializeError, match='has no option'): g.run_module(loc/'PERMANENT', 'v.info', map='sites', nosuch='1')
    with pytest.raises(InitializeError, match='not a GRASS module'): g.run_module(loc/'PERMANENT', 'script', flags='c', x='1; id')
    g.run_module(loc/'PERMANENT', 'r.out.ascii', files_under=home, input='elevation', output='elev.asc', flags='h')
    assert (home/'elev.asc').stat().st_size > 1000

@pytest.mark.parametrize('path', ['/etc/cron.d/x', '~/../../x', '/home/user/../../x', 'a/../../x', '~root/x', '/home/user/', ''])
def test_kalgebra_touch_outside_home_is_refused(kalgebra, path):
    msg = refusal(kalgebra, {'func': 'touch', 'text': 'x := 1', 'path': path})
    assert msg.startswith('data/x.json: initialize[0].path: '), msg

@pytest.mark.parametrize('item, where', [
    ({'func': 'touch', 'text': 'x' * 100_001, 'path': 'a.kal'}, 'text'),
    ({'func': 'touch', 'text': 7, 'path': 'a.kal'}, 'text'),
    ({'func': 'touch', 'text': 'x', 'path': 'a.kal', 'mode': 0o777}, 'mode'),
    ({'func': 'touch', 'path': 'a.kal'}, 'text'),
    ({'func': 'tab', 'index': 9}, 'index'),
    ({'func': 'tab', 'index': '1'}, 'index'),
    ({'func': 'func_2d', 'expr': 'x\ny'}, 'expr'),
    ({'func': 'func_2d', 'expr': 'x' * 1001}, 'expr'),
    ({'func': 'launch', 'wait': -1}, 'wait'),
    ({'func': 'func_3d', 'expr': 'x'}, 'func'),
])
def test_kalgebra_items_are_typed_and_bounded(kalgebra, item, where):
    assert f'initialize[0].{where}: ' in refusal(kalgebra, item)

def test_kalgebra_touch_writes_inside_home_and_refuses_links(kalgebra, tmp_path):
    from coda.envs.kalgebra import write_in_home
    from coda.envs.desktop import DesktopError
    home, outside = tmp_path/'home', tmp_path/'outside'
    home.mkdir(); outside.mkdir()
    assert write_in_home(home, '/home/user/sub/s.kal', 'a := 1') == home/'sub'/'s.kal'
    assert (home/'sub'/'s.kal').read_text() == 'a := 1\n'
    (home/'link').symlink_to(outside); (home/'f.kal').symlink_to(outside/'f.kal')
    for p in ('~/link/x.kal', 'link/d/x.kal', 'f.kal'):
        with pytest.raises(DesktopError): write_in_home(home, p, 'x')
    assert list(outside.iterdir()) == []

def test_setup_validates_the_whole_list_before_running_any(kalgebra):
    "A refused second item means the first never ran (setup goes through validate_initialize)"
    from coda.envs.desktop import InitializeError
    ran = []
    class Probe(kalgebra):
        def init_tab(self, index): ran.append(index)
    app = Probe(None)
    with pytest.raises(InitializeError, match=r'initialize\[1\]\.path'):
        app.setup(task('KAlgebra', {'func': 'tab', 'index': 1}, {'func': 'touch', 'text': 'x', 'path': '/root/x'}))
    assert ran == []

def test_initialize_error_is_a_task_error_and_a_desktop_error():
    from coda.envs.desktop import InitializeError, DesktopError
    from coda.tasks import TaskError
    assert issubclass(InitializeError, TaskError) and issubclass(InitializeError, DesktopError)

def test_env_reset_refuses_before_starting_a_desktop(kalgebra, monkeypatch):
    "A refused item costs no desktop: reset raises before Desktop.start"
    from coda.envs import desktop as dm
    from coda.envs.desktop import DesktopEnv, InitializeError
    monkeypatch.setattr(dm.Desktop, 'start', lambda self: pytest.fail('a desktop was started'))
    with pytest.raises(InitializeError, match=r'data/x\.json: initialize\[0\]\.path'):
        DesktopEnv().reset(task('KAlgebra', {'func': 'touch', 'text': 'x', 'path': '/etc/x'}))

class FakeDesktop:
    "Just what set-up items touch: a folder with a HOME (no X, no app)"
    def __init__(self, tmp): self.tmp = tmp; self.home.mkdir(parents=True, exist_ok=True)
    @property
    def home(self): return self.tmp/'home'
    def act(self, actions, **kw): pass
    def settle(self, *a, **kw): pass

def run_setup(app, *items):
    "app.setup on a task with these items: the exception it raised, or None"
    try: app.setup(task(app.name, *items))
    except Exception as e: return e

def test_grass_setup_runs_no_shell(grass, tmp_path):
    "The reproducer through GrassApp.setup: refused before anything runs, and the shell command never ran"
    from coda.envs.grass import copy_location
    app = grass(FakeDesktop(tmp_path/'desk'))
    copy_location(tmp_path/'desk'/'grassdata', app.location)
    pwned = tmp_path/'pwned'
    err = run_setup(app, {'func': 'run', 'module': 'script', 'flags': 'c', 'x': f'1; id > {pwned}'})
    assert not pwned.exists(), 'a task file ran a shell command'
    assert type(err).__name__ == 'InitializeError' and "initialize[0].module: 'script' is not a GRASS module a task may run" in str(err)

@pytest.mark.parametrize('path', ['{out}/x.kal', '~/../x.kal', '/home/user/../x.kal', '../x.kal'])
def test_kalgebra_touch_writes_nothing_outside_home(kalgebra, tmp_path, path):
    "A touch item outside HOME through KAlgebraApp.setup: refused, nothing written outside"
    desk = FakeDesktop(tmp_path/'desk')
    err = run_setup(kalgebra(desk), {'func': 'touch', 'text': 'pwned', 'path': path.format(out=tmp_path)})
    assert not (tmp_path/'x.kal').exists() and not (tmp_path/'desk'/'x.kal').exists(), 'written outside HOME'
    assert type(err).__name__ == 'InitializeError' and 'initialize[0].path' in str(err)

def test_kalgebra_touch_through_a_link_writes_nothing_outside(kalgebra, tmp_path):
    desk = FakeDesktop(tmp_path/'desk'); (tmp_path/'out').mkdir()
    (desk.home/'docs').symlink_to(tmp_path/'out')
    err = run_setup(kalgebra(desk), {'func': 'touch', 'text': 'pwned', 'path': '/home/user/docs/x.kal'})
    assert list((tmp_path/'out').iterdir()) == [] and err is not None and 'symbolic link' in str(err)
    assert run_setup(kalgebra(desk), {'func': 'touch', 'text': 'a := 1', 'path': '/home/user/script.kal'}) is None
    assert (desk.home/'script.kal').read_text() == 'a := 1\n'
