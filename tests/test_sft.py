"""coda.sft: judged clean successes of two specialists' runs -> one SFT dataset; one LoRA step on image+text rows
with the loss on the last planner reply only; adapter merge; the merged model answers through LocalChat."""
import argparse, json
from pathlib import Path
import pytest
from PIL import Image

from coda.store import RunStore, file_judgment, write_scripted_episode
from coda.records import Judgment, Labels
from coda.envs.scidesk import SciDesk, scidesk_tasks
from coda.sft import sft_examples, build_sft_dataset, sft_trainer, train_sft, merge_lora, add_sft_args, run_sft_command

ALG_OK = [("Thought: Click the expression field at the bottom.\nAction: click(start_box='(458,758)')", "click(start_box='<|box_start|>(458,758)<|box_end|>')"),
          ("Thought: Type the expression and press Enter.\nAction: type(content='17*23+4\\n')", "type(content='17*23+4\\n')"),
          ("Thought: The console shows 395.\nAction: ```ANS 395```", None)]
ALG_BAD = [ALG_OK[0], ("Thought: Type the expression.\nAction: type(content='17*23\\n')", "type(content='17*23\\n')"),
           ("Thought: The console shows 391.\nAction: ```ANS 391```", None)]
BIO_OK = [("Thought: Open the File menu.\nAction: click(start_box='(20,12)')", "click(start_box='<|box_start|>(20,12)<|box_end|>')"),
          ("Thought: The structure is loaded.\nAction: ```ANS done```", None)]


def _judgment(run, key, n_steps, clean, positives=(), negative=None, name='coda'):
    labels = Labels.success(n_steps) if clean else Labels(list(positives), negative)
    file_judgment(run, Judgment(key=key, judge=name, accepted=clean, label=int(clean), labels=labels, n_steps=n_steps, status='done'), fsync=False)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    "Two specialists' judged runs: Algebra (a clean success twice, a failure with a 1-step positive prefix), Biochem (one clean, one not)"
    root = tmp_path_factory.mktemp('sft-runs')
    alg, bio = root/'spec-algebra', root/'spec-biochem'
    a01 = next(t for t in scidesk_tasks(['Algebra']) if t.id == 'A-01')
    b01 = next(t for t in scidesk_tasks(['Biochem']) if t.id == 'A-01')
    for s, rep in enumerate([ALG_OK, ALG_OK, ALG_BAD]): write_scripted_episode(alg, a01, rep, SciDesk(), s)
    _judgment(alg, ('Algebra', 'A-01', 0), 3, True)
    _judgment(alg, ('Algebra', 'A-01', 1), 3, True)
    _judgment(alg, ('Algebra', 'A-01', 2), 3, False, positives=[0], negative=1)
    for s in range(2): write_scripted_episode(bio, b01, BIO_OK, SciDesk(), s)
    _judgment(bio, ('Biochem', 'A-01', 0), 2, True)
    _judgment(bio, ('Biochem', 'A-01', 1), 2, False, positives=[0, 1])
    return alg, bio


def test_dataset_clean_successes_dedup_counts(runs):
    alg, bio = runs
    rows, counts = sft_examples([alg, bio], 'coda')
    # only clean successes: Algebra's failure and Biochem's unclean episode give nothing; the repeated success is dropped
    assert {(r['app'], r['sample'], r['source']) for r in rows} == {('Algebra', 0, 'clean'), ('Biochem', 0, 'clean')}
    assert counts.loc['Algebra', ['episodes', 'clean', 'prefix', 'steps', 'duplicates', 'rows']].tolist() == [3, 2, 0, 6, 3, 3]
    assert counts.loc['Biochem', ['episodes', 'clean', 'rows']].tolist() == [2, 1, 2]
    assert counts.loc['total', 'rows'] == 5 == len(rows)
    # de-dup is keyed on (instruction, current screenshot digest, reply): off, every step of both successes stays
    assert len(sft_examples([alg], 'coda', dedup=False)[0]) == 6
    # each row: the planner's prompt at that step + its reply; image placeholders match the images
    r = next(r for r in rows if r['app'] == 'Algebra' and r['step'] == 2)
    assert [m['role'] for m in r['messages']] == ['system', 'assistant', 'user', 'assistant', 'user', 'assistant']
    assert r['messages'][-1]['content'] == [{'type': 'text', 'text': ALG_OK[2][0]}]
    assert sum(p['type'] == 'image' for m in r['messages'] for p in m['content']) == len(r['images']) == 2
    assert r['images'][-1] == (RunStore(alg).episode_dir('Algebra', 'A-01', 0)/'step_002.png').read_bytes()
    # behind the flag, the judge's positive steps of unclean episodes come in (here all duplicates of the clean ones)
    rows_p, counts_p = sft_examples([alg, bio], 'coda', positive_prefixes=True)
    assert counts_p.loc['Algebra', ['prefix', 'rows']].tolist() == [1, 3]        
    assert counts_p.loc['Biochem', ['prefix', 'rows']].tolist() == [1, 2]
    # apps filter; the dataset: PIL images on access, per-app counts
    ds, c = build_sft_dataset([alg, bio], 'coda', apps=['Biochem'])
    assert len(ds) == 2 and list(c.index) == ['Biochem', 'total']
    assert isinstance(ds[0]['images'][0], Image.Image) and ds[0]['images'][0].size == (1280, 800)
    assert set(ds.column_names) >= {'messages', 'images', 'app', 'task', 'sample', 'step', 'run'}


def test_episodes_that_ended_in_an_error_are_refused_whatever_the_judgment(runs, tmp_path):
    "A judgment file says clean success, the episode's own result says it crashed (or timed out): no rows"
    import shutil
    alg = tmp_path/'alg'
    shutil.copytree(runs[0], alg)
    for sample, res in ((0, dict(status='error', stop='ERROR')), (1, dict(status='timeout', stop='TIMEOUT'))):
        p = RunStore(alg).episode_dir('Algebra', 'A-01', sample)/'result.json'
        p.write_text(json.dumps({**json.loads(p.read_text()), **res, 'score': 0.0}))
    rows, counts = sft_examples([alg], 'coda')
    assert rows == [] and counts.loc['Algebra', ['episodes', 'clean', 'refused', 'rows']].tolist() == [3, 0, 2, 0]
    rows_p, counts_p = sft_examples([alg], 'coda', positive_prefixes=True)       # sample 2 (a plain failure) still gives its prefix
    assert {r['sample'] for r in rows_p} == {2} and counts_p.loc['Algebra', ['prefix', 'refused']].tolist() == [1, 2]


def test_lora_step_last_reply_loss_merge_localchat(runs, tiny, tmp_path):
    import torch
    from safetensors.torch import load_file
    from coda.models import LocalChat
    from coda.tiny import QWEN25VL_CHAT_TEMPLATE
    from coda.aio import run_sync
    from coda.records import replay
    alg, bio = runs
    ds, _ = build_sft_dataset([alg, bio], 'coda')
    i = next(k for k, r in enumerate(ds.select_columns(['app', 'step'])) if r['app'] == 'Algebra' and r['step'] == 2)

    # the trainer's own collator: only the last planner reply and its end token carry loss
    tr = sft_trainer(ds, tiny, tmp_path/'probe', max_steps=1)
    b = tr.data_collator([ds[i]])
    ids, labels = b['input_ids'][0], b['labels'][0]
    tok = tr.processing_class.tokenizer
    assert 'pixel_values' in b and int((ids == tr.model.config.image_token_id).sum()) > 0
    assert tok.decode(ids[labels != -100]) == ALG_OK[2][0] + '<|im_end|>\n'
    n = int((labels != -100).sum())
    assert (labels[:-n] == -100).all() and (labels[-n:] == ids[-n:]).all()

    # one LoRA step on image+text rows
    out = train_sft(ds, tiny, tmp_path/'sft', max_steps=1, lr=1e-2, per_device_train_batch_size=2)
    ad = load_file(out/'adapter_model.safetensors')
    assert ad and all('language_model' in k for k in ad)                             # text tower only
    assert all(v.abs().sum() > 0 for k, v in ad.items() if 'lora_B' in k)           # B starts at 0: the step changed it
    assert (out/'log_history.csv').exists() and json.loads((out/'sft.json').read_text())['steps'] == 1
    from transformers import AutoProcessor
    assert AutoProcessor.from_pretrained(out).chat_template == QWEN25VL_CHAT_TEMPLATE  # not the training template

    # merged: the targeted projections moved, every other (base) weight is unchanged
    merged = merge_lora(out, tmp_path/'merged')
    base_w, merged_w = load_file(Path(tiny)/'model.safetensors'), load_file(merged/'model.safetensors')
    assert set(base_w) == set(merged_w)
    changed = {k for k in base_w if not torch.equal(base_w[k], merged_w[k])}
    assert changed == {f'model.layers.{l}.self_attn.{m}.weight' for l in range(2) for m in ('q_proj', 'k_proj', 'v_proj', 'o_proj')}

    # the merged model answers a planner prompt with screenshots through LocalChat (random weights: any text)
    reply = run_sync(LocalChat(merged).chat(replay(RunStore(alg).episode('Algebra', 'A-01', 0), 1).planner_messages(), max_tokens=8))
    assert reply.prompt_tokens > 64 and reply.completion_tokens > 0


def test_resume_from_checkpoint(runs, tiny, tmp_path):
    alg, _ = runs
    ds, _ = build_sft_dataset([alg], 'coda')
    out = train_sft(ds, tiny, tmp_path/'sft', max_steps=1, save_steps=1)
    assert (out/'checkpoint-1').exists()
    info = json.loads((train_sft(ds, tiny, out, max_steps=2, save_steps=1, resume=True)/'sft.json').read_text())
    assert info['steps'] == 2 and info['resumed_from'].endswith('checkpoint-1')


def test_cli_args(runs, tiny, tmp_path):
    alg, _ = runs
    p = add_sft_args(argparse.ArgumentParser())
    a = p.parse_args(['--runs', str(alg), 'x', '--judge', 'coda', '--model', str(tiny), '--out', str(tmp_path), '--max-steps', '3', '--no-lora', '--resume'])
    assert a.runs == [str(alg), 'x'] and a.max_steps == 3 and a.no_lora and a.resume and not a.merge
    with pytest.raises(SystemExit, match='nothing to train'):
        run_sft_command(p.parse_args(['--runs', str(alg), '--judge', 'nobody', '--model', str(tiny), '--out', str(tmp_path)]))
