"""Run folders that cannot be turned against the host (issue 36): a symbolic link planted in a run folder is never
written or read through, an API key is never on disk nor in what coda prints, a resume never mixes two runs
unless asked, and an episode against a server that trickles bytes ends (as a timeout) even when no limit is given."""
import io, json, os, re, signal, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace
import pytest
from PIL import Image
from agent_fixtures import CounterEnv, ScriptedServer, Server, Task, counting_policy, send_once
from coda.models import OpenAIChat
from coda.pipeconfig import Record
from coda.records import Judgment
from coda.store import EpisodeWriter, RunStore, file_judgment
from coda.files import UnsafePath
from coda.viewer import to_html

HERE = Path(__file__).parent
_SCRIPT = Path(sys.executable).parent/'coda'
CODA = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, '-m', 'coda.cli']
ENV = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(HERE), os.environ.get('PYTHONPATH', '')])}
ENV.pop('CODA_API_KEY', None)
MINE = "precious: the user's own file"
KEY = 'sk-live-attack-0123456789abcdefXYZ'

def png(color='white', size=(64, 40))->bytes:
    b = io.BytesIO()
    Image.new('RGB', size, color).save(b, 'PNG')
    return b.getvalue()

def outside(tmp_path)->Path:
    "A file of the user's, outside every run folder"
    p = tmp_path/'home'/'mine.txt'
    p.parent.mkdir(exist_ok=True)
    p.write_text(MINE)
    return p

def plant(link:Path, target:Path)->Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link

def coda(*args, timeout=90, env=None):
    return subprocess.run([*CODA, *map(str, args)], capture_output=True, text=True, env=env or ENV, timeout=timeout)

def write_tasks(path, ids, steps=8):
    path.write_text(''.join(json.dumps({'type': 'Counter', 'id': i, 'instruction': 'Click + three times, then answer.', 'steps': steps}) + '\n' for i in ids))
    return path

def eval_args(url, tasks, run, *more):
    return ['eval', '--tasks', tasks, '--run', run, '--env', 'agent_fixtures:CounterEnv', '--planner-url', url, '--planner-model', 'planner',
            '--executor-url', url, '--executor-model', 'executor', '--workers', 2, *more]

def one_line(p)->str:
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and 'Traceback' not in p.stderr, p.stderr[-3000:]
    return lines[0]

def files_holding(root:Path, secret:str)->list:
    "Every file under `root` (links not followed) whose bytes hold `secret`"
    return [p for p in Path(root).rglob('*') if p.is_file() and not p.is_symlink() and secret.encode() in p.read_bytes()]

def holds(v, secret:bytes)->bool:
    "Whether the bytes `secret` are a value anywhere in `v` (a row of a table: dicts, lists, bytes)"
    if isinstance(v, dict): return any(holds(x, secret) for x in v.values())
    if isinstance(v, list): return any(holds(x, secret) for x in v)
    return isinstance(v, bytes) and secret in v

def keyed(srv:ScriptedServer)->list:
    "The Authorization headers `srv` receives from now on (a list that fills as requests come)"
    seen, base = [], srv.httpd.RequestHandlerClass
    class Recording(base):
        def do_POST(self):
            seen.append(self.headers.get('Authorization'))
            super().do_POST()
        def do_GET(self):
            seen.append(self.headers.get('Authorization'))
            super().do_GET()
    srv.httpd.RequestHandlerClass = Recording
    return seen

def finished_episode(store, app='Counter', task='C-00', shot=None):
    w = store.start(app, task, 0, {'instruction': 'count'})
    w.add_step({'step': 0, 'thought': 'Click +.', 'actions': [{'kind': 'click', 'x': 640, 'y': 400}]}, shot or png())
    w.add_final(shot or png())
    w.finish({'status': 'done', 'stop': 'ANS', 'score': 1.0, 'steps': 1})
    return store.episode_dir(app, task, 0)

# ------------------------------------------------------------------ every file coda writes in a run folder

def _writer(run):
    return EpisodeWriter(run/'episodes'/'Counter'/'C-00'/'0', {'app': 'Counter', 'task': 'C-00', 'sample': 0}, fsync=False, root=run)

def _evaluate(run):
    from coda.rollout import evaluate
    with ScriptedServer(counting_policy(3)) as srv:
        evaluate([Task('C-00')], CounterEnv, OpenAIChat(srv.url, 'planner'), OpenAIChat(srv.url, 'executor'), run, progress=False)

def _write_args(run):
    from coda.pipeline import Pipeline
    Pipeline.write_args(SimpleNamespace(root=run), run/'stage1'/'Algebra'/'args.yaml', {'max_steps': 1})

def _summary(run):
    import nbformat
    from coda.pipeline import run_notebooks
    nb = run.parent/'t.ipynb'
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('x = 1')],
                                            metadata={'kernelspec': {'name': 'python3', 'display_name': 'python3', 'language': 'python'}}), nb)
    run_notebooks(run/'tables', [nb], progress=False, root=run)

def _export(run):
    from coda.export import export_run
    finished_episode(RunStore(run, {}, fsync=False))
    export_run(run, run/'exported')

WRITES = {   # the file a link is planted at (relative to the run folder), and what writes it
    'run.json':            ('run.json', lambda run: RunStore(run, {'n': 1})),
    'meta.json':           ('episodes/Counter/C-00/0/meta.json', _writer),
    'steps.jsonl':         ('episodes/Counter/C-00/0/steps.jsonl', _writer),
    'step png':            ('episodes/Counter/C-00/0/step_000.png', None),
    'final.png':           ('episodes/Counter/C-00/0/final.png', None),
    'result.json':         ('episodes/Counter/C-00/0/result.json', None),
    'judgment':            ('judgments/judge/Counter/C-00/0.json',
                            lambda run: file_judgment(run, Judgment(key=('Counter', 'C-00', 0), judge='judge', accepted=True, label=1), fsync=False)),
    'viewer.html':         ('viewer.html', to_html),
    'metrics.md':          ('metrics.md', _evaluate),
    'metrics.csv':         ('metrics.csv', _evaluate),
    'pipeline.json':       ('pipeline.json', lambda run: Record(run/'pipeline.json').update(status='running')),
    'args.yaml':           ('stage1/Algebra/args.yaml', _write_args),
    'summary.json':        ('tables/summary.json', _summary),
    'table notebook':      ('tables/t.ipynb', _summary),
    'export README.md':    ('exported/README.md', _export),
    'export parquet':      ('exported/data/steps/train-00000-of-00001.parquet', _export),
}

@pytest.mark.parametrize('what', list(WRITES))
def test_a_link_planted_where_coda_writes_is_refused_and_the_outside_file_kept(tmp_path, what):
    "viewer.html, metrics.md, steps.jsonl, ... were written through a planted link, overwriting (or appending to) a file outside the run"
    mine, run = outside(tmp_path), tmp_path/'run'
    rel, write = WRITES[what]
    if write is None:                          # the episode's later files: planted while the episode runs
        w = _writer(run)
        plant(run/rel, mine)
        write = {'step png': lambda run: w.add_step({'step': 0}, png()), 'final.png': lambda run: w.add_final(png()),
                 'result.json': lambda run: w.finish({'status': 'done', 'score': 1.0})}[what]
    else: plant(run/rel, mine)
    with pytest.raises(UnsafePath, match=f"{re.escape(Path(rel).name)} (is a symbolic link|resolves to .*, outside the run folder)"): write(run)
    assert mine.read_text() == MINE and (run/rel).is_symlink()

def test_a_folder_that_leads_out_of_the_run_is_refused(tmp_path):
    mine, run = outside(tmp_path), tmp_path/'run'
    store = RunStore(run, {}, fsync=False)
    plant(run/'judgments'/'judge', mine.parent)                     # a judge's folder that is a link to the user's folder
    with pytest.raises(UnsafePath, match='outside the run folder'): file_judgment(run, Judgment(key=('Counter', 'C-00', 0), judge='judge', accepted=True, label=1))
    plant(run/'episodes'/'Counter', mine.parent)
    with pytest.raises(UnsafePath, match='outside the run folder'): store.start('Counter', 'C-00', 0)
    assert sorted(p.name for p in mine.parent.iterdir()) == ['mine.txt'] and mine.read_text() == MINE

def test_a_restart_unlinks_planted_links_without_following_them(tmp_path):
    "an unfinished episode's folder holding links (or being one) is wiped on resume: the links go, their targets stay"
    mine, run = outside(tmp_path), tmp_path/'run'
    store = RunStore(run, {}, fsync=False)
    d = store.episode_dir('Counter', 'C-00', 0)
    for name in ('meta.json', 'steps.jsonl', 'step_000.png'): plant(d/name, mine)
    store.start('Counter', 'C-00', 0).finish({'status': 'done', 'score': 1.0})
    plant(run/'episodes'/'Counter'/'C-01'/'0', mine.parent)           # an episode folder that is a link out of the run: refused
    with pytest.raises(UnsafePath, match='outside the run folder'): store.start('Counter', 'C-01', 0)
    assert mine.read_text() == MINE and sorted(p.name for p in mine.parent.iterdir()) == ['mine.txt']
    assert [r['task'] for r in store.records()] == ['C-00']

def test_coda_view_refuses_a_planted_viewer_link_in_one_line(tmp_path):
    mine, run = outside(tmp_path), tmp_path/'run'
    finished_episode(RunStore(run, {}, fsync=False))
    plant(run/'viewer.html', mine)
    p = coda('view', run)
    assert p.returncode == 2 and 'viewer.html is a symbolic link' in one_line(p) and mine.read_text() == MINE

# ------------------------------------------------------------------ what the export and the viewer read

def test_the_export_embeds_nothing_from_outside_the_run(tmp_path):
    "a step_000.png (or final.png, steps.jsonl, or a whole episode folder) linked out of the run was embedded in the dataset"
    from coda.export import export_run, steps_dataset, episodes_dataset
    from coda.viewer import to_html
    secret = png('red', (7, 5))                                                   # the user's own image
    (tmp_path/'home').mkdir()
    (tmp_path/'home'/'private.png').write_bytes(secret)
    run = tmp_path/'run'
    store = RunStore(run, {}, fsync=False)
    finished_episode(store, task='C-00')
    d = finished_episode(store, task='C-01')
    for name in ('step_000.png', 'final.png'):
        (d/name).unlink()
        plant(d/name, tmp_path/'home'/'private.png')
    other = RunStore(tmp_path/'home'/'other', {}, fsync=False)                   # a run folder of the user's, elsewhere
    finished_episode(other, task='C-02', shot=secret)
    plant(run/'episodes'/'Counter'/'C-02', other.episode_dir('Counter', 'C-02', 0).parent)
    with pytest.warns(RuntimeWarning, match='symbolic link: left out'):
        steps = steps_dataset(run)
    assert sorted(zip(steps['task'], [im is not None for im in steps['image']])) == [('C-00', True), ('C-01', False)]
    eps = episodes_dataset(run)
    assert sorted(zip(eps['task'], [im is not None for im in eps['final']])) == [('C-00', True), ('C-01', False)]
    out = export_run(run, tmp_path/'exported')
    import pyarrow.parquet as pq
    rows = [r for p in out.rglob('*.parquet') for r in pq.read_table(p).to_pylist()]
    assert len(rows) == 4 and not any(holds(r, secret) for r in rows)
    page = to_html(run).read_text()
    assert page.count('alt="final screen"') == 1 and 'C-02' not in page

# ------------------------------------------------------------------ API keys

def test_eval_with_an_api_key_leaves_it_in_no_file_and_no_output(tmp_path):
    tasks, run = write_tasks(tmp_path/'tasks.jsonl', ['C-00', 'C-01']), tmp_path/'run'
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as srv:
        seen = keyed(srv)
        p = coda(*eval_args(srv.url, tasks, run, '--api-key', KEY, '--html'))
    assert p.returncode == 0, p.stderr[-3000:]
    assert seen and set(seen) == {f'Bearer {KEY}'}                                # the key was used
    assert files_holding(run, KEY) == [] and KEY not in p.stdout + p.stderr
    assert len(RunStore(run).records()) == 2 and (run/'viewer.html').exists()

def test_the_pipeline_with_serving_api_key_leaves_it_in_no_file(tmp_path):
    "pipeline.json recorded serving.api_key in clear"
    from coda.paths import PARAMS
    run = tmp_path/'run'
    policy = lambda body: "Thought: The answer is 4.\nAction: ```ANS 4```"
    with ScriptedServer(policy, models=['baseline']) as srv:
        seen = keyed(srv)
        p = subprocess.run([*CODA, 'pipeline', '--config', PARAMS/'smoke.yaml', '--run', run, '--quiet', '--set', 'prepare=""',
                            '--set', f'models.planner={{url: "{srv.url}", name: baseline}}', '--set', 'models.teacher=null',
                            '--set', 'explore.runs=[]', '--set', 'judging.train=null', '--set', f'serving.api_key={KEY}',
                            '--set', 'models.judge={url: "http://127.0.0.1:9/v1", name: judge}'],   # nothing answers there: judging fails
                           capture_output=True, text=True, env=ENV, timeout=600)
    stages = json.loads((run/'pipeline.json').read_text())['stages']
    assert p.returncode != 0 and stages['explore_baseline']['status'] == 'done', (p.stdout + p.stderr)[-3000:]
    assert f'Bearer {KEY}' in seen and len(list(run.glob('explore/baseline/episodes/*/*/*/result.json'))) > 0
    assert json.loads((run/'pipeline.json').read_text())['config']['serving']['api_key'] == '****fXYZ'
    assert files_holding(run, KEY) == [] and files_holding(run, KEY[:-4]) == [] and KEY not in p.stdout + p.stderr

def _interrupt(args, ready, env=ENV):
    "Run `coda args` and send it Ctrl-C once `ready()`; its (exit code, stderr)"
    with_sigint = [sys.executable, '-c', 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])']
    proc = subprocess.Popen([*with_sigint, *CODA, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    end = time.time() + 60
    while not ready() and time.time() < end and proc.poll() is None: time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    try: _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f'coda did not stop on Ctrl-C: {proc.communicate()[1][-2000:]}')
    return proc.returncode, err

def test_ctrl_c_prints_no_key_and_its_resume_command_works_when_pasted(tmp_path):
    "the resume command printed at Ctrl-C held --api-key and --planner-api-key in clear"
    tasks, run = write_tasks(tmp_path/'tasks.jsonl', ['C-00', 'C-01', 'C-02']), tmp_path/'run dir'
    planner_key = 'sk-planner-9876543210zyxw'
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as srv:
        seen = keyed(srv)
        args = eval_args(srv.url, tasks, run, '--env-opt', 'delay=0.4', '--api-key', KEY, f'--planner-api-key={planner_key}', '--workers', 1)
        first = run/'episodes'/'Counter'/'C-00'/'0'/'steps.jsonl'
        code, err = _interrupt(args, lambda: first.exists() and first.read_text().count('\n') >= 1)
        assert code == 130 and 'Resume with:' in err, err[-3000:]
        assert KEY not in err and planner_key not in err and KEY[-8:] not in err
        cmd = err.split('Resume with:\n')[1].splitlines()[0].strip()
        assert '--api-key "$CODA_API_KEY"' in cmd and '--planner-api-key="$CODA_PLANNER_API_KEY"' in cmd, cmd
        assert '$CODA_API_KEY, $CODA_PLANNER_API_KEY' in err
        seen.clear()
        env = {**ENV, 'CODA_API_KEY': KEY, 'CODA_PLANNER_API_KEY': planner_key, 'PATH': f"{Path(CODA[0]).parent}{os.pathsep}{ENV['PATH']}"}
        if not _SCRIPT.exists(): cmd = cmd.replace('coda ', f'{sys.executable} -m coda.cli ', 1)
        p = subprocess.run(['bash', '-c', cmd], capture_output=True, text=True, env=env, timeout=120)   # pasted as printed
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(r['task'] for r in RunStore(run).records()) == ['C-00', 'C-01', 'C-02']
    assert {f'Bearer {KEY}', f'Bearer {planner_key}'} == set(seen)                     # the executor's key, and the planner's own
    assert files_holding(run, KEY) == [] and files_holding(run, planner_key) == []

# ------------------------------------------------------------------ resumes never mix two runs

def test_a_resume_with_another_url_seed_or_model_exits_2_naming_it(tmp_path):
    tasks, run = write_tasks(tmp_path/'tasks.jsonl', ['C-00']), tmp_path/'run'
    with ScriptedServer(counting_policy(3), models=['planner', 'executor', 'executor2']) as a, \
         ScriptedServer(counting_policy(3), models=['planner', 'executor']) as b:
        p = coda(*eval_args(a.url, tasks, run, '--seed', 1))
        assert p.returncode == 0, p.stderr[-3000:]
        for change, named in [(['--planner-url', b.url], f"planner_url: '{a.url}' then, '{b.url}' now"),
                              (['--executor-url', b.url], f"executor_url: '{a.url}' then, '{b.url}' now"),
                              (['--executor-model', 'executor2'], "executor: 'executor' then, 'executor2' now"),
                              (['--seed', 2], 'seed: 1 then, 2 now'), ([], "seed: 1 then, '(not set)' now")]:
            args = eval_args(a.url, tasks, run, *(['--seed', 1] if '--seed' not in change and change else []), *change)
            p = coda(*args)
            line = one_line(p)
            assert p.returncode == 2 and named in line and '--accept-changes' in line, (change, line)
        p = coda(*eval_args(a.url, tasks, run, '--seed', 1, '--planner-url', b.url, '--accept-changes'))   # meant: accepted, recorded
        assert p.returncode == 0 and 'resumed with other settings, as asked: planner_url' in p.stderr, p.stderr[-3000:]
    cfg = RunStore(run).config
    assert cfg['planner_url'] == b.url and [c['settings'] for c in cfg['changes']] == [{'planner_url': [a.url, b.url]}]
    assert len(RunStore(run).records()) == 1

# ------------------------------------------------------------------ no endless episode

class Trickle:
    "A model server that lists its models, then answers every chat request one byte every `every` seconds, for ever"
    def __init__(self, models=('planner', 'executor'), every=0.5):
        self.stop, self.requests = threading.Event(), 0
        srv = self
        class H(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'
            def log_message(self, *a): pass
            def do_GET(self):
                send_once(self, 200, json.dumps({'object': 'list', 'data': [{'id': m, 'object': 'model'} for m in models]}).encode())
            def do_POST(self):
                self.rfile.read(int(self.headers['Content-Length']))
                srv.requests += 1
                self.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n')
                try:
                    while not srv.stop.wait(every):
                        self.wfile.write(b' ')
                        self.wfile.flush()
                except OSError: pass   # the client gave up
        self.httpd = Server(('127.0.0.1', 0), H)
        self.httpd.handle_error = lambda *a: None
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}/v1'
    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self
    def __exit__(self, *a):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

def test_an_episode_against_a_trickling_server_ends_as_a_timeout_by_default(tmp_path):
    "no --episode-timeout meant no limit: a server sending a byte every few seconds held the episode (and its worker) for ever"
    tasks, run = write_tasks(tmp_path/'tasks.jsonl', ['C-00']), tmp_path/'run'
    # coda eval as it is, with only the default limit shortened from an hour to 3 s (the request's own limit stays 120 s)
    shortened = [sys.executable, '-c', 'import sys, coda.rollout; coda.rollout.EPISODE_TIMEOUT = 3.0; from coda.cli import main; main(sys.argv[1:])']
    with Trickle() as srv:
        p = subprocess.run([*shortened, *map(str, eval_args(srv.url, tasks, run))], capture_output=True, text=True, env=ENV, timeout=100)
    assert srv.requests >= 1
    assert p.returncode == 1 and 'ended in an error or a timeout' in p.stderr, p.stderr[-3000:]
    e = next(RunStore(run).episodes())
    assert (e.result['status'], e.result['stop'], e.meta['episode_timeout']) == ('timeout', 'TIMEOUT', 3.0), e.result
    assert 'longer than 3 s' in e.result['reason']

def test_the_default_limit_is_what_eval_runs_with(tmp_path):
    "an episode's meta.json records the limit it ran under: the default when none is given, the flag's otherwise"
    from coda.rollout import EPISODE_TIMEOUT
    tasks = write_tasks(tmp_path/'tasks.jsonl', ['C-00'])
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as srv:
        for run, more, limit in [(tmp_path/'default', [], EPISODE_TIMEOUT), (tmp_path/'given', ['--episode-timeout', 90], 90.0)]:
            p = coda(*eval_args(srv.url, tasks, run, *more))
            assert p.returncode == 0, p.stderr[-3000:]
            assert next(RunStore(run).episodes()).meta['episode_timeout'] == limit
    assert EPISODE_TIMEOUT >= 15 * 2 * 120   # ScienceBoard's largest budget, two requests a step, each at its 120-s cut-off

def test_records_never_hold_nan_or_infinity(tmp_path):
    "Python wrote NaN and Infinity, which no other JSON reader takes"
    store = RunStore(tmp_path/'run', {'temperature': float('nan')}, fsync=False)
    w = store.start('Counter', 'C-00', 0, {'budget': float('inf')})
    w.add_step({'step': 0, 'total_s': float('nan'), 'actions': [{'kind': 'scroll', 'dy': -float('inf')}]})
    w.finish({'status': 'done', 'score': 1.0, 'seconds': float('inf')})
    strict = lambda p, text: json.loads(text, parse_constant=lambda c: pytest.fail(f'{p.name} holds {c}'))
    d = store.episode_dir('Counter', 'C-00', 0)
    got = {p.name: strict(p, p.read_text()) for p in [tmp_path/'run'/'run.json', d/'meta.json', d/'result.json']}
    steps = [strict(d/'steps.jsonl', l) for l in (d/'steps.jsonl').read_text().splitlines()]
    assert (got['run.json']['temperature'], got['meta.json']['budget'], got['result.json']['seconds']) == (None, None, None)
    assert (steps[0]['total_s'], steps[0]['actions'][0]['dy']) == (None, None)
