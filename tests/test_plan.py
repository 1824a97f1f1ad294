"""`coda plan`: parameter counts against transformers' own models, the ZeRO/LoRA/offload arithmetic, the paper config's plan
through the CLI, and the plan against one measured CPU training step of small Qwen2.5-VL models."""
import json, math, subprocess, sys
from dataclasses import replace
from pathlib import Path
import pytest
from coda.plan import (PAPER_ARCHS, KNOWN_SIZES, GiB, TrainSpec, arch_of, param_counts, lora_params, trained_params, train_memory,
                       serve_memory, accelerate_settings, plan_config, image_tokens, measure_fresh, plan_for_step, compare)
from coda.pipeconfig import load_config

ROOT = Path(__file__).parents[1]

@pytest.mark.parametrize('name', sorted(PAPER_ARCHS))
def test_param_counts_are_transformers_own(name):
    "param_counts of each paper model equals the parameter count of transformers' Qwen2_5_VL model built on the meta device"
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    a = PAPER_ARCHS[name]
    cfg = Qwen2_5_VLConfig(text_config=dict(hidden_size=a.hidden, num_hidden_layers=a.layers, intermediate_size=a.intermediate,
                                            num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, vocab_size=a.vocab),
                           vision_config=dict(depth=a.v_depth, hidden_size=a.v_hidden, intermediate_size=a.v_intermediate, num_heads=a.v_heads,
                                              out_hidden_size=a.hidden), tie_word_embeddings=a.tie)
    with torch.device('meta'): m = Qwen2_5_VLForConditionalGeneration(cfg)
    c = param_counts(a)
    assert sum(p.numel() for p in m.parameters()) == sum(c.values())
    assert sum(p.numel() for n, p in m.named_parameters() if '.visual.' in f'.{n}') == c['vision']
    known = KNOWN_SIZES.get(name, KNOWN_SIZES['Qwen/Qwen2.5-VL-7B-Instruct'])   # UI-TARS-1.5-7B is the 7B's architecture
    assert abs(sum(c.values()) / known - 1) < 0.02

def test_arch_of_a_saved_folder(tiny):
    "A local model folder is read through its config.json; the count matches the loaded model's"
    from transformers import AutoConfig, AutoModelForImageTextToText
    a = arch_of(tiny)
    assert a == arch_of(AutoConfig.from_pretrained(tiny)) and a.hidden == 64 and a.tie
    m = AutoModelForImageTextToText.from_pretrained(tiny)
    assert sum(p.numel() for p in m.parameters()) == sum(param_counts(a).values())
    with pytest.raises(ValueError, match='no architecture'): arch_of('someone/unknown-model')

def test_lora_params_are_peft_own(tiny):
    "lora_params equals the trainable parameters PEFT adds with coda's LoRA targets"
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText
    from coda.sft import TEXT_ATTENTION
    m = get_peft_model(AutoModelForImageTextToText.from_pretrained(tiny), LoraConfig(r=8, target_modules=TEXT_ATTENTION))
    assert sum(p.numel() for p in m.parameters() if p.requires_grad) == lora_params(arch_of(tiny), 8)

def test_image_tokens():
    assert image_tokens(1280, 800) == 46 * 29 and image_tokens(224, 224) == 64

def test_zero_sharding_offload_reference():
    "ZeRO 1/2/3 shard optimizer, then gradients, then weights over N; offload empties the GPU's part; the reference copy only for full weights"
    a = PAPER_ARCHS['Qwen/Qwen2.5-VL-7B-Instruct']
    s = TrainSpec('t', a, processes=4, lora=False, deepspeed=True, tokens=512)
    m = {z: train_memory(replace(s, zero=z)) for z in range(4)}
    p, total = trained_params(a, False), sum(param_counts(a).values())
    assert math.isclose(m[0]['optimizer'], 12 * p / GiB) and math.isclose(m[1]['optimizer'], 3 * p / GiB)
    assert math.isclose(m[1]['grads'], 2 * p / GiB) and math.isclose(m[2]['grads'], p / 2 / GiB)
    assert math.isclose(m[2]['weights'], 2 * total / GiB)
    embed2 = 2 * 2 * a.vocab * a.hidden / GiB   # ZeRO-3 gathers two modules at once: here the embedding and the output head
    assert math.isclose(m[3]['weights'], m[2]['weights'] / 4 + embed2)
    off = train_memory(replace(s, zero=3, offload_optimizer=True, offload_param=True))
    assert off['optimizer'] == 0 and off['weights'] < 3 and off['cpu'] > 12 * p / GiB
    assert math.isclose(train_memory(replace(s, optim8bit=True))['optimizer'], 6 * p / GiB)
    assert train_memory(replace(s, beta=0.04))['reference'] > 0 and train_memory(replace(s, beta=0.04, lora=True))['reference'] == 0
    assert train_memory(replace(s, beta=0.0))['reference'] == 0

def test_serving_kv():
    "A token's KV cache per GPU is 2 x layers x ceil(kv_heads / tp) x head_dim x 2 bytes"
    a = PAPER_ARCHS['Qwen/Qwen2.5-VL-72B-Instruct']
    m = serve_memory(a, tp=4, max_len=1000)
    assert math.isclose(m['per_seq'], 2 * 80 * 2 * 128 * 2 * 1000 / GiB)
    assert not serve_memory(a, tp=2)['fits'] and serve_memory(a, tp=4)['fits']

def test_accelerate_configs_are_read(tmp_path):
    "Every committed accelerate config's ZeRO settings are what the plan reads; a deepspeed_config_file is followed"
    import yaml
    for f in sorted((ROOT/'params'/'accelerate').glob('*.yaml')):
        ds, got = (yaml.safe_load(f.read_text()) or {}).get('deepspeed_config') or {}, accelerate_settings(f)
        if 'zero_stage' in ds: assert got['zero'] == ds['zero_stage'], f
        assert got['offload_optimizer'] == (str(ds.get('offload_optimizer_device', 'none')) not in ('none', 'None')), f
    (tmp_path/'ds.json').write_text(json.dumps({'zero_optimization': {'stage': 2, 'offload_optimizer': {'device': 'cpu'}}}))
    (tmp_path/'acc.yaml').write_text(f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {tmp_path/'ds.json'}\n")
    assert accelerate_settings(tmp_path/'acc.yaml') == dict(deepspeed=True, zero=2, offload_optimizer=True, offload_param=False)

def _coda_plan(*args):
    return subprocess.run([sys.executable, '-m', 'coda.cli', 'plan', *args], capture_output=True, text=True, timeout=120, cwd=ROOT)

def test_cli_paper_config():
    "`coda plan --config params/paper.yaml` prints every stage and server; its exit status says whether it fits"
    r = _coda_plan('--config', 'params/paper.yaml', '--gpu-mem', '80', '--gpus', '8')
    for part in ('stage1 GRPO', 'stage2 SFT', 'judge LoRA', 'planner', 'executor', 'judge ', 'teacher', 'GiB per GPU'): assert part in r.stdout, part
    fits = plan_config(load_config('params/paper.yaml'), 80, 8)['fits']
    assert r.returncode == (0 if fits else 1), r.stdout + r.stderr
    assert ('the plan FITS' in r.stdout) == fits

def test_cli_refuses_what_cannot_fit():
    "The issue's plan (6 processes, full weights, ZeRO-3 without offload) does not fit 80 GiB; the plan says what to change and exits 1"
    r = _coda_plan('--config', 'params/paper.yaml', '--set', 'stage1.launch={config_file: params/accelerate/zero3.yaml, num_processes: 6, generation_gpus: 0}')
    assert r.returncode == 1, r.stdout + r.stderr
    block = r.stdout.split('stage1 GRPO')[1].split('stage2')[0]
    assert 'DOES NOT FIT' in block and 'change: optimizer states offloaded to CPU' in block
    assert 'the plan DOES NOT FIT' in r.stdout

def test_colocated_vllm_share():
    "A colocated vLLM whose share cannot hold the planner's weights is refused, with the utilization it needs"
    cfg = load_config('params/paper.yaml', ['stage1.base=params/grpo_paper_colocate.yaml', 'stage1.vllm_gpu_memory_utilization=0.2',
                                            'stage1.vllm_tensor_parallel_size=1', 'stage1.vllm_enable_sleep_mode=false'])
    c = plan_config(cfg)['stages'][0]
    assert not c['fits'] and any('vllm_gpu_memory_utilization' in a for a in c['advice'])
    assert c['memory']['vllm'] == pytest.approx(16.0)

MEASURED = [('tiny', dict(hidden=384, layers=6, heads=6, kv_heads=2, vocab=8192), dict(text=256, batch=2)),
            ('tiny, checkpointing', dict(hidden=384, layers=6, heads=6, kv_heads=2, vocab=8192), dict(text=256, batch=2, checkpointing=True)),
            ('tiny, LoRA r8', dict(hidden=384, layers=6, heads=6, kv_heads=2, vocab=8192), dict(text=256, batch=2, lora_r=8)),
            ('small', dict(hidden=1024, layers=12, heads=16, kv_heads=4, vocab=32768), dict(text=512, batch=2))]

@pytest.mark.parametrize('name,ck,sk', MEASURED, ids=[m[0] for m in MEASURED])
def test_plan_against_a_measured_step(name, ck, sk):
    "One fp32 AdamW step: state bytes within 3 %, autograd's saved bytes within 5 %, plan/measured peak RSS increase within 0.3-2 (a noisy figure; the notebook prints it)"
    meas, plan = measure_fresh(ck, **sk), plan_for_step(ck, **sk)
    assert meas['n_params'] == plan['n_params']
    r = compare(meas, plan)
    print(name, {k: round(v, 3) for k, v in r.items()})
    for k in ('params', 'grads', 'optimizer'): assert abs(r[k] - 1) < 0.03, (k, r)
    assert abs(r['saved'] - 1) < 0.05, r
    assert 0.3 <= r['rss_peak'] <= 2.0, r   # the process's peak moves with the allocator and the machine's load: only gross errors fail
