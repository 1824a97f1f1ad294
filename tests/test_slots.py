"""Copy slots in the miniature's training stages, as the pipeline runs them: the planner's tokenizer texts, its GRPO
prompts and the executor's view of its completions (`coda train grpo --codec coda.mini.slots:SlotCodec`, the executor
served over HTTP by coda's own server), and its SFT rows (`coda train sft --codec ...`), on oracle demonstrations."""
import argparse, json, re
from coda.mini.teacher import template_tasks
from coda.mini.oracle import record_demonstrations
from coda.mini.prepare import planner_texts, build_planner
from coda.mini.slots import slot_values, SlotCodec
from coda.judge import checker_judgments
from coda.serve import LocalServer

def _demos(tmp_path):
    tasks = template_tasks(['Algebra'], 3, seed=5, oracle=True)
    record_demonstrations(tasks, tmp_path/'demos', workers=1)
    checker_judgments(tmp_path/'demos')
    return tasks

def test_slot_planner_reads_and_trains_without_the_values(tmp_path):
    from coda.grpo import add_grpo_args, run_grpo_command, build_grpo_dataset
    from coda.sft import add_sft_args, run_sft_command
    tasks = _demos(tmp_path)
    values = {v for t in tasks for v in slot_values(t.instruction) if v.isdigit() and len(v) > 1}
    texts = planner_texts([tmp_path/'demos'], tasks, SlotCodec())
    assert values and not any(v in t for t in texts for v in values) and any('<v0>' in t for t in texts)
    build_planner(texts, tmp_path/'random', hidden=32, layers=1, vocab=512)
    prompts = build_grpo_dataset(tmp_path/'demos', 'checker', apps=['Algebra'])
    with LocalServer({'executor': {'backend': 'coda.mini.grounder:A11yGrounder'}}).start() as srv:
        a = add_grpo_args(argparse.ArgumentParser()).parse_args([
            '--app', 'Algebra', '--runs', str(tmp_path/'demos'), '--judge', 'checker', '--model', str(tmp_path/'random'), '--out', str(tmp_path/'spec'),
            '--executor-url', srv.url, '--executor-model', 'executor', '--num-generations', '2', '--max-steps', '1', '--no-lora',
            '--max-completion-length', '8', '--codec', 'coda.mini.slots:SlotCodec'])
        tr = run_grpo_command(a)
    rw = tr.reward_funcs[0]
    assert len(rw.history) == 1 and rw.failures == 0
    seen = ' '.join(p.get('text') or '' for r in tr.train_dataset['prompt'] for m in r for p in m['content'])
    assert '<v0>' in seen and not any(v in seen for v in values) and len(tr.train_dataset) == len(prompts)
    assert (tmp_path/'spec'/'final'/'config.json').exists()
    b = add_sft_args(argparse.ArgumentParser()).parse_args(['--runs', str(tmp_path/'demos'), '--judge', 'checker', '--model', str(tmp_path/'random'),
                                                            '--out', str(tmp_path/'sft'), '--max-steps', '2', '--no-lora', '--codec', 'coda.mini.slots:SlotCodec'])
    out = run_sft_command(b)
    info = json.loads((out/'sft.json').read_text())
    assert info['rows'] > 0 and info['codec'] == 'coda.mini.slots:SlotCodec' and (out/'config.json').exists()
