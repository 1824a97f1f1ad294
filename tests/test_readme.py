"""The README's quickstarts, run: every shell block marked `<!-- readme-test: NAME -->` in README.md is run line by line,
as written, in a fresh folder that holds the checkout's `data/` and `.venv/` (links), with only the endpoints' URLs
swapped for a local `coda serve-local` that serves the model names the README asks for. `make TARGET` lines are
dry runs (`make -n`, in the checkout): the target must exist, but nothing is installed by a test.
Also: README.md and RESULTS.md are what `python -m coda.readme` writes, and the vLLM lines name the models and ports
the `coda eval` lines use."""
import os, re, subprocess, sys, time
from pathlib import Path
import pytest
from needs import need_programs
from coda.models import Reply
from coda.paths import NBS, ROOT
from coda.readme import nb_to_markdown, PAGES
from coda.serve import LocalServer
from coda.store import RunStore

README = (ROOT/'README.md').read_text()
BLOCKS = dict(re.findall(r'<!-- readme-test: (\S+) -->\n```sh\n(.*?)\n```', README, re.S))
VENV = Path(sys.executable).parent.parent   # the environment running the tests: the README's .venv
URL = re.compile(r'https?://[^\s"\'\\]+/v1')

def commands(name:str)->list:
    "The block's commands, one per line after joining `\\` continuations"
    return [c.strip() for c in BLOCKS[name].replace('\\\n', ' ').split('\n') if c.strip()]

def models(role:str)->set:
    "The model names the README's tested commands ask for in `--{role}-model`"
    return {m for b in BLOCKS.values() for m in re.findall(rf'--{role}-model (\S+)', b)}

class ScriptedPlanner:
    "The planner served to the README's commands: a click, then DONE"
    async def chat(self, messages:list, **kw)->Reply:
        turn = sum(m['role'] == 'assistant' for m in messages)
        text = ("Thought: Click the middle of the window.\nAction: click(start_box='(640,400)')" if turn == 0
                else "Thought: The task is done.\nAction: DONE")
        return Reply(text, None, None, 0.0, 1, 'scripted-planner', 'local:scripted-planner')

class ScriptedExecutor:
    "The executor served to the README's commands: UI-TARS-1.5's click in the middle of the screen, `finished()` when told it is done"
    async def chat(self, messages:list, **kw)->Reply:
        last = messages[-1]['content']
        said = last if isinstance(last, str) else ' '.join(p.get('text') or '' for p in last)
        text = "finished()" if 'The task is done' in said else "click(start_box='<|box_start|>(644,406)<|box_end|>')"
        return Reply(text, None, None, 0.0, 1, 'scripted-executor', 'local:scripted-executor')

@pytest.fixture(scope='module')
def server():
    specs = {**{m: {'backend': 'test_readme:ScriptedPlanner'} for m in models('planner')},
             **{m: {'backend': 'test_readme:ScriptedExecutor'} for m in models('executor')}}
    with LocalServer(specs, env={'PYTHONPATH': str(Path(__file__).parent)}) as srv: yield srv

def run_block(name:str, cwd:Path, url:str|None=None, env:dict|None=None)->list:
    "Run a block's commands in order in `cwd` (`data` and `.venv` linked in): a list of (command, stdout)"
    for link, target in (('data', ROOT/'data'), ('.venv', VENV)):
        if not (cwd/link).exists(): (cwd/link).symlink_to(target)
    out = []
    for cmd in commands(name):
        if cmd.startswith('make '): cmd, where = 'make -n ' + cmd[5:], ROOT   # a dry run: the target exists; nothing installed
        else: where = cwd
        if url: cmd = URL.sub(url, cmd)
        p = subprocess.run(['bash', '-c', cmd], cwd=where, capture_output=True, text=True, timeout=240,
                           env={**os.environ, 'PATH': f"{VENV/'bin'}:{os.environ['PATH']}", **(env or {})})
        assert p.returncode == 0, f"README command failed ({p.returncode}): {cmd}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        out.append((cmd, p.stdout))
    return out

def test_pages_are_generated_and_the_blocks_are_there():
    for nb, page in PAGES.items(): assert (ROOT/page).read_text() == nb_to_markdown(NBS/nb), f"{page} is stale: python -m coda.readme"
    assert set(BLOCKS) == {'make', 'demo', 'endpoints', 'hosted', 'desktop'}, sorted(BLOCKS)
    assert commands('make') == ['make reproduce   # the main job: creates .venv on first use, installs everything (CPU only), runs the reproduction into runs/',
                                'make test        # same set-up, then the whole suite: notebooks clean, library and README in sync, notebook tests, pytest']
    assert [c.split('#')[0].strip() for c in commands('demo')] == ['make setup', '.venv/bin/coda demo', 'python3 -m webbrowser runs/demo/viewer.html']
    for name in ('endpoints', 'hosted', 'desktop'):
        ev = [c for c in commands(name) if 'coda eval' in c]
        assert len(ev) == 1 and all(f in ev[0] for f in ('--planner-url', '--planner-model', '--executor-url', '--executor-model',
                                                          '--max-steps', '--max-tokens')), ev
    assert 'RESULTS.md' in README and '<!--' not in (ROOT/'RESULTS.md').read_text().split('\n', 1)[1]   # every directive filled

def test_vllm_lines_serve_what_the_eval_asks_for():
    serve = next(b for b in re.findall(r'```sh\n(.*?)\n```', README, re.S) if 'vllm serve' in b)
    served = dict(re.findall(r'--served-model-name (\S+) --port (\d+)', serve))
    ev = commands('endpoints')[0]
    for role in ('planner', 'executor'):
        model, port = re.search(rf'--{role}-model (\S+)', ev)[1], re.search(rf'--{role}-url http://localhost:(\d+)/v1', ev)[1]
        assert served.get(model) == port, (role, model, port, served)

def test_the_two_commands_exist(tmp_path):
    out = run_block('make', tmp_path)
    assert 'coda reproduce' in out[0][1] and '.ci/test' in out[1][1], out

def test_quickstart_demo(tmp_path):
    out = run_block('demo', tmp_path, env={'BROWSER': 'echo'})   # webbrowser hands the file to $BROWSER: here, echo
    assert 'overall ' in out[1][1] and 'viewer: runs/demo/viewer.html' in out[1][1], out[1][1]
    assert out[2][1].split('\n')[0] == 'runs/demo/viewer.html' and (tmp_path/'runs'/'demo'/'viewer.html').stat().st_size > 1000

def eval_run(out:list, cwd:Path)->list:
    "The records of the run folder the block's `coda eval` wrote, after checking it printed its metrics"
    cmd, stdout = next((c, o) for c, o in out if 'coda eval' in c)
    assert 'overall (mean of tasks)' in stdout, stdout
    recs = RunStore(cwd/re.search(r'--run (\S+)', cmd)[1]).records()
    assert recs and all(r['status'] != 'error' and r['steps'] == 2 and r['stop'] == 'DONE' for r in recs), recs
    return recs

@pytest.mark.parametrize('name', ['endpoints', 'hosted'])
def test_quickstart_own_models(name, server, tmp_path):
    t0 = time.perf_counter()
    out = run_block(name, tmp_path, url=server.url, env={'OPENAI_API_KEY': 'sk-readme-test'})
    recs = eval_run(out, tmp_path)
    limit, n = (int(re.search(rf'--{k} (\d+)', out[0][0])[1]) for k in ('limit', 'n'))
    assert len(recs) == limit * n and {r['app'] for r in recs} <= {'Algebra', 'Biochem', 'GIS', 'Astronomy'}, recs
    if '--html' in out[0][0]: assert (tmp_path/re.search(r'--run (\S+)', out[0][0])[1]/'viewer.html').exists()
    print(f"{name}: {len(recs)} episodes in {time.perf_counter() - t0:.1f} s")

@pytest.mark.xvfb
def test_quickstart_kalgebra_desktop(server, tmp_path):
    need_programs('Xvfb', 'xdotool', 'openbox', 'kalgebra')
    out = run_block('desktop', tmp_path, url=server.url)
    recs = eval_run(out, tmp_path)
    assert len(recs) == int(re.search(r'--limit (\d+)', out[1][0])[1]) and {r['app'] for r in recs} == {'KAlgebra'}, recs
