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
