"""The `coda` console command: help, config, parse, and reproduce (resume, failures recorded and counted)."""
import json, subprocess, sys, shutil
from pathlib import Path
import nbformat
import pytest
from coda.cli import main, reproduce, default_notebooks
from coda.paths import NBS

_SCRIPT = Path(sys.executable).parent/'coda'   # the console script installed beside this Python
CODA = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, '-c', 'from coda.cli import main; main()']

def test_help_lists_subcommands():
    out = subprocess.run([*CODA, '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and all(c in out.stdout for c in ('config', 'parse', 'reproduce'))

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

def test_reproduce_records_failures_and_resumes(tmp_path):
    good = _nb(tmp_path/'01_good.ipynb', 'x = 1 + 1', 'assert x == 2')
    flag = tmp_path/'fixed'
    bad = _nb(tmp_path/'02_bad.ipynb', f'import pathlib\nassert pathlib.Path({str(flag)!r}).exists(), "not fixed yet"')
    out = tmp_path/'run'
    s = reproduce(out, [good, bad], progress=False)
    assert s['01_good.ipynb']['ok'] and not s['02_bad.ipynb']['ok']
    assert 'not fixed yet' in s['02_bad.ipynb']['error']
    assert json.loads((out/'summary.json').read_text()) == s
    flag.touch()
    mtime = (out/'01_good.ipynb').stat().st_mtime
    s = reproduce(out, [good, bad], resume=True, progress=False)
    assert s['02_bad.ipynb']['ok'] and (out/'01_good.ipynb').stat().st_mtime == mtime  # the good one was not rerun

def test_reproduce_command_exits_nonzero_on_failure(tmp_path):
    bad = _nb(tmp_path/'bad.ipynb', 'raise ValueError("boom")')
    p = subprocess.run([*CODA, 'reproduce', str(bad), '--out', str(tmp_path/'run')], capture_output=True, text=True)
    assert p.returncode == 1 and 'FAIL' in p.stdout and 'boom' in p.stdout

def test_reproduce_passes_parameters_only_to_notebooks_that_declare_them(tmp_path):
    nb = nbformat.v4.new_notebook(metadata={'kernelspec': {'name': 'python3', 'display_name': 'python3', 'language': 'python'}})
    p = nbformat.v4.new_code_cell('n: int = 3  # size'); p.metadata['tags'] = ['parameters']
    nb.cells = [p, nbformat.v4.new_code_cell('assert n == 7, n')]
    nbformat.write(nb, tmp_path/'t.ipynb')
    plain = _nb(tmp_path/'plain.ipynb', 'assert "n" not in dir()')
    s = reproduce(tmp_path/'run', [tmp_path/'t.ipynb', plain], params={'n': 7}, progress=False)
    assert all(v['ok'] for v in s.values()), s

def test_default_notebooks_are_the_table_notebooks():
    names = [p.name for p in default_notebooks()]
    assert names[0] == '20_table1.ipynb' and all('_table' in n for n in names)

def test_help_lists_every_subcommand():
    out = subprocess.run([*CODA, '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and all(c in out.stdout for c in ('eval', 'judge', 'train', 'serve', 'view'))
    out = subprocess.run([*CODA, 'train', '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and 'grpo' in out.stdout and 'sft' in out.stdout

def test_serve_dry_run_prints_the_reference_servers():
    out = subprocess.run([*CODA, 'serve', '--dry-run', '--vllm', '/opt/vllm-env/bin/vllm', '--first-gpu', '2'], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith('CUDA_VISIBLE_DEVICES=2,3,4,5 /opt/vllm-env/bin/vllm serve OpenIXCLab/CODA-PLANNER-TARS-32B --served-model-name qwen32b')
    assert lines[1].startswith('CUDA_VISIBLE_DEVICES=6,7 /opt/vllm-env/bin/vllm serve ByteDance-Seed/UI-TARS-1.5-7B --served-model-name tars1.5-grounding')
    assert all("--limit-mm-per-prompt '{\"image\": 5}'" in l for l in lines) and len(lines) == 2

def test_serve_without_vllm_is_a_clear_error():
    out = subprocess.run([*CODA, 'serve', '--vllm', '/nonexistent/vllm'], capture_output=True, text=True)
    assert out.returncode != 0 and 'make serve' in out.stderr
