"""Hostile task files in every environment, through `coda eval` as a user runs it: each item that reaches outside the
app is refused (the episode errors, naming the file, the item and the field) or runs confined, and a marker file never
appears on the host. The reproducers of issue 36 are among them: a GRASS `db.execute sql="VACUUM INTO ..."`, GRASS's
`r.external.out` followed by `r.mapcalc`, and ScienceBoard-format `execute`, `launch` and `touch` items for the local VM."""
import json, os, subprocess, sys, uuid
from pathlib import Path
import pytest
from needs import need_programs
from agent_fixtures import ScriptedServer
from fuzz import FuzzCounts, REPORT
from coda.store import RunStore

CODA = [str(Path(sys.executable).parent/'coda')]
pytestmark = pytest.mark.xvfb

def give_up(body): return "Thought: I cannot do this here.\nAction: FAIL"

def markers(tmp_path)->list:
    "Places a hostile file might write: the test's own folder, the host's /tmp and /var/tmp, and root's home"
    u = uuid.uuid4().hex[:8]
    return [tmp_path/'marker', Path('/tmp')/f'coda-marker-{u}', Path('/var/tmp')/f'coda-marker-{u}', Path('/root')/f'coda-marker-{u}']

def write(folder:Path, app:str, items:list, evaluate=None, sort='VM')->Path:
    "One ScienceBoard-format task file per initialize list, named h-<n>.json"
    folder.mkdir(parents=True, exist_ok=True)
    for i, it in enumerate(items):
        (folder/f'h-{i:02d}.json').write_text(json.dumps({'type': app, 'sort': sort, 'steps': 2, 'instruction': 'Do it.',
                                                          'initialize': it, 'evaluate': evaluate or [{'type': 'stop', 'value': 'DONE'}]}))
    return folder

def run_eval(tmp_path, tasks, env, *opts)->tuple:
    "coda eval over the tasks with a planner that gives up: (the process, {task id: record})"
    run = tmp_path/f'run-{env}'
    with ScriptedServer(give_up, models=['planner', 'executor']) as srv:
        p = subprocess.run([*CODA, 'eval', '--tasks', str(tasks), '--env', env, '--run', str(run), '--n', '1', '--workers', '1',
                            '--planner-url', srv.url, '--planner-model', 'planner', '--executor-url', srv.url, '--executor-model', 'executor', *opts],
                           capture_output=True, text=True, timeout=900)
    recs = {e.meta['task']: e.result for e in RunStore(run).episodes()} if (run/'run.json').exists() else {}
    return p, recs

def refused(p, recs, n:int)->list:
    "The reasons the n hostile files were refused for: as errored episodes, or as the whole run refused with exit 2"
    if p.returncode == 2: return [p.stderr]
    assert len(recs) == n and all(r['status'] == 'error' for r in recs.values()), (p.returncode, p.stderr[-2000:], recs)
    return [f"{r.get('reason', '')}: {r.get('error', '')}" for r in recs.values()]

def report(name:str, why:list, marks:list)->FuzzCounts:
    "The attack's counts in the fuzz report: hostile files tried, those not refused naming the item, markers found"
    c = FuzzCounts(name, inputs=len(why), exceptions=sum('initialize[' not in w for w in why), markers=sum(m.exists() for m in marks))
    REPORT.append(c)
    return c

def test_hostile_grass_files_on_the_desktop_leave_no_marker(tmp_path):
    need_programs('Xvfb', 'xdotool', 'openbox', 'grass')
    m = markers(tmp_path)
    items = [[{'func': 'run', 'module': 'db.execute', 'sql': f"VACUUM INTO '{m[1]}'"}],
             [{'func': 'run', 'module': 'r.external.out', 'directory': str(m[1].parent), 'format': 'GTiff'},
              {'func': 'run', 'module': 'r.mapcalc', 'expression': f'{m[1].name} = 1'}],
             [{'func': 'run', 'module': 'v.db.select', 'map': 'sites', 'file': str(m[0])}],
             [{'func': 'run', 'module': 'v.db.select', 'map': 'sites', 'where': f"cat = 1; ATTACH DATABASE '{m[0]}' AS x"}],
             [{'func': 'run', 'module': 'script', 'flags': 'c', 'x': f'1; touch {m[0]}'}],
             [{'func': 'shell', 'command': f'touch {m[0]}'}]]
    p, recs = run_eval(tmp_path, write(tmp_path/'tasks', 'GrassGIS', items, sort='Desktop'), 'desktop')
    report('hostile GRASS task files (coda eval --env desktop)', refused(p, recs, len(items)), m).assert_clean()

def test_hostile_kalgebra_files_on_the_desktop_leave_no_marker(tmp_path):
    need_programs('Xvfb', 'xdotool', 'openbox', 'kalgebra')
    m = markers(tmp_path)
    items = [[{'func': 'touch', 'path': str(m[0]), 'text': 'x'}], [{'func': 'touch', 'path': '/home/user/../../../' + str(m[1]), 'text': 'x'}],
             [{'func': 'execute', 'command': f'touch {m[0]}', 'shell': True}]]
    p, recs = run_eval(tmp_path, write(tmp_path/'tasks', 'KAlgebra', items, sort='Desktop'), 'desktop')
    report('hostile KAlgebra task files (coda eval --env desktop)', refused(p, recs, len(items)), m).assert_clean()

def test_hostile_files_in_the_local_vm_leave_no_marker(tmp_path):
    "ScienceBoard-format items against the local provider (the GUIDE's dry run): refused before the VM runs them"
    need_programs('Xvfb', 'xdotool', 'scrot')
    m = markers(tmp_path)
    items = [[{'func': 'execute', 'command': f'touch {m[0]} {m[1]}', 'shell': True}],
             [{'func': 'launch', 'command': ['sh', '-c', f'touch {m[0]} {m[1]}']}],
             [{'func': 'launch', 'command': f'LD_LIBRARY_PATH=/home/user/6.5.0/gcc_64/lib /app/bin/kalgebra 8000; touch {m[1]}', 'shell': True}],
             [{'func': 'touch', 'path': str(m[1]), 'text': 'x'}], [{'func': 'append', 'path': str(m[2]), 'content': 'x'}],
             [{'func': 'touch', 'path': f'/home/user/../..{m[3]}', 'text': 'x'}],
             [{'func': 'download', 'url': 'http://127.0.0.1:9/x', 'path': str(m[1])}]]
    p, recs = run_eval(tmp_path, write(tmp_path/'tasks', 'KAlgebra', items), 'vm', '--env-opt', 'provider=local', '--env-opt', 'item_pause=0',
                       '--env-opt', 'settle=0.2', '--env-opt', 'setup_tries=1')
    report('hostile ScienceBoard task files (coda eval --env vm, provider=local)', refused(p, recs, len(items)), m).assert_clean()
