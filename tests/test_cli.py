"""The `coda` console command: help, config, parse, `python -m coda`, serve's plans, and the notebook runner the pipeline's tables stage uses."""
import json, subprocess, sys, shutil
from pathlib import Path
import nbformat
import pytest
from coda.cli import main
from coda.pipeline import run_notebooks
from coda.paths import NBS, PARAMS

_SCRIPT = Path(sys.executable).parent/'coda'   # the console script installed beside this Python
CODA = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, '-c', 'from coda.cli import main; main()']

def test_help_lists_subcommands():
    out = subprocess.run([*CODA, '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and all(c in out.stdout for c in ('config', 'parse', 'reproduce', 'pipeline'))

@pytest.mark.parametrize('module', ['coda', 'coda.cli'])
def test_python_dash_m_runs_the_command(module):
    "what `accelerate launch -m coda.cli train ...` starts in every process (it printed nothing and exited 0 before)"
    out = subprocess.run([sys.executable, '-m', module, 'train', 'grpo', '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and '--num-generations' in out.stdout and '--codec' in out.stdout
    out = subprocess.run([sys.executable, '-m', module, 'config'], capture_output=True, text=True)
    assert out.returncode == 0 and 'planner_model = ' in out.stdout

def test_config_shows_every_setting(capsys, monkeypatch):
    monkeypatch.setenv('CODA_PLANNER_MODEL', 'from-env')
    main(['config'])
    out = capsys.readouterr().out
    assert 'planner_model = from-env' in out and 'screen_width = 1280' in out

def test_parse_relative_and_stdin(capsys, monkeypatch):
    import io
    monkeypatch.setattr(sys, 'stdin', io.StringIO("Action: click(start_box='(500,500)')"))
    main(['parse', '-', '--coords', 'relative1000', '--screen', '1920x1080', '--json'])
    assert json.loads(capsys.readouterr().out) == [{'kind': 'click', 'x': 960.0, 'y': 540.0}]

def _nb(path, *sources):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources],
                   metadata={'kernelspec': {'name': 'python3', 'display_name': 'python3', 'language': 'python'}}), path)
    return path

def test_run_notebooks_records_failures(tmp_path):
    good = _nb(tmp_path/'01_good.ipynb', 'x = 1 + 1', 'assert x == 2')
    bad = _nb(tmp_path/'02_bad.ipynb', 'assert False, "not fixed yet"')
    s = run_notebooks(tmp_path/'run', [good, bad], progress=False)
    assert s['01_good.ipynb']['ok'] and not s['02_bad.ipynb']['ok'] and 'not fixed yet' in s['02_bad.ipynb']['error']
    assert json.loads((tmp_path/'run'/'summary.json').read_text()) == s

def test_run_notebooks_passes_parameters_only_to_notebooks_that_declare_them(tmp_path):
    nb = nbformat.v4.new_notebook(metadata={'kernelspec': {'name': 'python3', 'display_name': 'python3', 'language': 'python'}})
    p = nbformat.v4.new_code_cell('n: int = 3  # size')
    p.metadata['tags'] = ['parameters']
    nb.cells = [p, nbformat.v4.new_code_cell('assert n == 7, n')]
    nbformat.write(nb, tmp_path/'t.ipynb')
    plain = _nb(tmp_path/'plain.ipynb', 'assert "n" not in dir()')
    s = run_notebooks(tmp_path/'run', [tmp_path/'t.ipynb', plain], params={'n': 7}, progress=False)
    assert all(v['ok'] for v in s.values()), s

def test_table_notebooks_declare_the_parameters_the_pipeline_passes():
    import papermill as pm
    for nb in ('20_table1.ipynb', '21_table2.ipynb'):
        assert {'run', 'out'} <= set(pm.inspect_notebook(str(NBS/nb))), nb

def test_help_lists_every_subcommand():
    out = subprocess.run([*CODA, '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and all(c in out.stdout for c in ('eval', 'judge', 'train', 'serve', 'view'))
    out = subprocess.run([*CODA, 'train', '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and all(c in out.stdout for c in ('grpo', 'sft', 'judge'))

def test_serve_dry_run_prints_the_reference_servers():
    out = subprocess.run([*CODA, 'serve', '--dry-run', '--vllm', '/opt/vllm-env/bin/vllm', '--first-gpu', '2'], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith('CUDA_VISIBLE_DEVICES=2,3,4,5 /opt/vllm-env/bin/vllm serve OpenIXCLab/CODA-PLANNER-TARS-32B --served-model-name coda-planner')
    assert lines[1].startswith('CUDA_VISIBLE_DEVICES=6,7 /opt/vllm-env/bin/vllm serve ByteDance-Seed/UI-TARS-1.5-7B --served-model-name tars1.5-grounding')
    assert all("--limit-mm-per-prompt '{\"image\": 5}'" in l for l in lines) and len(lines) == 2

def test_serve_a_pipelines_rows_one_server_per_model(tmp_path):
    "every planner the rows need under the pipeline's names (each app's specialist its own), the executor; untrained rows are refused"
    import yaml
    run = tmp_path/'paper'
    cmd = [*CODA, 'serve', '--config', str(PARAMS/'paper.yaml'), '--run', str(run), '--dry-run', '--vllm', 'vllm']
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode != 0 and 'not trained yet' in out.stderr and 'stage1-KAlgebra' in out.stderr
    out = subprocess.run(cmd + ['--rows', 'baseline'], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert [l.split('--served-model-name ')[1].split()[0] for l in out.stdout.strip().splitlines()] == ['baseline', 'executor']
    run.mkdir()
    apps = ('KAlgebra', 'ChimeraX', 'GrassGIS', 'Celestia')   # params/paper.yaml's: ScienceBoard's four apps of Table 1
    stages = {f'stage1_{a}': {'status': 'done', 'outputs': {'model': f'/ckpt/{a}'}} for a in apps}
    stages['stage2'] = {'status': 'done', 'outputs': {'model': '/ckpt/generalist'}}
    (run/'pipeline.json').write_text(json.dumps({'stages': stages}))
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert [l.split('--served-model-name ')[1].split()[0] for l in lines] == ['baseline', *(f'stage1-{a}' for a in apps), 'stage2', 'executor']
    assert 'vllm serve /ckpt/KAlgebra ' in lines[1] and lines[1].startswith('CUDA_VISIBLE_DEVICES=4,5,6,7 ')   # tensor parallel 4, as its base

def test_serve_without_vllm_is_a_clear_error():
    out = subprocess.run([*CODA, 'serve', '--vllm', '/nonexistent/vllm'], capture_output=True, text=True)
    assert out.returncode != 0 and 'make serve' in out.stderr

# ---------------------------------------------------------------- coda eval: limits, in-process backends, tasks scidesk does not simulate

from agent_fixtures import ScriptedServer, counting_policy
from coda.store import RunStore

def _counter_tasks(path, n):
    path.write_text(''.join(json.dumps({'type': 'Counter', 'id': f'C-{i:02d}', 'instruction': 'Click + three times, then answer.', 'steps': 8}) + '\n'
                            for i in range(n)))
    return path

def test_eval_limits_reach_every_request_and_the_step_budget(tmp_path, capsys):
    "--max-tokens sets both models' max_tokens, --executor-max-tokens overrides one; --max-steps replaces the tasks' budget of 8"
    tasks, run = _counter_tasks(tmp_path/'tasks.jsonl', 2), tmp_path/'run'
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as srv:
        main(['eval', '--tasks', str(tasks), '--env', 'agent_fixtures:CounterEnv', '--run', str(run), '--in-process', '--workers', '2',
              '--planner-url', srv.url, '--planner-model', 'planner', '--executor-url', srv.url, '--executor-model', 'executor',
              '--max-tokens', '77', '--executor-max-tokens', '33', '--max-steps', '2'])
        sent = {(b['model'], b['max_tokens']) for b in srv.requests}
    assert sent == {('planner', 77), ('executor', 33)}, sent
    recs = RunStore(run).records()
    assert [(r['steps'], r['stop'], r['score']) for r in recs] == [(2, 'BUDGET', 0.0)] * 2   # 3 clicks and an answer needed 4 steps
    assert json.loads((run/'run.json').read_text())['max_steps'] == 2
    with ScriptedServer(counting_policy(3), models=['planner', 'executor']) as srv:   # another budget on resume: refused, not mixed in
        with pytest.raises(SystemExit) as e:
            main(['eval', '--tasks', str(tasks), '--env', 'agent_fixtures:CounterEnv', '--run', str(run), '--in-process', '--max-steps', '5',
                  '--planner-url', srv.url, '--planner-model', 'planner', '--executor-url', srv.url, '--executor-model', 'executor'])
    assert e.value.code == 2 and 'max_steps' in capsys.readouterr().err

def _science_tasks(folder:Path)->Path:
    "Two scidesk Algebra test tasks beside ScienceBoard-style task files of apps scidesk does not simulate"
    from coda.envs.scidesk import scidesk_tasks
    folder.mkdir()
    for t in scidesk_tasks(['Algebra'], split='test')[:2]: shutil.copy(t.source, folder/f'scidesk-{t.id}.json')
    for app, tid in (('ChimeraX', 'A-01'), ('ChimeraX', 'A-02'), ('Lean', 'B-01')):
        (folder/f'{app}-{tid}.json').write_text(json.dumps({'type': app, 'id': tid, 'instruction': f'A {app} task.', 'steps': 15}))
    return folder

ORACLE = ['--planner-backend', 'coda.mini.oracle:OraclePlanner', '--executor-backend', 'coda.mini.grounder:A11yGrounder', '--obs', 'both']

def test_eval_runs_in_process_backends_and_leaves_out_unsimulated_apps_once(tmp_path, capsys):
    "the reference-solution planner and the grounder from the command line (no server); ChimeraX and Lean tasks named once, before the run"
    tasks, run = _science_tasks(tmp_path/'tasks'), tmp_path/'run'
    main(['eval', '--tasks', str(tasks), '--env', 'scidesk', '--run', str(run), '--in-process', '--workers', '2', *ORACLE])
    out = capsys.readouterr().out
    note = 'scidesk does not simulate ChimeraX (2 tasks), Lean (1 task): 3 of 5 tasks left out'
    assert out.count(note) == 1 and out.index(note) < out.index('2 tasks x 1 samples') and '--env vm' in out and '--env desktop' in out, out
    assert 'planner  coda.mini.oracle:OraclePlanner (in this process)' in out, out
    recs = RunStore(run).records()
    assert sorted(r['app'] for r in recs) == ['Algebra', 'Algebra'] and all(r['score'] == 1.0 for r in recs), recs   # the reference solutions pass
    assert json.loads((run/'run.json').read_text())['planner'] == 'coda.mini.oracle:OraclePlanner'

def test_eval_with_no_simulated_task_is_one_clear_error(tmp_path):
    tasks = _science_tasks(tmp_path/'tasks')
    for f in tasks.glob('scidesk-*.json'): f.unlink()
    p = subprocess.run([*CODA, 'eval', '--tasks', str(tasks), '--env', 'scidesk', '--run', str(tmp_path/'run'), *ORACLE], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count('\n') == 1, p.stderr
    assert 'no task to run: scidesk does not simulate ChimeraX (2 tasks), Lean (1 task): 3 of 3 tasks left out' in p.stderr and not (tmp_path/'run').exists()
    from coda.envs.scidesk import scidesk_tasks
    p = subprocess.run([*CODA, 'eval', '--tasks', scidesk_tasks(['Algebra'])[0].source, '--env', 'scidesk', '--planner-backend', 'coda.mini.oracle:Nope'],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--planner-backend coda.mini.oracle:Nope: cannot load 'coda.mini.oracle:Nope'" in p.stderr, p.stderr
