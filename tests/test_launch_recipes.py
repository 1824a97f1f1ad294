"""The launch recipes: every accelerate config in params/accelerate parses with the keys accelerate needs; the paper
plan's training stages launch with their preset's config and process count, naming files that exist; and through
the same launcher the pipeline uses (`coda.launch.launch_command`: `accelerate launch` with two CPU processes), a
tiny-model SFT step with --gradient-checkpointing and a tiny judge-LoRA step start and finish."""
import json, os, shlex, subprocess, sys, time
from pathlib import Path
import pytest, yaml

from coda.paths import PARAMS, ROOT
from coda.pipeconfig import Launch
from coda.launch import launch_command, launch_env

ACCEL = sorted((PARAMS/'accelerate').glob('*.yaml'))
NEEDED = ('compute_environment', 'distributed_type', 'mixed_precision', 'num_machines', 'machine_rank', 'use_cpu')
DS_KEYS = ('zero_stage', 'offload_optimizer_device', 'offload_param_device', 'gradient_accumulation_steps', 'gradient_clipping')
PRESETS = ['grpo_paper.yaml', 'grpo_paper_lora.yaml', 'grpo_paper_colocate.yaml', 'sft_paper.yaml', 'judge_paper.yaml']


def test_the_accelerate_configs_are_there():
    assert {p.name for p in ACCEL} >= {'zero2.yaml', 'zero3.yaml', 'zero3_offload.yaml', 'zero3_offload_optimizer.yaml'}


@pytest.mark.parametrize('path', ACCEL, ids=lambda p: p.name)
def test_accelerate_config_parses_with_the_keys_accelerate_needs(path):
    "Each file: a documented header, accelerate's keys, a DeepSpeed section accelerate's own loader takes"
    from accelerate.commands.config.config_args import load_config_from_file
    text = path.read_text()
    assert text.startswith('#') and 'Memory per GPU' in text, 'a header comment: what it is for and its memory effect'
    d = yaml.safe_load(text)
    assert all(k in d for k in NEEDED) and d['distributed_type'] == 'DEEPSPEED' and d['use_cpu'] is False
    ds = d['deepspeed_config']
    assert all(k in ds for k in DS_KEYS) and ds['zero_stage'] in (2, 3)
    assert ds['offload_optimizer_device'] in ('none', 'cpu') and ds['offload_param_device'] in ('none', 'cpu')
    if ds['zero_stage'] == 3: assert ds['zero3_init_flag'] is True and ds['zero3_save_16bit_model'] is True   # shard at load; save whole
    c = load_config_from_file(str(path))                       # what `accelerate launch --config_file` reads
    assert c.distributed_type == 'DEEPSPEED' and c.deepspeed_config['zero_stage'] == ds['zero_stage']
    expect = {'zero2.yaml': ('none', 'none'), 'zero3.yaml': ('none', 'none'), 'zero3_offload.yaml': ('cpu', 'cpu'),
              'zero3_offload_optimizer.yaml': ('cpu', 'none')}.get(path.name)
    if expect: assert (ds['offload_optimizer_device'], ds['offload_param_device']) == expect


@pytest.mark.parametrize('name', PRESETS)
def test_preset_names_an_existing_accelerate_config_and_its_processes(name):
    d = yaml.safe_load((PARAMS/name).read_text())
    lo = Launch(**d['launch'])                                 # only Launch's keys
    assert (ROOT/lo.config_file).exists() and lo.num_processes >= 1


def test_presets_are_what_their_commands_accept():
    "The presets hold only keys `coda train grpo/sft/judge --config` know (the `launch:` section is the pipeline's and ignored there)"
    import argparse
    from coda.grpo import add_grpo_args, grpo_command_options
    from coda.sft import add_sft_args, sft_options
    from coda.judge_train import add_judge_args, _judge_kwargs, train_judge
    import inspect
    g = add_grpo_args(argparse.ArgumentParser())
    for name in PRESETS[:3]:
        o, kw = grpo_command_options(g.parse_args(['--app', 'A', '--runs', 'r', '--model', 'm', '--config', str(PARAMS/name)]))
        assert 'launch' not in kw and kw['gradient_checkpointing'] is True
    s = sft_options(add_sft_args(argparse.ArgumentParser()).parse_args(['--runs', 'r', '--judge', 'j', '--model', 'm', '--out', 'o',
                                                                        '--config', str(PARAMS/'sft_paper.yaml')]))
    assert s['checkpointing'] is True and s['no_lora'] is True and 'launch' not in s
    kw = _judge_kwargs(add_judge_args(argparse.ArgumentParser()).parse_args(['--base', 'b', '--out', 'o', '--config', str(PARAMS/'judge_paper.yaml')]))
    assert kw['lora_r'] == 8 and kw['checkpointing'] is True and 'launch' not in kw
    known = set(inspect.signature(train_judge).parameters) | {'checkpointing', 'max_length', 'cpu'}
    assert set(kw) <= known, set(kw) - known


def test_paper_plan_launches_each_training_stage_with_its_preset(tmp_path):
    "`coda pipeline --config params/paper.yaml --dry-run`: each training stage's accelerate config and process count, files that exist"
    r = subprocess.run([sys.executable, '-m', 'coda.cli', 'pipeline', '--config', str(PARAMS/'paper.yaml'), '--dry-run', '--run', str(tmp_path/'paper')],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    runs = {}
    for block in r.stdout.split('\n[')[1:]:
        name = block.split(']', 1)[1].split(':', 1)[0].strip()
        runs[name] = [l.split('run:', 1)[1].strip() for l in block.splitlines() if l.strip().startswith('run:')]
    want = {'judge_train': ('zero3.yaml', 8), 'stage1_KAlgebra': ('zero3_offload_optimizer.yaml', 4), 'stage1_Celestia': ('zero3_offload_optimizer.yaml', 4),
            'stage2': ('zero3_offload_optimizer.yaml', 8)}
    for stage, (cfg, n) in want.items():
        (line,) = runs[stage]
        argv = shlex.split(line)
        argv = argv[next(i for i, a in enumerate(argv) if not a.startswith('CUDA_VISIBLE_DEVICES=')):]
        f = Path(argv[argv.index('--config_file') + 1])
        assert f.exists() and f.name == cfg and argv[argv.index('--num_processes') + 1] == str(n), (stage, line)
        gpus = line.split('CUDA_VISIBLE_DEVICES=')[1].split()[0].split(',')
        assert len(gpus) == n, (stage, line)                    # as many GPUs free as processes
        assert Path(argv[0]).exists() and argv[1:3] == ['-m', 'accelerate.commands.launch']
    assert 'trl vllm-serve --model Qwen/Qwen2.5-VL-32B-Instruct --tensor-parallel-size 2' in r.stdout   # Stage 1's generation server
    assert not (tmp_path/'paper').exists()


@pytest.fixture(scope='module')
def mixed(tmp_path_factory):
    "A checker-labelled run of six scidesk tasks (coda.mini.tinyjudge's scripted episodes): clean successes and failures"
    from coda.envs.scidesk import scidesk_tasks
    from coda.judge import checker_judgments
    from coda.mini.tinyjudge import record_mixed
    run = tmp_path_factory.mktemp('recipes')/'mixed'
    record_mixed([t for t in scidesk_tasks() if t.split == 'train'][::5][:6], run, p_fail=0.5, seed=1)
    checker_judgments(run)
    return run


def _launch(args, log):
    "Run `coda <args>` as the pipeline launches a training stage: coda.launch's command and environment, two CPU processes"
    lo = Launch(cpu=True, num_processes=2)
    argv = launch_command(lo, args)
    t0 = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, **launch_env(lo), 'HF_HUB_OFFLINE': '1'})
    log.write_text(p.stdout + p.stderr)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    return time.time() - t0


def test_sft_step_with_gradient_checkpointing_through_the_launcher(mixed, tiny, tmp_path):
    out = tmp_path/'sft'
    secs = _launch(['train', 'sft', '--runs', mixed, '--judge', 'checker', '--model', tiny, '--out', out, '--max-steps', '1',
                    '--gradient-checkpointing', '--per-device-train-batch-size', '1', '--gradient-accumulation-steps', '1', '--max-length', '8192'],
                   tmp_path/'sft.log')
    info = json.loads((out/'sft.json').read_text())
    print(f"accelerate launch, 2 CPU processes, SFT 1 step with gradient checkpointing: {secs:.1f} s")
    assert info['processes'] == 2 and info['steps'] == 1 and info['settings']['checkpointing'] is True and info['settings']['max_length'] == 8192
    assert (out/'adapter_model.safetensors').exists()


def test_judge_lora_step_through_the_launcher(mixed, tiny, tmp_path):
    out = tmp_path/'judge'
    secs = _launch(['train', 'judge', '--runs', mixed, '--labels', 'checker', '--base', tiny, '--out', out, '--steps', '1', '--lora-r', '8',
                    '--frames', '2', '--resolution', '320x200', '--gradient-checkpointing', '--cpu'], tmp_path/'judge.log')
    info = json.loads((out/'judge.json').read_text())
    print(f"accelerate launch, 2 CPU processes, judge LoRA 1 step + merge: {secs:.1f} s")
    assert info['processes'] == 2 and info['steps'] == 1 and info['lora_r'] == 8 and (out/'merged'/'model.safetensors').exists()

STAND_IN_TRL = r'''#!{python}
"""A stand-in for `trl vllm-serve` (vLLM cannot be installed on a CPU machine): records how it was started, answers
/health/ as TRL's server does (GET /health redirects to /health/), and stays up like the real one."""
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
a = sys.argv[1:]
open(os.environ['TRL_RECORD'], 'w').write(json.dumps({{'argv': a, 'gpus': os.environ.get('CUDA_VISIBLE_DEVICES')}}))
class H(BaseHTTPRequestHandler):
    def log_message(self, *x): pass
    def do_GET(self):
        if self.path == '/health': self.send_response(307); self.send_header('Location', '/health/'); self.end_headers(); return
        self.send_response(200 if self.path == '/health/' else 404); self.send_header('Content-Length', '2'); self.end_headers(); self.wfile.write(b'{{}}')
HTTPServer((a[a.index('--host') + 1], int(a[a.index('--port') + 1])), H).serve_forever()
'''

def test_generation_server_starts_as_the_plan_says(tmp_path, monkeypatch):
    "Stage 1's `trl vllm-serve` (a stand-in executable: vLLM is GPU-only) is started beside `serving.vllm` on GPUs from the pool, waited for, and stopped"
    from coda.launch import Servers
    from coda.pipeconfig import Serving
    from coda.procs import free_port
    trl = tmp_path/'bin'/'trl'
    trl.parent.mkdir()
    trl.write_text(STAND_IN_TRL.format(python=sys.executable))
    trl.chmod(0o755)
    monkeypatch.setenv('TRL_RECORD', str(tmp_path/'started.json'))
    s = Servers(Serving(kind='vllm', vllm=str(tmp_path/'bin'/'vllm'), gpus=8, port=free_port(), start_timeout=30), tmp_path/'logs', log=lambda *a: None)
    s.free = s.free[2:]                                    # the executor holds GPUs 0-1
    try:
        url = s.start_generation('Qwen/Qwen2.5-VL-32B-Instruct', 'generation-KAlgebra', 2)
        rec = json.loads((tmp_path/'started.json').read_text())
        assert rec['gpus'] == '2,3' and s.free == [4, 5, 6, 7]
        assert rec['argv'][:4] == ['vllm-serve', '--model', 'Qwen/Qwen2.5-VL-32B-Instruct', '--tensor-parallel-size'] and url.startswith('http://127.0.0.1:')
        proc = s.vllm['generation-KAlgebra']['proc']
        assert proc.poll() is None
    finally: s.close()
    assert proc.wait(30) is not None
